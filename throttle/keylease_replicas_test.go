package throttle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLeaseAndAnotherReplicasRefundsStayWithinTheCapacity: while replica
// A's lease is out (its tokens spent in Redis), replica B's refunds bring
// the bucket in Redis back up — as far as the capacity less what is out on
// leases, never to the capacity itself: a burst of both replicas then
// admits at most the capacity, as the bucket would without the lease.
//
// B's 40 requests are open while the bucket refills to its capacity; the
// test dates the bucket back instead of waiting for the refill, and the
// rate is a micro-token a second, so that nothing refills during the
// burst.
func TestLeaseAndAnotherReplicasRefundsStayWithinTheCapacity(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		a := f.store
		b := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		bk := Bucket{Key: f.key("replica-refunds"), Limit: Limit{Rate: slow.Rate, Capacity: 80}}
		req := Request{Bucket: bk, Cost: 1, MaxInFlight: 64}
		var open []*Ticket
		for range 40 {
			x := mustAdmit(t, b, req)
			if !x.Allowed {
				t.Fatalf("B refused %+v", x)
			}
			open = append(open, x.Ticket)
		}
		datedBack(t, f, bk.Key) // it refills to 80, B's 40 still open
		for range 2 {           // the first shows the bucket, the second takes a lease
			x := mustAdmit(t, a, req)
			if !x.Allowed {
				t.Fatalf("A refused %+v", x)
			}
			x.Ticket.Settle(1)
		}
		if st := a.Stats(); st.Leases != 1 {
			t.Fatalf("stats %+v: want one lease", st)
		}
		openNow(t, f, bk.Key, 41) // A's finishes have landed: B's 40 and the lease are open
		for _, x := range open {  // B's requests cost nothing: 40 refunded
			x.Settle(0)
		}
		flushWithin(t, b)
		// Without the lease the bucket would hold min(80, 78 + 40) = 80.
		admitted := 0
		for i := 0; i < 400; i++ {
			x := mustAdmit(t, []*RedisStore{a, b}[i%2], req)
			if x.Allowed {
				admitted++
				x.Ticket.Settle(1)
			}
		}
		if admitted > 80 {
			t.Fatalf("A and B admitted %d requests of 1 with a bucket of 80 (A's lease %d in process)", admitted, a.Stats().Local)
		}
		t.Logf("admitted %d; A: %+v", admitted, a.Stats())
	})
}

// datedBack rewrites a caller's bucket as of a billion seconds earlier:
// the next call refills it to its capacity, as if that time had passed.
func datedBack(t *testing.T, f *redisFixture, key string) {
	t.Helper()
	ctx := context.Background()
	raw, err := f.rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	fields := strings.Fields(raw)
	var sec int64
	if _, err := fmt.Sscan(fields[1], &sec); err != nil {
		t.Fatalf("%s holds %q: %v", key, raw, err)
	}
	fields[1] = fmt.Sprint(sec - 1e9)
	if err := f.rdb.Do(ctx, "SET", key, strings.Join(fields, " "), "KEEPTTL").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBusyLeaseAtItsHoldCountsNoLonger: a lease whose hold ends while it
// runs a request hands its tokens back at once, by a move that keeps the
// running request's slot, rather than when the request finishes. While
// Redis counted it as leased, the bucket's refill stopped at the capacity
// less the lease, and the replica holding it refused what it would admit
// without leases. Each store runs the same steps on its own caller: a
// bucket at half, a request admitted (on the lease's last token, on the
// leased store) and kept running past the hold, the bucket refilled to
// the brim, then a burst.
func TestBusyLeaseAtItsHoldCountsNoLonger(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		run := func(name string, s *RedisStore) int {
			bk := Bucket{Key: f.key("busy-at-hold-" + name), Limit: Limit{Rate: slow.Rate, Capacity: 80}}
			big := mustAdmit(t, s, Request{Bucket: bk, Cost: 40, MaxInFlight: 500})
			big.Ticket.Settle(40)
			req := Request{Bucket: bk, Cost: 1, MaxInFlight: 500}
			var long Admission
			for range 40 {
				long = mustAdmit(t, s, req)
				if ls, ok := long.Ticket.owner.(*keyLease); ok {
					s.mu.Lock()
					left := ls.left
					s.mu.Unlock()
					if left < toMicro(1) {
						break // the lease's last token: it runs on
					}
				}
				long.Ticket.Settle(1)
			}
			within(t, name+": the lease's hold ends", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				ls := s.leases[bk.Key]
				return ls == nil || ls.done
			})
			within(t, name+": nothing queued", func() bool { // not Flush: that waits for the running request
				s.mu.Lock()
				defer s.mu.Unlock()
				l := s.lanes[bk.Key]
				return l == nil || (!l.busy && len(l.queue) == 0)
			})
			datedBack(t, f, bk.Key) // refilled to what Redis lets it hold
			admitted := 0
			var open []*Ticket
			for range 100 {
				if x := mustAdmit(t, s, req); x.Allowed {
					admitted++
					open = append(open, x.Ticket)
				}
			}
			for _, x := range append(open, long.Ticket) {
				x.Settle(1)
			}
			return admitted
		}
		plain := run("plain", NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1}))
		leased := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: 20 * time.Millisecond})
		got := run("leased", leased)
		if st := leased.Stats(); st.Leases == 0 {
			t.Fatalf("no lease was taken: %+v", st)
		}
		if got != plain {
			t.Errorf("after a lease's hold ended while it ran a request, a burst admitted %d; without leases %d", got, plain)
		}
	})
}

