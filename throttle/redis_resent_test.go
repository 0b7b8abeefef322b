package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// resentScripter sends every script call twice and answers with the
// second reply: a batch that Redis applied and whose reply was lost, sent
// again (go-redis resends a command after a connection error).
type resentScripter struct{ redis.Scripter }

func (r resentScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	_ = r.Scripter.EvalSha(ctx, sha1, keys, args...)
	return r.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (r resentScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	_ = r.Scripter.Eval(ctx, script, keys, args...)
	return r.Scripter.Eval(ctx, script, keys, args...)
}

// A shadow admission whose batch reached Redis twice (the second copy
// answers "already open") is still a shadow admission: it spent nothing,
// so it settles nothing — not a refund of a price it never paid.
func TestShadowAdmissionResentSpendsNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s := NewRedisStore(resentScripter{fx.rdb}, RedisOptions{Timeout: time.Second, LeaseRequests: -1})
		b := Bucket{Key: fx.key("shadow-resent"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		mustAdmit(t, s, Request{Bucket: b, Cost: 8}).Ticket.Release() // 2 left
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 5, Shadow: true})
		a.Ticket.Settle(0)
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; !a.Shadow || a.Ticket.Paid() != 0 || got > 2.01 {
			t.Fatalf("a shadow request of 5 with 2 tokens, resent: shadow %v, paid %v; after it settled at 0 the bucket holds %.3f, want 2",
				a.Shadow, a.Ticket.Paid(), got)
		}
	})
}
