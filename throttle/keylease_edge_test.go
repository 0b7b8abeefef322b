package throttle

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// withBusyLease admits two requests of 1 through Redis (the second takes a
// lease of 8 from a bucket of 80) and a third on the lease, which it keeps
// running; mem, when set, gets the same three. Redis then holds 70 and the
// lease 7. s must hold its leases for the test (testLeaseHold).
func withBusyLease(t *testing.T, s *RedisStore, mem Store, b Bucket) (r, rm Admission) {
	t.Helper()
	req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
	for range 2 {
		mustAdmit(t, s, req).Ticket.Settle(1)
		if mem != nil {
			mustAdmit(t, mem, req).Ticket.Settle(1)
		}
	}
	r = mustAdmit(t, s, req)
	if st := s.Stats(); st.Local != 1 || st.Leases != 1 {
		t.Fatalf("the third request is not on a lease: %+v", st)
	}
	if mem != nil {
		rm = mustAdmit(t, mem, req)
	}
	return r, rm
}

// sameBucket fails unless s, its leases back, holds what mem holds.
func sameBucket(t *testing.T, s *RedisStore, mem Store, b Bucket) {
	t.Helper()
	flushWithin(t, s)
	if got, want := mustPeek(t, s, b).Remaining, mustPeek(t, mem, b).Remaining; got != want {
		t.Fatalf("bucket with the lease back: %v, in-process store %v", got, want)
	}
}

// TestLeaseDebitWhileBusy: a debit of a request admitted through Redis
// while the lease runs a request is paid from the lease first, down to the
// same debt floor as the bucket holding the lease's tokens.
func TestLeaseDebitWhileBusy(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("debit-busy"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b)
		big := Request{Bucket: b, Cost: 70, Debt: 3, MaxInFlight: 8}
		x, xm := mustAdmit(t, f.store, big), mustAdmit(t, mem, big)
		if !x.Allowed || !xm.Allowed {
			t.Fatalf("70 of 77: %+v / %+v", x, xm)
		}
		x.Ticket.Settle(80)
		xm.Ticket.Settle(80)
		r.Ticket.Settle(1)
		rm.Ticket.Settle(1)
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseRefusalItCannotChangeStands: a refusal that the lease's tokens
// could not have turned into an admission is answered at once, without
// waiting for the lease's running request.
func TestLeaseRefusalItCannotChangeStands(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("refusal-stands"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, f.store, nil, b)
		defer r.Ticket.Settle(1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := f.store.Admit(ctx, Request{Bucket: b, Cost: 79, Debt: 3, MaxInFlight: 8})
		if err != nil || a.Allowed || a.Refusal != RefusedBucket || ctx.Err() != nil {
			t.Fatalf("79 of 77: %+v, %v, context %v", a, err, ctx.Err())
		}
	})
}

// TestLeaseShadowWhileBusy: a shadow request that the bucket and the
// lease's tokens together pay is admitted for real, as it would be without
// the lease, once the lease's request is done and the lease back.
func TestLeaseShadowWhileBusy(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("shadow-busy"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b)
		rm.Ticket.Settle(1)
		time.AfterFunc(50*time.Millisecond, func() { r.Ticket.Settle(1) })
		req := Request{Bucket: b, Cost: 75, Debt: 3, MaxInFlight: 8, Shadow: true}
		got, want := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if got.Shadow || want.Shadow || got.Ticket.Paid() != 75 || want.Ticket.Paid() != 75 {
			t.Fatalf("shadow request of 75 with 77 in all: leased store shadow=%v paid %v, in-process shadow=%v paid %v",
				got.Shadow, got.Ticket.Paid(), want.Shadow, want.Ticket.Paid())
		}
		got.Ticket.Settle(75)
		want.Ticket.Settle(75)
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseGiveBackSurvivesAFullQueue: an admit refused for a full queue
// still gives the lease it took back.
func TestLeaseGiveBackSurvivesAFullQueue(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, MaxPending: 3, FinishDelay: time.Second, LeaseHold: testLeaseHold})
		b := Bucket{Key: f.key("pending"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, s, nil, b)
		y := mustAdmit(t, s, Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}) // the lease is busy: a call
		y.Ticket.Settle(1)                                                         // one finish queued
		r.Ticket.Settle(1)
		if _, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 8, Debt: 3, MaxInFlight: 8}); err == nil {
			t.Fatal("four operations queued with MaxPending 3")
		}
		flushWithin(t, s)
		if n, got := f.state(b.Key).b.n, mustPeek(t, s, b).Remaining; n != 0 || got != 76 {
			t.Fatalf("after Flush %d open in Redis (want 0), bucket %v (want 76)", n, got)
		}
	})
}

