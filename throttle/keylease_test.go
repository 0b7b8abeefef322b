package throttle

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaseMatchesTheBucketWithoutIt: a caller's requests, one after
// another, get the same decisions from a RedisStore that admits them on
// leases as from the in-process store, and leave the bucket the same once
// the leases are back — every admission, refusal, refund and debit.
func TestLeaseMatchesTheBucketWithoutIt(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		leaseMatchesTheBucket(t, f, f.store, "twin")
	})
}

// leaseMatchesTheBucket runs 600 requests on store and on an in-process
// store, settled alike: the same decisions, and the same bucket at the end.
func leaseMatchesTheBucket(t *testing.T, f *redisFixture, store *RedisStore, name string) {
	{
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key(name), Limit: Limit{Rate: 1e-6, Capacity: 40}}
		rng := rand.New(rand.NewPCG(7, 11))
		costs := []float64{0.25, 0.5, 1, 2}
		admitted, refused := 0, 0
		for i := range 600 {
			req := Request{Bucket: b, Cost: costs[rng.IntN(len(costs))], Debt: 3, MaxInFlight: 4}
			got, want := mustAdmit(t, store, req), mustAdmit(t, mem, req)
			if got.Allowed != want.Allowed || got.Refusal != want.Refusal {
				t.Fatalf("request %d (cost %v): leased store %+v, in-process store %+v", i, req.Cost, got, want)
			}
			if !got.Allowed {
				refused++
				continue
			}
			admitted++
			cost := req.Cost * rng.Float64() * 1.1 // mostly refunds, some debits
			got.Ticket.Settle(cost)
			want.Ticket.Settle(cost)
		}
		st := store.Stats()
		if st.Local == 0 || refused == 0 || admitted < 50 {
			t.Fatalf("%d admitted (%d in process), %d refused: the run must exercise leases and refusals", admitted, st.Local, refused)
		}
		flushWithin(t, store)
		got, want := mustPeek(t, store, b), mustPeek(t, mem, b)
		if math.Abs(got.Remaining-want.Remaining) > 1e-6 {
			t.Fatalf("bucket after the leases went back: %v, in-process %v", got.Remaining, want.Remaining)
		}
		t.Logf("%d admitted (%d in process, %d leases, %d calls), %d refused", admitted, st.Local, st.Leases, st.Calls, refused)
	}
}

// TestLeaseSavesCalls: a caller that spends faster than its bucket
// refills, one request at a time, makes a call per LeaseRequests requests
// or so, and so does one whose bucket stays full: its lease's give-back
// replays what it admitted at the moments it did, so no refill is lost to
// the bucket's cap while the lease is out. Each request costs less than
// its price.
func TestLeaseSavesCalls(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, c := range []struct {
			name     string
			limit    Limit
			min, max float64 // calls per request
		}{
			{"faster than its refill", Limit{Rate: 1, Capacity: 1e6}, 0, 0.25},
			{"slower than its refill", Limit{Rate: 1e6, Capacity: 1e9}, 0, 0.25},
		} {
			s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout})
			req := Request{Bucket: Bucket{Key: f.key(c.name), Limit: c.limit}, Cost: 1}
			const n = 400
			for range n {
				a := mustAdmit(t, s, req)
				if !a.Allowed {
					t.Fatalf("%s: refused %+v", c.name, a)
				}
				a.Ticket.Settle(0.5) // a refund: at the brim too
			}
			st := s.Stats()
			calls := float64(st.Calls) / n
			if calls < c.min || calls > c.max || st.Local+st.Admits != n {
				t.Fatalf("%s: %.3f calls per request (want %v–%v), %d in process + %d sent", c.name, calls, c.min, c.max, st.Local, st.Admits)
			}
			flushWithin(t, s)
			if got := mustPeek(t, s, req.Bucket).Remaining; got > c.limit.Capacity || got < c.limit.Capacity-n-1 {
				t.Fatalf("%s: bucket holds %v after %d requests of 1", c.name, got, n)
			}
		}
	})
}

