package throttle

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a Sole store's lease admitted reaches Redis only with its
// give-back. When the call carrying the give-back is lost, the give-back
// waits RetryInterval in its caller's queue, and rides only with a batch
// of the lease's shape: a request of the caller under another shape (its
// own TTL here) goes to Redis alone, and Redis decides it on a bucket
// that lacks every price the lease admitted. Six requests of 1 admitted
// in process leave a bucket of 10 with 2 tokens; a request of 3 must not
// be admitted: refused, or failed with the lost call (then the fail mode
// decides it).
func TestSoleLeaseGiveBackWaitingForItsRetryGoesBeforeAnotherShape(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &failNextScripter{Scripter: f.rdb}
		s := NewRedisStore(g, RedisOptions{Timeout: time.Second, RetryInterval: time.Hour, Sole: true, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("sole-retry-shape"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		req := Request{Bucket: b, Cost: 1, TTL: time.Minute}
		for range 8 { // the bucket seen, the lease asked for, six on the lease
			a := mustAdmit(t, s, req)
			if !a.Allowed {
				t.Fatalf("a request of 1 refused: %+v", a.Result)
			}
			a.Ticket.Release()
		}
		if s.Stats().Local != 6 {
			t.Fatalf("%d requests in process, want 6", s.Stats().Local)
		}
		g.armed.Store(true) // the give-back's call is lost
		other, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 3, TTL: 2 * time.Minute})
		failures := s.Stats().Failures
		if other.Allowed {
			other.Ticket.Release()
		}
		mustPeek(t, s, b) // sends what waits for its retry
		if failures != 1 || other.Allowed {
			t.Fatalf("8 of 10 tokens spent (6 in process), the give-back's call lost (%d failures): a request of 3 under another TTL allowed %v (%.3f left, error %v); want refused or failed",
				failures, other.Allowed, other.Result.Remaining, err)
		}
		if left := mustPeek(t, s, b).Remaining; math.Abs(left-2) > 1e-3 {
			t.Fatalf("after the give-back's retry: %.6f left, want 2", left)
		}
	})
}

// A Sole store's lease counts a debit of its caller on its way to Redis
// (owed) until the debit's reply. When the call carrying it fails after
// Redis applied it and the queue, full meanwhile, drops the finish, the
// debit is no longer counted, yet the bucket Redis last showed lacks it:
// the lease admits from 8 tokens the bucket no longer holds.
func TestSoleLeaseAdmitsNoMoreAfterADebitItDroppedWasApplied(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		var s *RedisStore
		b := Bucket{Key: f.key("sole-dropped-debit"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		sc := &stepScripter{Scripter: f.rdb, during: func() {
			// Meanwhile the queue fills with settlements waiting for their
			// retry after an earlier failed call (finishes of nothing here).
			s.mu.Lock()
			defer s.mu.Unlock()
			ls, l := s.leases[b.Key], s.laneLocked(b.Key)
			for len(l.queue) < s.opts.MaxPending {
				l.queue = append(l.queue, &pending{op: op{kind: opFinish, id: newID()}, sh: ls.sh, notBefore: time.Now().Add(time.Hour)})
			}
		}}
		s = NewRedisStore(sc, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour, FinishDelay: time.Millisecond, MaxPending: 2})
		req := Request{Bucket: b, Cost: 1, TTL: time.Hour}
		a0 := mustAdmit(t, s, req) // to Redis: the bucket seen
		a1 := mustAdmit(t, s, req) // to Redis, with the lease: 8 left
		s.mu.Lock()
		ls := s.leases[b.Key]
		leased := ls != nil && ls.granted
		s.mu.Unlock()
		if !a0.Allowed || !a1.Allowed || !leased {
			t.Fatalf("two requests of 1 from a full bucket of 10: %v, %v, lease granted %v; want both admitted, a lease", a0.Allowed, a1.Allowed, leased)
		}
		sc.drop.Store(true)
		a0.Ticket.Settle(9) // a debit of 8: applied, its reply lost, then dropped
		for deadline := time.Now().Add(5 * time.Second); s.Stats().Dropped == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the finish not dropped after 5 s: %+v", s.Stats())
			}
		}
		if got := f.state(b.Key).b.tokens / 1e6; got > 0.01 {
			t.Fatalf("Redis holds %.6f tokens after the debit of 8, want 0", got)
		}
		admitted := 0
		for range 8 { // one that goes to Redis meets the full queue: ErrBusy
			if a, err := s.Admit(context.Background(), req); err == nil && a.Allowed {
				admitted++
				a.Ticket.Release()
			}
		}
		if admitted > 0 {
			t.Fatalf("eight requests of 1 from a bucket holding 0 (a debit of 8 applied, its finish dropped after its reply was lost): %d admitted (%d in process); want none",
				admitted, s.Stats().Local)
		}
		a1.Ticket.Release()
	})
}

