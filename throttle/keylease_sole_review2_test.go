package throttle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Sole store's lease admits while the bucket as Redis last showed it
// surely pays. A peek under another limit of the caller (a faster refill:
// its tier changed) writes nothing in Redis, yet its reply is taken as the
// bucket the lease spends from: a bucket holding 1 token, read at a refill
// that fills it to 10, lets the lease admit its eight requests in process.
func TestSoleLeaseAdmitsNoMoreAfterAPeekUnderAnotherLimit(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("sole-peek-shape"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		mustAdmit(t, s, Request{Bucket: b, Cost: 8, TTL: time.Hour}).Ticket.Release() // to Redis: the bucket seen, 2 left
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: time.Hour})             // to Redis, with the lease: 1 left
		if !a.Allowed {
			t.Fatalf("a request of 1 from a bucket holding 2 refused: %+v", a.Result)
		}
		a.Ticket.Release()
		s.mu.Lock()
		ls := s.leases[b.Key]
		leased := ls != nil && ls.granted
		s.mu.Unlock()
		if !leased {
			t.Fatalf("no lease granted after two requests")
		}
		// Read under a limit that refills the bucket to its capacity at once.
		mustPeek(t, s, Bucket{Key: b.Key, Limit: Limit{Rate: 1e6, Capacity: 10}})
		admitted := 0
		for range 6 {
			if a := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: time.Hour}); a.Allowed {
				admitted++
				a.Ticket.Release()
			}
		}
		local := s.Stats().Local
		flushWithin(t, s)
		left := mustPeek(t, s, b).Remaining
		if admitted > 1 {
			t.Fatalf("six requests of 1 from a bucket holding 1 (after a peek under a faster limit): %d admitted (%d in process), %.6f left; want at most 1",
				admitted, local, left)
		}
	})
}

// lostReplyScripter runs every script call in Redis; while armed, it then
// calls during (the call still on its way) and reports the reply lost.
type lostReplyScripter struct {
	redis.Scripter
	armed  *atomic.Bool
	during func()
}

func (r lostReplyScripter) lose(ctx context.Context, c *redis.Cmd) *redis.Cmd {
	if c.Err() != nil || !r.armed.Load() {
		return c
	}
	r.during()
	lost := redis.NewCmd(ctx)
	lost.SetErr(errors.New("reply lost"))
	return lost
}

func (r lostReplyScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.lose(ctx, r.Scripter.EvalSha(ctx, sha1, keys, args...))
}

func (r lostReplyScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.lose(ctx, r.Scripter.Eval(ctx, script, keys, args...))
}

// A Sole store's lease counts a debit of its caller on its way to Redis
// (owed) until the debit's reply. When the call carrying it fails after
// Redis applied it and the queue, full meanwhile, drops the finish, the
// debit is no longer counted, yet the bucket Redis last showed lacks it:
// the lease admits from 8 tokens the bucket no longer holds.
func TestSoleLeaseAdmitsNoMoreAfterADebitItDroppedWasApplied(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		var armed atomic.Bool
		var s *RedisStore
		b := Bucket{Key: f.key("sole-dropped-debit"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		sc := lostReplyScripter{Scripter: f.rdb, armed: &armed, during: func() {
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
		armed.Store(true)
		a0.Ticket.Settle(9) // a debit of 8: applied, its reply lost, then dropped
		for deadline := time.Now().Add(5 * time.Second); s.Stats().Dropped == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the finish not dropped after 5 s: %+v", s.Stats())
			}
		}
		armed.Store(false)
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
