package throttle

import (
	"fmt"
	"testing"
	"time"
)

// Refunds of requests Redis admitted, arriving while the caller's lease
// is out and the bucket is at what Redis lets it hold (its capacity less
// the lease), followed by a debit of the caller that reaches Redis before
// the lease goes back: the bucket then holds no more than without leases,
// and a burst admits no more. A bucket without leases cuts those refunds
// at its capacity when they arrive; a lease must not let them in later,
// past the debit.
func TestRefundsAtTheBrimThenADebitGainNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		run := func(name string, s *RedisStore) (float64, int) {
			bk := Bucket{Key: f.key("brim-refunds-" + name), Limit: Limit{Rate: 1e-6, Capacity: 40}}
			req := func(c float64) Request { return Request{Bucket: bk, Cost: c, MaxInFlight: 64} }
			mustAdmit(t, s, req(1)).Ticket.Settle(0)
			var rs []*Ticket
			rs = append(rs, mustAdmit(t, s, req(5)).Ticket) // with a lease of 5 on the leased store
			q := mustAdmit(t, s, req(0.01))                 // on the lease, running
			for range 3 {
				rs = append(rs, mustAdmit(t, s, req(5)).Ticket)
			}
			openNow(t, f, bk.Key, 5)
			datedBack(t, f, bk.Key)
			mustPeek(t, s, bk) // the bucket as Redis holds it now: at the brim
			for _, r := range rs {
				r.Settle(0)
			}
			openNow(t, f, bk.Key, 1)
			x := mustAdmit(t, s, req(35))
			if !x.Allowed {
				t.Fatalf("%s: a request of 35 refused: %+v", name, x.Result)
			}
			x.Ticket.Settle(35)
			q.Ticket.Settle(0.01)
			flushWithin(t, s)
			got := mustPeek(t, s, bk).Remaining
			burst := 0
			for range 100 {
				a := mustAdmit(t, s, req(1))
				if !a.Allowed {
					break
				}
				burst++
				a.Ticket.Settle(1)
			}
			return got, burst
		}
		lg, lb := run("leased", f.store)
		pg, pb := run("plain", NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1}))
		if lg > pg+1e-3 || lb > pb {
			t.Errorf("with a lease: %v left, a burst of %d after; without leases: %v, %d", lg, lb, pg, pb)
		}
	})
}

// The same with the debit on another replica, which knows nothing of the
// lease: it reaches Redis before the lease's holder gives it back.
func TestRefundsAtTheBrimThenAnotherReplicasDebitGainNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		run := func(name string, a, b *RedisStore) float64 {
			bk := Bucket{Key: f.key("brim-refunds-two-" + name), Limit: Limit{Rate: 1e-6, Capacity: 40}}
			req := func(c float64) Request { return Request{Bucket: bk, Cost: c, MaxInFlight: 64} }
			mustAdmit(t, a, req(1)).Ticket.Settle(0)
			var rs []*Ticket
			rs = append(rs, mustAdmit(t, a, req(5)).Ticket) // with a lease of 5 on the leased store
			for range 3 {
				rs = append(rs, mustAdmit(t, a, req(5)).Ticket) // the lease admits one; all run
			}
			datedBack(t, f, bk.Key)
			mustPeek(t, a, bk)
			for _, r := range rs {
				r.Settle(0)
			}
			within(t, name+": the finishes reach Redis", func() bool { return f.state(bk.Key).b.n <= 1 })
			x := mustAdmit(t, b, req(35))
			if !x.Allowed {
				t.Fatalf("%s: a request of 35 refused: %+v", name, x.Result)
			}
			x.Ticket.Settle(35)
			flushWithin(t, b)
			flushWithin(t, a)
			return mustPeek(t, b, bk).Remaining
		}
		plainB := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		leased := run("leased", f.store, plainB)
		plain := run("plain", NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1}), plainB)
		if leased > plain+1e-3 {
			t.Errorf("with replica A's lease: %v left; without leases: %v", leased, plain)
		}
	})
}