// stepScripter is a real Redis whose script calls can, one at a time, be
// lost before they reach Redis (lose), held once Redis has applied them
// while during runs, before the reply goes back (hold), or held so and
// then their reply lost (drop).
type stepScripter struct {
	redis.Scripter
	lose   atomic.Bool
	hold   atomic.Bool
	drop   atomic.Bool
	during func()
}

func (g *stepScripter) run(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	if g.lose.CompareAndSwap(true, false) {
		c := redis.NewCmd(ctx)
		c.SetErr(errors.New("connection lost"))
		return c
	}
	c := call()
	if c.Err() != nil {
		return c
	}
	if g.hold.CompareAndSwap(true, false) {
		g.during()
	}
	if g.drop.CompareAndSwap(true, false) {
		g.during()
		lost := redis.NewCmd(ctx)
		lost.SetErr(errors.New("reply lost"))
		return lost
	}
	return c
}

func (g *stepScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.EvalSha(ctx, sha1, keys, args...) })
}

func (g *stepScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return g.run(ctx, func() *redis.Cmd { return g.Scripter.Eval(ctx, script, keys, args...) })
}

// A Sole store's lease admits against the bucket less the debits of its
// caller on their way to Redis (owed): each finish counts for the lease
// that was the caller's when it was queued, or, queued before, for the
// lease granted while it waits. A debit whose call was lost waits for its
// retry in the caller's queue, still counted for the lease of that time;
// once that lease has gone back and another is granted, the debit counts
// for neither: while its retry is on its way — applied in Redis, its reply
// not yet back — the new lease admits from tokens the bucket no longer
// holds. Here a request of another TTL settles at 9 (a debit of 8) with 5
// of 10 tokens left: the lease admits four requests of 1 from a bucket at
// -3, which the store without leases would have refused (they would have
// waited for the debit's call and been decided after it).
func TestSoleLeaseCountsADebitWaitingForItsRetryAfterAnotherLease(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &stepScripter{Scripter: f.rdb}
		s := NewRedisStore(g, RedisOptions{Timeout: time.Second, RetryInterval: time.Hour, FinishDelay: time.Millisecond, Sole: true, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("sole-stale-owed"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		req := Request{Bucket: b, Cost: 1, TTL: time.Minute, Debt: 10}
		other := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: 2 * time.Minute, Debt: 10}) // to Redis: 9 left, running
		quiet(t, s, b.Key)
		mustAdmit(t, s, req).Ticket.Release() // to Redis, with the first lease: 8 left
		mustAdmit(t, s, req).Ticket.Release() // on the lease: 7 left
		s.mu.Lock()
		first := s.leases[b.Key]
		s.mu.Unlock()
		if !other.Allowed || first == nil || !first.granted || s.Stats().Local != 1 {
			t.Fatalf("three requests of 1 from a bucket of 10: the first allowed %v, lease %v; want allowed, a lease granted", other.Allowed, first)
		}
		quiet(t, s, b.Key)
		g.lose.Store(true)
		other.Ticket.Settle(9) // a debit of 8, counted for the first lease; its call is lost
		for deadline := time.Now().Add(5 * time.Second); s.Stats().Failures == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the debit's call not failed after 5 s: %+v", s.Stats())
			}
		}
		mustAdmit(t, s, req).Ticket.Release() // to Redis, the first lease given back: 6 left
		mustAdmit(t, s, req).Ticket.Release() // to Redis, with a second lease: 5 left
		s.mu.Lock()
		second := s.leases[b.Key]
		s.mu.Unlock()
		if second == nil || second == first || !second.granted {
			t.Fatalf("no second lease granted (lease %v, stats %+v)", second, s.Stats())
		}
		admitted := 0
		g.during = func() { // the debit applied in Redis, its reply on its way
			for range 5 {
				// One that goes to Redis waits for this call: it gives up.
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				a, err := s.Admit(ctx, req)
				cancel()
				if err == nil && a.Allowed {
					admitted++
					a.Ticket.Release()
				}
			}
		}
		g.hold.Store(true)
		mustPeek(t, s, b) // sends the debit waiting for its retry first
		flushWithin(t, s)
		left := mustPeek(t, s, b).Remaining
		if admitted > 0 {
			t.Fatalf("five requests of 1 while a debit of 8 (waiting for its retry after a lost call) was applied in Redis, its reply on its way: %d admitted in process, %.6f left; want none, -3 left",
				admitted, left)
		}
	})
}

// quiet waits until nothing of key's lane is on its way to Redis or ready
// to go: what is queued waits for its retry.
func quiet(t *testing.T, s *RedisStore, key string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		l := s.lanes[key]
		idle := l == nil || !l.busy
		if l != nil {
			for _, p := range l.queue {
				idle = idle && time.Now().Before(p.notBefore)
			}
		}
		s.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lane of %q still busy after 5 s", key)
		}
	}
}
