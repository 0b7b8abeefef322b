package throttle

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed bucket.lua
var bucketLua string

// RedisStore keeps buckets in Redis and spends from them with bucket.lua in
// one round trip (EVALSHA, falling back to EVAL when the server has not
// cached the script, e.g. after a restart or SCRIPT FLUSH).
type RedisStore struct {
	rdb    redis.Scripter
	script *redis.Script

	// ClockSkew is how far Redis's clock may run ahead of this process's;
	// 0 means DefaultClockSkew. A spend whose context has a deadline carries
	// that deadline plus ClockSkew, and bucket.lua does nothing for a spend
	// that reaches Redis later than that: its caller has stopped waiting and
	// may have charged a fallback bucket instead (e.g. the spend sat in a
	// paused Redis's socket buffer), so applying it would charge twice. A
	// clock skew above this bound makes spends fail (and so fall back), which
	// is visible; it never loses or doubles a charge.
	ClockSkew time.Duration
}

// DefaultClockSkew is RedisStore.ClockSkew when left 0.
const DefaultClockSkew = time.Second

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store over rdb: a *redis.Client, *redis.ClusterClient
// or *redis.Ring all fit. Keys from BucketKey are hash-tagged for Cluster.
func NewRedisStore(rdb redis.Scripter) *RedisStore {
	return &RedisStore{rdb: rdb, script: redis.NewScript(bucketLua)}
}

// Spend implements Store.
func (s *RedisStore) Spend(ctx context.Context, key string, limit Limit, cost float64) (Result, error) {
	if err := checkSpend(limit, cost); err != nil {
		return Result{}, err
	}
	return s.run(ctx, key, limit, cost, "spend")
}

// Peek implements Store.
func (s *RedisStore) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	return s.run(ctx, key, limit, 0, "peek")
}

// spendArgs are bucket.lua's arguments for one call; a spend under a context
// deadline carries its not_after (see ClockSkew).
func (s *RedisStore) spendArgs(ctx context.Context, limit Limit, cost float64, mode string) []any {
	args := []any{formatFloat(limit.Rate), formatFloat(limit.Capacity), formatFloat(cost), mode}
	if d, ok := ctx.Deadline(); ok && mode == "spend" {
		args = append(args, formatFloat(float64(d.Add(s.clockSkew()).UnixMicro())/1e6))
	}
	return args
}

func (s *RedisStore) clockSkew() time.Duration {
	if s.ClockSkew <= 0 {
		return DefaultClockSkew
	}
	return s.ClockSkew
}

func (s *RedisStore) run(ctx context.Context, key string, limit Limit, cost float64, mode string) (Result, error) {
	v, err := s.script.Run(ctx, s.rdb, []string{key}, s.spendArgs(ctx, limit, cost, mode)...).Result()
	if err != nil {
		return Result{}, fmt.Errorf("throttle: %s %q: %w", mode, key, err)
	}
	o, err := parseReply(v, limit.Capacity)
	if err != nil {
		return Result{}, fmt.Errorf("throttle: %s %q: %w", mode, key, err)
	}
	return o.result(limit, cost), nil
}

// formatFloat formats an argument for bucket.lua so that Lua's tonumber reads
// back the same float64.
func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// parseReply checks and decodes bucket.lua's reply
// {allowed, remaining, retry_after_ms, reset_ms}. Anything else is an error,
// never a panic.
func parseReply(v any, capacity float64) (outcome, error) {
	var o outcome
	r, ok := v.([]any)
	if !ok {
		return o, fmt.Errorf("bucket reply is %T, want a 4-element array", v)
	}
	if len(r) != 4 {
		return o, fmt.Errorf("bucket reply has %d elements, want 4", len(r))
	}
	allowed, ok := r[0].(int64)
	if !ok || (allowed != 0 && allowed != 1) {
		return o, fmt.Errorf("bucket reply: allowed is %T %v, want integer 0 or 1", r[0], r[0])
	}
	rem, ok := r[1].(string)
	if !ok {
		return o, fmt.Errorf("bucket reply: remaining is %T, want string", r[1])
	}
	tokens, err := strconv.ParseFloat(rem, 64)
	if err != nil || math.IsNaN(tokens) || tokens < 0 || tokens > capacity {
		return o, fmt.Errorf("bucket reply: remaining %q is not a number in [0, %g]", rem, capacity)
	}
	retry, ok := r[2].(int64)
	if !ok || retry < 0 || (allowed == 1) != (retry == 0) {
		return o, fmt.Errorf("bucket reply: retry_after_ms is %T %v, inconsistent with allowed=%d", r[2], r[2], allowed)
	}
	reset, ok := r[3].(int64)
	if !ok || reset < 0 {
		return o, fmt.Errorf("bucket reply: reset_ms is %T %v, want integer >= 0", r[3], r[3])
	}
	o.Allowed = allowed == 1
	o.Tokens = tokens
	o.RetryMS = retry
	o.ResetMS = reset
	return o, nil
}