// within polls cond until it holds, failing the test as what after 10 s.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// TestStoredReadsABucketWithALeaseOut: Stored, which operators and the
// chaos suite read buckets with, reads a record that counts leased tokens
// (two more fields) as it reads any other.
func TestStoredReadsABucketWithALeaseOut(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		bk := Bucket{Key: f.key("stored-leased"), Limit: Limit{Rate: slow.Rate, Capacity: 80}}
		req := Request{Bucket: bk, Cost: 1, MaxInFlight: 64}
		for range 2 { // the first shows the bucket, the second takes a lease
			mustAdmit(t, f.store, req).Ticket.Settle(1)
		}
		within(t, "nothing queued", func() bool {
			f.store.mu.Lock()
			defer f.store.mu.Unlock()
			l := f.store.lanes[bk.Key]
			return l == nil || (!l.busy && len(l.queue) == 0)
		})
		raw, err := f.rdb.Get(context.Background(), bk.Key).Result()
		if err != nil || len(strings.Fields(raw)) != 9 {
			t.Fatalf("the bucket holds %q (%v), want a record with its lease counted", raw, err)
		}
		tok, open, found, err := Stored(context.Background(), f.rdb, bk.Key)
		if err != nil || !found || open != 1 || tok >= 79 {
			t.Fatalf("Stored of %q: %v tokens, %d open, found %v, %v", raw, tok, open, found, err)
		}
	})
}

// TestFullBucketCallerIsLeasedOnEveryReplica: a caller whose requests
// come slower than its bucket refills, sent to two replicas in turn, is
// admitted on leases — a call per many requests, not one per request —
// and its bucket ends where the in-process store's does: each lease's
// give-back replays what it admitted at the moments it did, so the
// bucket's cap while the lease is out costs no refill (beyond what the
// other replica's writes cut off), and gains none.
func TestFullBucketCallerIsLeasedOnEveryReplica(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		replicas := []*RedisStore{
			NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout}),
			NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout}),
		}
		mem := NewMemoryStore(MemoryOptions{})
		bk := Bucket{Key: f.key("full-on-replicas"), Limit: Limit{Rate: 50, Capacity: 100}}
		req := Request{Bucket: bk, Cost: 1, MaxInFlight: 8}
		const n = 300
		for i := range n {
			got, want := mustAdmit(t, replicas[i%2], req), mustAdmit(t, mem, req)
			if !got.Allowed || !want.Allowed {
				t.Fatalf("request %d: replica %+v, in-process %+v", i, got, want)
			}
			got.Ticket.Settle(0.05)
			want.Ticket.Settle(0.05)
			time.Sleep(2 * time.Millisecond)
		}
		calls, leases := 0, 0
		for _, r := range replicas {
			st := r.Stats()
			calls, leases = calls+int(st.Calls), leases+int(st.Leases)
		}
		if leases < 2 || float64(calls)/n > 0.25 {
			t.Errorf("%d calls for %d requests (%d leases): want at most a call per 4 requests", calls, n, leases)
		}
		for _, r := range replicas {
			flushWithin(t, r)
		}
		got, want := mustPeek(t, replicas[0], bk).Remaining, mustPeek(t, mem, bk).Remaining
		if got > want+0.05 || got < want-1 {
			t.Errorf("bucket after the leases went back: %v; in-process %v", got, want)
		}
	})
}
