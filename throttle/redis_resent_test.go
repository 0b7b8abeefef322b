package throttle

import (
	"context"
	"testing"

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
		s := NewRedisStore(resentScripter{fx.rdb}, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
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

// An admission whose batch reached Redis twice is admitted by the first
// copy: the second must answer "already open" even when the first spent
// the tokens (or took the slot) the second would need. Refused, its
// caller gets a 429 for a request the bucket paid, and the price and the
// slot stay taken, never settled, until the request TTL.
func TestAdmissionResentAfterItTookTheLastTokensIsAdmitted(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s := NewRedisStore(resentScripter{fx.rdb}, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		for _, tc := range []struct {
			name string
			req  Request
		}{
			{"tokens", Request{Cost: 8}},
			{"slot", Request{Cost: 1, MaxInFlight: 1}},
		} {
			b := Bucket{Key: fx.key("resent-last-" + tc.name), Limit: Limit{Rate: 1e-3, Capacity: 10}}
			req := tc.req
			req.Bucket = b
			a := mustAdmit(t, s, req)
			a.Ticket.Release()
			flushWithin(t, s)
			st := fx.state(b.Key)
			if !a.Allowed {
				t.Errorf("%s: a request of %v (max in flight %d) on a full bucket, its batch resent: refused (%v, %.3f tokens left); Redis holds %.3f tokens, %d open",
					tc.name, req.Cost, req.MaxInFlight, a.Refusal, a.Result.Remaining, st.b.tokens/1e6, st.b.n)
			}
		}
	})
}