// TestLeaseHeadersMatchTheBucketWithoutIt: the budget headers of requests
// admitted on leases, and of the others, read as the in-process store's.
// The bucket refills a micro-token a second, and each store credits it in
// whole micro-tokens per write of the bucket, each on its own clock and
// at its own writes (Redis at its calls, the lease's estimate from the
// call that showed the bucket, the in-process store at every operation):
// they agree exactly while the test runs within a second, and a loaded
// machine that takes n seconds lets them differ by up to n micro-tokens,
// that is n seconds of reset and retry. A refund or a lease's tokens left
// out of a header is 62,500 micro-tokens at the least.
func TestLeaseHeadersMatchTheBucketWithoutIt(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("headers"), Limit: Limit{Rate: 1e-6, Capacity: 40}}
		costs := []float64{0.25, 0.5, 1, 2}
		start := time.Now() // before either bucket exists
		for i := range 300 {
			req := Request{Bucket: b, Cost: costs[(i*7)%4], Debt: 3, MaxInFlight: 4}
			got, want := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
			refill := math.Floor(time.Since(start).Seconds()) // micro-tokens either may have credited
			d := math.Round(toMicro(got.Result.Remaining) - toMicro(want.Result.Remaining))
			dr := (got.Result.ResetAfter - want.Result.ResetAfter).Seconds()
			dx := (got.Result.RetryAfter - want.Result.RetryAfter).Seconds()
			if got.Allowed != want.Allowed || math.Abs(d) > refill || math.Abs(dr) > refill || math.Abs(dx) > refill {
				t.Fatalf("request %d (cost %v, %d on leases so far, %v s of refill): allowed %v, remaining %v, reset %v, retry %v; in-process %v, %v, %v, %v",
					i, req.Cost, f.store.Stats().Local, refill, got.Allowed, got.Result.Remaining, got.Result.ResetAfter, got.Result.RetryAfter,
					want.Allowed, want.Result.Remaining, want.Result.ResetAfter, want.Result.RetryAfter)
			}
			if got.Allowed {
				c := req.Cost * float64(i%5) / 4
				got.Ticket.Settle(c)
				want.Ticket.Settle(c)
			}
		}
		if f.store.Stats().Local == 0 {
			t.Fatal("no request was admitted on a lease")
		}
	})
}

// gatedScripter holds every script call while its gate is set: a slow
// Redis, to catch an operation queued while a call is on its way.
type gatedScripter struct {
	redis.Scripter
	gate atomic.Pointer[chan struct{}]
	sent chan struct{}
}

func (g *gatedScripter) wait() {
	if c := g.gate.Load(); c != nil {
		g.sent <- struct{}{}
		<-*c
	}
}

func (g *gatedScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	g.wait()
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (g *gatedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	g.wait()
	return g.Scripter.Eval(ctx, script, keys, args...)
}

// TestLeaseDebitWhileAsked: a debit queued while the call asking for a
// lease is on its way lands after the lease is given back, down to the
// same debt floor as without the lease.
func TestLeaseDebitWhileAsked(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second})
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("debit-asked"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		big := Request{Bucket: b, Cost: 70, Debt: 3, MaxInFlight: 8}
		x, xm := mustAdmit(t, s, big), mustAdmit(t, mem, big)
		gate := make(chan struct{})
		g.gate.Store(&gate)
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
		done := make(chan Admission, 1)
		go func() { done <- mustAdmit(t, s, req) }()
		<-g.sent // the call asking for the lease is on its way
		g.gate.Store(nil)
		x.Ticket.Settle(80)
		close(gate)
		a := <-done
		am := mustAdmit(t, mem, req)
		xm.Ticket.Settle(80)
		a.Ticket.Settle(1)
		am.Ticket.Settle(1)
		if st := s.Stats(); st.Leases != 1 {
			t.Fatalf("no lease taken: %+v", st)
		}
		sameBucket(t, s, mem, b)
	})
}

