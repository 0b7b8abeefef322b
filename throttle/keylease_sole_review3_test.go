package throttle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stepScripter is a real Redis whose script calls can, one at a time, be
// lost before they reach Redis (lose) or held once Redis has applied them,
// while during runs (hold), before the reply goes back.
type stepScripter struct {
	redis.Scripter
	lose   atomic.Bool
	hold   atomic.Bool
	during func()
}

func (g *stepScripter) run(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	if g.lose.CompareAndSwap(true, false) {
		c := redis.NewCmd(ctx)
		c.SetErr(errors.New("connection lost"))
		return c
	}
	c := call()
	if c.Err() == nil && g.hold.CompareAndSwap(true, false) {
		g.during()
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