// TestLeaseIsWhatOtherReplicasSee: a replica's lease is spent tokens and
// one open request to every other replica, until it goes back when its
// hold ends; it then counts again, exactly. The holder keeps the
// fixture's 30 s hold, far longer than the test, and the test ends it by
// firing the hold's timer at once; the bucket may refill a micro-token a
// second the test lasts (slowHolds).
func TestLeaseIsWhatOtherReplicasSee(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		holder := f.store
		other := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		b := Bucket{Key: f.key("replicas"), Limit: Limit{Rate: slow.Rate, Capacity: 80}}
		req := Request{Bucket: b, Cost: 1, MaxInFlight: 2}
		start := time.Now()
		for range 3 { // the first shows the bucket, the second takes a lease, the third is in process
			a := mustAdmit(t, holder, req)
			if !a.Allowed {
				t.Fatalf("refused %+v", a)
			}
			a.Ticket.Release()
		}
		if st := holder.Stats(); st.Leases != 1 || st.Local != 1 {
			t.Fatalf("stats %+v: want one lease, one request admitted on it", st)
		}
		// The lease holds 8 tokens (8 requests of 1), one spent on the third.
		if got := mustPeek(t, holder, b).Remaining; !slowHolds(toMicro(got), 77, start) {
			t.Fatalf("the holder sees %v, want 77", got)
		}
		if got := mustPeek(t, other, b).Remaining; !slowHolds(toMicro(got), 70, start) {
			t.Fatalf("another replica sees %v, want 70 (the lease's 7 are spent to it)", got)
		}
		openNow(t, f, b.Key, 1) // the holder's releases have landed: the lease's slot is left
		a := mustAdmit(t, other, req)
		if !a.Allowed {
			t.Fatalf("one slot of 2 is the lease's, one is free: %+v", a)
		}
		if b := mustAdmit(t, other, req); b.Allowed || b.Refusal != RefusedInFlight {
			t.Fatalf("the lease's slot counts for the other replica: %+v", b)
		}
		a.Ticket.Release()
		flushWithin(t, other) // its release lands
		holder.mu.Lock()
		hold := holder.leases[b.Key].timer
		holder.mu.Unlock()
		hold.Reset(0)            // the hold ends now
		settled(t, other, b, 76) // 77, less the other replica's request
		if st := f.state(b.Key); st.b.n != 0 {
			t.Fatalf("%d requests open after the lease went back", st.b.n)
		}
	})
}

// TestLeaseRefusalTakesItsTokensBack: a request Redis refuses while the
// caller's lease runs a request of its own, and that the lease's tokens
// would pay, is asked again at once with the lease's tokens handed back
// and admitted — as without the lease — while the running request keeps a
// slot of its own in Redis until it finishes.
func TestLeaseRefusalTakesItsTokensBack(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("takes-back"), Limit: Limit{Rate: 1e-6, Capacity: 16}}
		req := Request{Bucket: b, Cost: 1, MaxInFlight: 8}
		for range 2 {
			mustAdmit(t, f.store, req).Ticket.Settle(1)
		}
		// The bucket: 16 - 2 - a lease of 2 (an eighth) = 12; the lease runs r.
		r := mustAdmit(t, f.store, req)
		if st := f.store.Stats(); st.Local != 1 {
			t.Fatalf("the third request was not admitted on the lease: %+v", st)
		}
		big := mustAdmit(t, f.store, Request{Bucket: b, Cost: 12, MaxInFlight: 8})
		if !big.Allowed {
			t.Fatalf("12 of 12: %+v", big)
		}
		a := mustAdmit(t, f.store, req) // r still runs
		if !a.Allowed {
			t.Fatalf("the lease's last token was refused: %+v", a)
		}
		openNow(t, f, b.Key, 3) // big, a, and r's own slot
		r.Ticket.Settle(1)
		a.Ticket.Settle(1)
		big.Ticket.Settle(12)
		openNow(t, f, b.Key, 0)
		flushWithin(t, f.store)
		if got := mustPeek(t, f.store, b).Remaining; got != 0 {
			t.Fatalf("bucket holds %v, want 0 (16 spent)", got)
		}
	})
}

// TestLeasesNeverAdmitMoreThanTheBucket: replicas each taking leases of
// one caller's bucket, with many requests at once, admit at most what it
// holds, and leave it exactly that much lower.
func TestLeasesNeverAdmitMoreThanTheBucket(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("replicas-burst"), Limit: Limit{Rate: 1e-6, Capacity: 200}}
		stores := []*RedisStore{NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout}), NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout})}
		var spent atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			s := stores[i%2]
			wg.Go(func() {
				for range 60 {
					a, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 1, MaxInFlight: 64})
					if err != nil {
						t.Error(err)
						return
					}
					if a.Allowed {
						spent.Add(1)
						a.Ticket.Settle(1)
					}
				}
			})
		}
		wg.Wait()
		for _, s := range stores {
			flushWithin(t, s)
		}
		if spent.Load() > 200 || spent.Load() < 150 {
			t.Fatalf("admitted %d requests of 1 from a bucket of 200", spent.Load())
		}
		if got := mustPeek(t, stores[0], b).Remaining; math.Abs(got-(200-float64(spent.Load()))) > 1e-6 {
			t.Fatalf("bucket holds %v after %d admitted", got, spent.Load())
		}
		t.Logf("admitted %d; leases %d and %d", spent.Load(), stores[0].Stats().Leases, stores[1].Stats().Leases)
	})
}

// openNow waits until the caller's open requests in Redis are n.
func openNow(t *testing.T, f *redisFixture, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for f.state(key).b.n != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests open, want %d", f.state(key).b.n, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
