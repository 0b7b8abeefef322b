package throttle

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failNextScripter is a real Redis whose next script call, once armed,
// is lost (a dropped connection): it never reaches Redis.
type failNextScripter struct {
	redis.Scripter
	armed atomic.Bool
}

func (g *failNextScripter) lost(ctx context.Context) *redis.Cmd {
	if !g.armed.CompareAndSwap(true, false) {
		return nil
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errors.New("connection lost"))
	return cmd
}

func (g *failNextScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	if c := g.lost(ctx); c != nil {
		return c
	}
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (g *failNextScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if c := g.lost(ctx); c != nil {
		return c
	}
	return g.Scripter.Eval(ctx, script, keys, args...)
}

// A debit whose finish's call was lost waits RetryInterval in its
// caller's queue. A budget read meanwhile rides the caller's lane but is
// sent ahead of it, and reads the bucket without the debit: that read
// must not become what the Failover knows of the caller (later reads
// would show the tokens the debit took, and a fail_mode local bucket
// seeded from it would admit what the shared bucket no longer holds), as
// with a debit still waiting for FinishDelay (TestFailoverReadRightAfterADebit).
func TestFailoverReadWhileADebitWaitsForItsRetry(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g := &failNextScripter{Scripter: fx.rdb}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, RetryInterval: time.Hour, LeaseRequests: -1})
		fl := &flakyStore{Store: s}
		f := &Failover{Primary: fl, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 1,
			Timeout: 10 * time.Second, ProbeInterval: time.Hour, PeekReuse: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)}
		b := Bucket{Key: fx.key("retry-debit-read"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 2, Debt: 10}) // 8 left
		g.armed.Store(true)
		a.Ticket.Settle(10) // it cost 10: 0 left; its finish's call is lost
		for s.Stats().Failures == 0 {
			time.Sleep(time.Millisecond)
		}
		mustPeek(t, f, b) // a read while the debit waits for its retry
		f.PeekReuse = time.Hour
		r := mustPeek(t, f, b)
		fl.set(true)
		ad := mustAdmit(t, f, Request{Bucket: b, Cost: 5})
		fl.set(false)
		if ad.Allowed {
			ad.Ticket.Release()
		}
		if r.Remaining >= 1 || ad.Allowed {
			t.Fatalf("after a debit to 0 waiting for its retry: a read shows %.3f tokens; Redis down, a local admission of 5: allowed %v (%.3f left)",
				r.Remaining, ad.Allowed, ad.Result.Remaining)
		}
	})
}