// TestAggregateRequestsSettleBesideALease: a request of the caller that
// also draws on an aggregate bucket settles in Redis, on both buckets,
// whatever the caller's lease holds: a debit paid from the lease would
// never reach the aggregate, and a refund paid into it would never go
// back to the aggregate.
func TestAggregateRequestsSettleBesideALease(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		run := func(name string, s *RedisStore, settle float64) (float64, float64) {
			bk := Bucket{Key: f.key(fmt.Sprintf("agg-beside-%s-%v", name, settle)), Limit: Limit{Rate: 1e-6, Capacity: 40}}
			ag := &Bucket{Key: bk.Key + ":aggregate", Limit: Limit{Rate: 1e-6, Capacity: 100}} // the same hash tag
			req := func(c float64) Request { return Request{Bucket: bk, Cost: c, MaxInFlight: 64} }
			mustAdmit(t, s, req(1)).Ticket.Settle(0)
			mustAdmit(t, s, req(5)).Ticket.Settle(5) // with a lease of 5 on the leased store
			mustAdmit(t, s, req(1)).Ticket.Settle(1) // on the lease
			q := mustAdmit(t, s, req(1))             // on the lease, running
			g := mustAdmit(t, s, Request{Bucket: bk, Aggregate: ag, Cost: 10, MaxInFlight: 64})
			if !g.Allowed {
				t.Fatalf("%s: the aggregate's request refused: %+v", name, g.Result)
			}
			datedBack(t, f, bk.Key)
			mustPeek(t, s, bk) // the caller's bucket at the brim
			g.Ticket.Settle(settle)
			q.Ticket.Settle(1)
			flushWithin(t, s)
			return mustPeek(t, s, bk).Remaining, mustPeek(t, s, *ag).Remaining
		}
		for _, settle := range []float64{12, 0} { // a debit of 2, a refund of 10
			lo, lp := run("leased", f.store, settle)
			po, pp := run("plain", NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1}), settle)
			if lp != pp || lo > po {
				t.Errorf("settled at %v: with a lease, caller %v and aggregate %v; without leases %v and %v", settle, lo, lp, po, pp)
			}
		}
	})
}

// TestRefusalsAtTheBrimAskAgainOnce: refusals one after another beside a
// busy lease whose bucket sits at its capacity less the lease are asked
// again once, with the lease handed back (its replay may bring back the
// refill Redis held): the first one's retry, and no more — the lease has
// handed back what it had.
func TestRefusalsAtTheBrimAskAgainOnce(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("refusals-at-the-brim"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		req := func(c float64, shadow bool) Request {
			return Request{Bucket: b, Cost: c, Debt: 3, MaxInFlight: 8, Shadow: shadow}
		}
		mustAdmit(t, s, req(1, false)).Ticket.Settle(1)
		mustAdmit(t, s, req(1, false)).Ticket.Settle(1) // Redis 70, a lease of 8
		r := mustAdmit(t, s, req(1, false))             // on the lease, running
		defer r.Ticket.Settle(1)
		if s.Stats().Local != 1 {
			t.Fatalf("stats %+v: want a request running on the lease", s.Stats())
		}
		datedBack(t, f, b.Key) // Redis at 72, its capacity less the lease
		before := s.Stats().Admits
		for i := range 100 {
			a := mustAdmit(t, s, req(80, i%2 == 0))
			if a.Allowed && !a.Shadow {
				t.Fatalf("request %d: 80 admitted from a bucket and a lease holding 79", i)
			}
			if a.Ticket != nil {
				a.Ticket.Release()
			}
		}
		if asked := s.Stats().Admits - before; asked != 101 {
			t.Errorf("100 refusals at the brim asked %d times, want 101 (the first asked again once)", asked)
		}
	})
}