// TestLeaseHoldEndsWhileBusy: a lease whose hold ends (LeaseHold's timer,
// called here at once) while its slot runs a request is not given back
// then: it admits nothing more — the caller's next request goes to Redis,
// where the lease's slot still counts against the in-flight cap — and it
// goes back when its request finishes, the bucket then holding what the
// in-process store holds.
func TestLeaseHoldEndsWhileBusy(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("hold-busy"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b)
		lease := func() *keyLease {
			f.store.mu.Lock()
			defer f.store.mu.Unlock()
			return f.store.leases[b.Key]
		}
		ls := lease()
		if ls == nil {
			t.Fatal("no lease after withBusyLease")
		}
		f.store.expire(ls)
		if lease() != ls {
			t.Fatal("the busy lease was given back when its hold ended, with its request running")
		}
		local := f.store.Stats().Local
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 2}
		x, xm := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if !x.Allowed || !xm.Allowed || f.store.Stats().Local != local {
			t.Fatalf("the next request: admitted %v (in process %v), %d admitted on a lease since; want admitted through Redis",
				x.Allowed, xm.Allowed, f.store.Stats().Local-local)
		}
		y, ym := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if y.Allowed || ym.Allowed {
			t.Fatalf("a third request at an in-flight cap of 2: admitted %v (in process %v); want refused: the lease's slot runs a request", y.Allowed, ym.Allowed)
		}
		r.Ticket.Settle(1)
		if lease() != nil {
			t.Error("the lease is still held after its request finished: its hold had ended")
		}
		for _, a := range []Admission{rm, x, xm} {
			a.Ticket.Settle(1)
		}
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseGiveBackSurvivesAQueueFullToTheBrim: an admit refused because
// its caller's queue holds MaxPending operations already still gives back
// the lease it took back (its tokens are the caller's), even when not one
// more operation fits.
func TestLeaseGiveBackSurvivesAQueueFullToTheBrim(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, MaxPending: 3, FinishDelay: time.Hour, LeaseHold: testLeaseHold})
		b := Bucket{Key: f.key("pending-brim"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, s, nil, b)
		var ys []*Ticket
		for range 3 { // the lease is busy: calls
			ys = append(ys, mustAdmit(t, s, Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}).Ticket)
		}
		for _, y := range ys { // their finishes fill the queue
			y.Settle(1)
		}
		r.Ticket.Settle(1) // the lease is idle again, holding 7
		if _, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 8, Debt: 3, MaxInFlight: 8}); err == nil {
			t.Fatal("an admit queued beside 3 operations with MaxPending 3")
		}
		flushWithin(t, s)
		if n, got := f.state(b.Key).b.n, mustPeek(t, s, b).Remaining; n != 0 || got != 74 {
			t.Fatalf("after Flush %d open in Redis (want 0), bucket %v (want 74: 80 less 6 requests of 1); %d operations dropped",
				n, got, s.Stats().Dropped)
		}
	})
}

// TestALeasePastItsHoldAdmitsNothing: a lease admits requests for its
// hold from when the call that took it was sent, whether or not its
// timer has fired yet (a process that stalled past it resumes with the
// timer still due): its entry in Redis outlives the hold by the request
// TTL, so every request admitted on it settles while Redis counts it.
func TestALeasePastItsHoldAdmitsNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
		b := Bucket{Key: f.key("past-its-hold"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, s, nil, b)
		r.Ticket.Settle(1)
		s.mu.Lock()
		ls := s.leases[b.Key]
		if ls == nil || !ls.granted {
			s.mu.Unlock()
			t.Fatal("no lease granted for the caller")
		}
		ls.grantAt = ls.grantAt.Add(-2 * testLeaseHold) // its timer still due
		s.mu.Unlock()
		q := mustAdmit(t, s, Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8})
		if !q.Allowed {
			t.Fatalf("the fourth request of 1 from 76: %+v", q.Result)
		}
		q.Ticket.Settle(1)
		if st := s.Stats(); st.Local != 1 {
			t.Errorf("%d requests admitted on the lease; want only the third, not the fourth past its hold", st.Local)
		}
		s.mu.Lock()
		kept := s.leases[b.Key] == ls
		s.mu.Unlock()
		if kept {
			t.Error("the lease past its hold is still the caller's after the fourth request's call; want it given back with that call")
		}
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got < 76-1e-5 || got > 76+1e-3 {
			t.Errorf("the bucket holds %v after four requests of 1 from 80; want 76", got)
		}
	})
}

