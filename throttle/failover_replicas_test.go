package throttle

import (
	"strconv"
	"testing"
	"time"
)

// Free refusals across replicas (two Failovers over one Redis): each
// replica learns a refusal from its own call. A refund of a request a
// replica admitted ends its own in-process refusal (its next request asks
// Redis); a refund another replica makes only makes a replica's
// in-process refusal conservative — it refuses until its own Retry-After,
// never admits more than Redis would. After Retry-After each replica asks
// Redis again, once.
func TestFreeRefusalAcrossReplicas(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("replicas"), Limit: Limit{Rate: 10, Capacity: 10}}
		sa, sb := f.store, NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout})
		a := &Failover{Primary: sa, Mode: FailClosed, Timeout: testCallTimeout}
		r := &Failover{Primary: sb, Mode: FailClosed, Timeout: testCallTimeout}
		held := mustAdmit(t, a, Request{Bucket: b, Cost: 10})
		if !held.Allowed {
			t.Fatalf("a full bucket refused: %+v", held.Result)
		}
		refusedAt := time.Now()
		// Each replica is refused by Redis once: B has not heard of A's
		// refusal. Each then refuses until its own Retry-After, counted
		// from when it heard.
		var retryAt time.Time
		for _, rep := range []struct {
			f *Failover
			s *RedisStore
		}{{a, sa}, {r, sb}} {
			calls := rep.s.Stats().Calls
			if got := mustAdmit(t, rep.f, Request{Bucket: b, Cost: 5}); got.Allowed || rep.s.Stats().Calls != calls+1 {
				t.Fatalf("an empty bucket: %+v after %d calls", got.Result, rep.s.Stats().Calls-calls)
			} else if at := time.Now().Add(got.Result.RetryAfter); at.After(retryAt) {
				retryAt = at
			}
		}
		// A's request ends having cost nothing: Redis's bucket is full again.
		held.Ticket.Settle(0)
		flushWithin(t, sa)
		if res := mustPeek(t, sb, b); res.Remaining < 9.9 {
			t.Fatalf("after the refund Redis holds %v tokens, want 10", res.Remaining)
		}
		// A settled that request itself: it knows of the refund, and its
		// next request asks Redis and is admitted.
		ca := sa.Stats().Calls
		if got := mustAdmit(t, a, Request{Bucket: b, Cost: 5}); !got.Allowed || sa.Stats().Calls != ca+1 {
			t.Fatalf("after its own refund: %+v after %d calls; want asked and admitted", got.Result, sa.Stats().Calls-ca)
		} else {
			got.Ticket.Settle(0) // all back: the bucket is as full as before it
			flushWithin(t, sa)
		}
		// B does not know of it: until its Retry-After (0.5 s after the
		// bucket was emptied) it refuses in process.
		cb := sb.Stats().Calls
		n := 0
		for time.Since(refusedAt) < 250*time.Millisecond {
			if got := mustAdmit(t, r, Request{Bucket: b, Cost: 5}); got.Allowed || got.Result.RetryAfter <= 0 {
				t.Fatalf("before Retry-After: %+v", got.Result)
			}
			n++
		}
		if sb.Stats().Calls != cb || n == 0 {
			t.Fatalf("%d refusals before Retry-After made %d calls, want none", n, sb.Stats().Calls-cb)
		}
		time.Sleep(time.Until(retryAt.Add(20 * time.Millisecond)))
		for _, rep := range []struct {
			f *Failover
			s *RedisStore
		}{{a, sa}, {r, sb}} {
			calls := rep.s.Stats().Calls
			got := mustAdmit(t, rep.f, Request{Bucket: b, Cost: 5})
			if !got.Allowed || rep.s.Stats().Calls != calls+1 {
				t.Fatalf("after Retry-After: %+v after %d calls", got.Result, rep.s.Stats().Calls-calls)
			}
			got.Ticket.Release()
		}
	})
}

// A Failover remembers at most Remember callers: a flood of new
// identities cannot grow its memory without bound.
func TestFailoverRemembersBoundedCallers(t *testing.T) {
	f, _ := newFailover(FailClosed, 1)
	f.Remember = 64
	for i := range 1000 {
		b := Bucket{Key: "k" + strconv.Itoa(i), Limit: Limit{Rate: 1, Capacity: 1}}
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}) // refused: remembered
	}
	f.known.mu.Lock()
	n := len(f.known.m)
	f.known.mu.Unlock()
	if n > 64 || n == 0 {
		t.Fatalf("%d callers remembered, want 1..64", n)
	}
}

// A budget read sent right after a refund, before the refund's finish has
// reached Redis (it waits FinishDelay), reads the bucket without it: the
// refusal the refund lifted stays lifted, whether reads are reused or not.
func TestBudgetReadRightAfterARefund(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		for _, reuse := range []time.Duration{-1, time.Nanosecond, 0} {
			f := &Failover{Primary: fx.store, Mode: FailClosed, Timeout: 2 * time.Second, PeekReuse: reuse}
			b := Bucket{Key: fx.key("refund-read" + reuse.String()), Limit: Limit{Rate: 1e-3, Capacity: 10}}
			a := mustAdmit(t, f, Request{Bucket: b, Cost: 9})
			if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); r.Allowed {
				t.Fatalf("reuse %v: want a refusal", reuse)
			}
			a.Ticket.Settle(1) // 8 back
			mustPeek(t, f, b)
			if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !r.Allowed {
				t.Fatalf("reuse %v: a request of 5 after a refund of 8 to 1: refused (Retry-After %v)", reuse, r.Result.RetryAfter)
			}
		}
	})
}