// TestALeaseWhoseTimerIsLateMovesBeforeItsRequestSettles: a busy lease
// whose hold is over moves (hands back what it holds, keeping its running
// request's slot under a new id) before the request's settlement is
// recorded, as its timer would have moved it, even when the timer has
// not run (a process that stalled). Recorded on the lease instead, the
// settlement would ride with the lease's own give-back, which may then
// reach Redis after the lease's slot expired: such a give-back refunds
// nothing and nets its record, so a debit would go uncharged against
// tokens the bucket's refill had given back.
//
// r runs on the lease; its timer stopped and its hold over (the call that
// took it dated back), r costs 1.25: two operations reach Redis — the
// move, and the finish of the id that took the slot, carrying r's debit —
// and the bucket holds what the in-process store holds.
func TestALeaseWhoseTimerIsLateMovesBeforeItsRequestSettles(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("late-timer"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, s, mem, b)
		stallLease(t, s, b.Key, 2*testLeaseHold, nil)
		ops := s.Stats().Ops
		r.Ticket.Settle(1.25)
		rm.Ticket.Settle(1.25)
		flushWithin(t, s)
		if n := s.Stats().Ops - ops; n != 2 {
			t.Errorf("%d operations sent for r's settlement; want 2: the lease's move, then the finish of the slot it kept", n)
		}
		got, want := mustPeek(t, s, b).Remaining, mustPeek(t, mem, b).Remaining
		if math.Abs(want-76.75) > 1e-5 || math.Abs(got-want) > 1e-5 {
			t.Errorf("r settled at 1.25: the bucket holds %v, the in-process store %v (want 76.75)", got, want)
		}
	})
}

// TestALeasedRequestPastItsTTLGetsNoRefund: a request admitted on a lease
// that ends after its own TTL (a process that stalled) settles through
// the slot the lease's move kept, opened afresh; without the lease its
// own slot might have expired with the caller's open requests, and Redis
// would then have settled nothing (admit.lua: an F of an id that is not
// open does nothing). So its refund is dropped — the caller may lose it,
// never gain it — and its debit kept, as Redis keeps it while the
// caller's open requests live.
func TestALeasedRequestPastItsTTLGetsNoRefund(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cost float64 // what the request really cost; it paid 1
		want float64 // 80, less the first two requests' 1 each and r's price (and its debit)
	}{{"refund", 0.25, 77}, {"debit", 2.5, 75.5}} {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, f *redisFixture) {
				s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
				b := Bucket{Key: f.key("past-ttl-" + tc.name), Limit: Limit{Rate: 1e-6, Capacity: 80}}
				r, _ := withBusyLease(t, s, nil, b)
				stallLease(t, s, b.Key, 2*DefaultTTL, r.Ticket) // r has run past its TTL
				r.Ticket.Settle(tc.cost)
				flushWithin(t, s)
				if got := mustPeek(t, s, b).Remaining; math.Abs(got-tc.want) > 1e-5 {
					t.Errorf("r, past its TTL, settled at %v: the bucket holds %v, want %v", tc.cost, got, tc.want)
				}
			})
		})
	}
}

// stallLease makes key's busy lease look as a stalled process leaves it:
// the finishes of the requests before the running one sent, the lease's
// timer stopped before it ran, and the call that took the lease dated back
// by back — and the running request's ticket r too, if given.
func stallLease(t *testing.T, s *RedisStore, key string, back time.Duration, r *Ticket) {
	t.Helper()
	laneIdle(t, s, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.leases[key]
	if ls == nil || ls.timer == nil {
		t.Fatal("no lease with a timer for the caller")
	}
	ls.timer.Stop()
	ls.grantAt = ls.grantAt.Add(-back)
	if r != nil {
		r.at = r.at.Add(-back)
	}
}

// laneIdle waits until key's lane has nothing queued and no call on its
// way, failing the test after 5 s.
func laneIdle(t *testing.T, s *RedisStore, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		l := s.lanes[key]
		idle := l == nil || !l.busy && len(l.queue) == 0
		s.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lane of %s is still busy after 5 s", key)
		}
		time.Sleep(time.Millisecond)
	}
}
