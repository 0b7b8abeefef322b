package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// redisFixture is one integration test's Redis client, store and key space.
type redisFixture struct {
	t     *testing.T
	rdb   redis.UniversalClient
	store *RedisStore
	pre   string
}

func newRedisFixture(t *testing.T, rdb redis.UniversalClient) *redisFixture {
	t.Helper()
	return &redisFixture{t: t, rdb: rdb, store: NewRedisStore(rdb), pre: testenv.Prefix(t)}
}

// forEachRedis runs an integration test against the single test Redis and
// against the test Redis Cluster (scripts/services.sh cluster-up), where
// every key of a test lands in the slot of its own hash tag.
func forEachRedis(t *testing.T, fn func(t *testing.T, f *redisFixture)) {
	t.Helper()
	t.Run("single", func(t *testing.T) { fn(t, newRedisFixture(t, testenv.Redis(t))) })
	t.Run("cluster", func(t *testing.T) { fn(t, newRedisFixture(t, testenv.RedisCluster(t))) })
}

// key returns a hash-tagged bucket key unique to the test, deleted when the
// test ends.
func (f *redisFixture) key(identity string) string {
	k := BucketKey(f.pre, "test", identity)
	f.t.Cleanup(func() { f.rdb.Del(context.Background(), k) })
	return k
}

// state reads a bucket's stored fields; found is false if the key is missing.
func (f *redisFixture) state(key string) (st bucketState, raw [2]string, found bool) {
	f.t.Helper()
	vals, err := f.rdb.HMGet(context.Background(), key, "tokens", "ts").Result()
	if err != nil {
		f.t.Fatalf("HMGET %s: %v", key, err)
	}
	if vals[0] == nil && vals[1] == nil {
		return st, raw, false
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			f.t.Fatalf("HMGET %s: field %d is %T", key, i, v)
		}
		raw[i] = s
	}
	var err1, err2 error
	st.Tokens, err1 = strconv.ParseFloat(raw[0], 64)
	st.TS, err2 = strconv.ParseFloat(raw[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		f.t.Fatalf("bucket %s holds %q: %v", key, raw, err)
	}
	return st, raw, true
}

func (f *redisFixture) exists(key string) bool {
	f.t.Helper()
	n, err := f.rdb.Exists(context.Background(), key).Result()
	if err != nil {
		f.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// redisNow is Redis's clock, as bucket.lua reads it.
func (f *redisFixture) redisNow() time.Time {
	f.t.Helper()
	now, err := f.rdb.Time(context.Background()).Result()
	if err != nil {
		f.t.Fatalf("TIME: %v", err)
	}
	return now
}

func TestRedisBackToBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity float64
		cost     float64
		want     int
	}{
		{"unit costs", 100, 1, 100},
		{"one MaxCost fits once", 100, 60, 1},
		{"remainder is not enough", 10, 3, 3},
		{"fractional cost", 10, 0.25, 40},
		{"cost equals capacity", 5, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			forEachRedis(t, func(t *testing.T, f *redisFixture) {
				key := f.key("back-to-back")
				// So slow a refill that the test cannot earn a token back: at most
				// 1e-4 tokens even if it took 100 s.
				lim := Limit{Rate: 1e-6, Capacity: tt.capacity}
				for i := range tt.want {
					r := mustSpend(t, f.store, key, lim, tt.cost)
					if !r.Allowed {
						t.Fatalf("spend %d rejected: %+v", i+1, r)
					}
				}
				r := mustSpend(t, f.store, key, lim, tt.cost)
				if r.Allowed {
					t.Fatalf("spend %d admitted: %+v", tt.want+1, r)
				}
				if r.RetryAfter <= 0 || r.RetryAfterSeconds() < 1 {
					t.Fatalf("rejection without a retry: %+v", r)
				}
			})
		})
	}
}

func TestRedisFractionalRemaining(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("fractional")
		lim := Limit{Rate: 1e-6, Capacity: 10}
		r := mustSpend(t, f.store, key, lim, 0.25)
		if !r.Allowed || r.Remaining != 9.75 || r.Cost != 0.25 || r.Limit != lim {
			t.Fatalf("first spend of 0.25 from 10: %+v, want exactly 9.75 remaining", r)
		}
		if _, raw, _ := f.state(key); raw[0] != "9.75" {
			t.Fatalf("stored tokens %q, want \"9.75\"", raw[0])
		}
		// A value with no short decimal form survives the round trip too.
		// (Variables, not constants: Go folds constants exactly, Lua cannot.)
		key = f.key("fractional-third")
		one, third := 1.0, 1.0/3
		r = mustSpend(t, f.store, key, Limit{Rate: 1e-6, Capacity: one}, third)
		if want := one - third; r.Remaining != want {
			t.Fatalf("remaining %v, want %v exactly", r.Remaining, want)
		}
		if st, _, _ := f.state(key); st.Tokens != one-third {
			t.Fatalf("stored tokens %v, want %v exactly", st.Tokens, one-third)
		}
	})
}

func TestRedisRefill(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("refill")
		// 1000 tokens/s into a bucket too big to fill during the test.
		lim := Limit{Rate: 1000, Capacity: 1e6}

		a := time.Now()
		if r := mustSpend(t, f.store, key, lim, lim.Capacity); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("emptying spend: %+v", r)
		}
		b := time.Now()
		time.Sleep(50 * time.Millisecond)
		c := time.Now()
		r := mustPeek(t, f.store, key, lim)
		d := time.Now()

		// The script read Redis's clock somewhere inside [a, b] and [c, d]. Allow
		// for TIME's microsecond resolution and a little clock drift.
		lo := lim.Rate*c.Sub(b).Seconds()*0.999 - 0.01
		hi := lim.Rate*d.Sub(a).Seconds()*1.001 + 0.01
		if r.Remaining < lo || r.Remaining > hi {
			t.Fatalf("refilled %v tokens, want within [%v, %v] for %v..%v elapsed", r.Remaining, lo, hi, c.Sub(b), d.Sub(a))
		}
		if want := time.Duration(math.Ceil((lim.Capacity-r.Remaining)/lim.Rate*1000)) * time.Millisecond; r.ResetAfter != want {
			t.Fatalf("ResetAfter %v, want %v", r.ResetAfter, want)
		}
		// The refilled tokens can be spent.
		if r := mustSpend(t, f.store, key, lim, lo); !r.Allowed {
			t.Fatalf("spend of %v refilled tokens rejected: %+v", lo, r)
		}
	})
}

func TestRedisRejectionDeductsNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("reject")
		lim := Limit{Rate: 1e-3, Capacity: 10}
		mustSpend(t, f.store, key, lim, 8)
		_, before, _ := f.state(key)
		ttlBefore := f.rdb.PTTL(context.Background(), key).Val()
		for range 3 {
			r := mustSpend(t, f.store, key, lim, 3)
			if r.Allowed || r.Cost != 3 || r.Remaining < 2 || r.Remaining > 2.01 {
				t.Fatalf("spend of 3 from 2: %+v, want rejected with about 2 remaining", r)
			}
			// deficit ~1 token at 1e-3/s: about 1000 s.
			if r.RetryAfter < 990*time.Second || r.RetryAfter > 1000*time.Second {
				t.Fatalf("RetryAfter %v, want about 1000s", r.RetryAfter)
			}
		}
		if _, after, _ := f.state(key); after != before {
			t.Fatalf("rejections changed the bucket: %q -> %q", before, after)
		}
		if ttl := f.rdb.PTTL(context.Background(), key).Val(); ttl > ttlBefore {
			t.Fatalf("rejection refreshed the TTL: %v -> %v", ttlBefore, ttl)
		}
		if r := mustSpend(t, f.store, key, lim, 2); !r.Allowed {
			t.Fatalf("spend of the 2 left after rejections: %+v", r)
		}
	})
}

func TestRedisConcurrentSpends(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("concurrent")
		lim := Limit{Rate: 10, Capacity: 50}
		const spenders = 200
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range spenders {
			wg.Go(func() {
				<-start
				r, err := f.store.Spend(context.Background(), key, lim, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			})
		}
		began := time.Now()
		close(start)
		wg.Wait()
		elapsed := time.Since(began)

		got := float64(admitted.Load())
		most := lim.Capacity + lim.Rate*elapsed.Seconds()*1.001 + 1e-3
		if got > most {
			t.Fatalf("admitted %v unit spends in %v, more than capacity + rate × elapsed = %v", got, elapsed, most)
		}
		if got < lim.Capacity {
			t.Fatalf("admitted %v unit spends, fewer than the %v a full bucket holds", got, lim.Capacity)
		}
		t.Logf("admitted %v of %d in %v", got, spenders, elapsed)
	})
}

func TestRedisExpiry(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("expiry")
		lim := Limit{Rate: 20, Capacity: 100} // refills from empty in 5 s
		mustSpend(t, f.store, key, lim, 1)
		ttl, err := f.rdb.PTTL(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 4*time.Second || ttl > lim.FillTime() {
			t.Fatalf("PTTL %v, want just under FillTime %v", ttl, lim.FillTime())
		}

		// A bucket that refills in 30 ms is gone soon after.
		key = f.key("expiry-short")
		short := Limit{Rate: 1000, Capacity: 30}
		mustSpend(t, f.store, key, short, 30)
		deadline := time.Now().Add(5 * time.Second)
		for f.exists(key) {
			if time.Now().After(deadline) {
				t.Fatal("idle bucket still exists 5 s after its 30 ms fill time")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if r := mustPeek(t, f.store, key, short); r.Remaining != 30 {
			t.Fatalf("expired bucket peeks %+v, want full", r)
		}
	})
}

func TestRedisUnknownKeyNotCreated(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("unknown")
		lim := Limit{Rate: 1, Capacity: 10}
		r := mustPeek(t, f.store, key, lim)
		if want := (Result{Allowed: true, Remaining: 10, Limit: lim}); r != want {
			t.Fatalf("Peek of an unknown key = %+v, want %+v", r, want)
		}
		if _, err := f.store.Spend(context.Background(), key, lim, 11); !errors.Is(err, ErrCostExceedsCapacity) {
			t.Fatalf("Spend above capacity: %v", err)
		}
		if _, err := f.store.Spend(context.Background(), key, lim, -1); !errors.Is(err, ErrInvalidCost) {
			t.Fatalf("Spend of a negative cost: %v", err)
		}
		if f.exists(key) {
			t.Fatal("peek or a refused spend created the bucket")
		}

		// A key whose bucket is rejected is left as it was: here, a bucket
		// another limit drained is not rewritten by the rejection.
		mustSpend(t, f.store, key, Limit{Rate: 1e-6, Capacity: 10}, 10)
		_, before, _ := f.state(key)
		if r := mustSpend(t, f.store, key, lim, 5); r.Allowed {
			t.Fatalf("spend from a drained bucket admitted: %+v", r)
		}
		if _, after, _ := f.state(key); after != before {
			t.Fatalf("rejection rewrote the bucket: %q -> %q", before, after)
		}
		if r := mustPeek(t, f.store, key, lim); r.Remaining > 1 {
			t.Fatalf("peek after the rejection: %+v", r)
		}
	})
}

// recordingScripter passes script calls to Redis and counts them.
type recordingScripter struct {
	redis.Scripter
	mu                      sync.Mutex
	evalSha, eval, noScript int
}

func (s *recordingScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := s.Scripter.EvalSha(ctx, sha, keys, args...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evalSha++
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") || errors.Is(cmd.Err(), redis.ErrNoScript) {
		s.noScript++
	}
	return cmd
}

func (s *recordingScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	s.mu.Lock()
	s.eval++
	s.mu.Unlock()
	return s.Scripter.Eval(ctx, script, keys, args...)
}

func (s *recordingScripter) counts() [3]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return [3]int{s.evalSha, s.eval, s.noScript}
}

func TestRedisNoScriptRecovery(t *testing.T) {
	// Not parallel, so no other test of this package reloads the script
	// between the flush and the spend. (Tests elsewhere that flush or run
	// scripts are unaffected: go-redis falls back to EVAL for them too.)
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		ctx := context.Background()
		rec := &recordingScripter{Scripter: f.rdb}
		store := NewRedisStore(rec)
		key := f.key("noscript")
		lim := Limit{Rate: 1e-6, Capacity: 10}
		mustSpend(t, store, key, lim, 1) // loads the script, by EVALSHA or EVAL
		if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := rec.counts()
		if r := mustSpend(t, store, key, lim, 1); !r.Allowed || math.Abs(r.Remaining-8) > 1e-3 {
			t.Fatalf("Spend after SCRIPT FLUSH: %+v", r)
		}
		after := rec.counts()
		if d := [3]int{after[0] - before[0], after[1] - before[1], after[2] - before[2]}; d != [3]int{1, 1, 1} {
			t.Fatalf("after SCRIPT FLUSH: %d EVALSHA, %d EVAL, %d NOSCRIPT; want 1 each", d[0], d[1], d[2])
		}
		// EVAL cached the script again: the next call is one EVALSHA.
		if r := mustPeek(t, store, key, lim); math.Abs(r.Remaining-8) > 1e-3 {
			t.Fatalf("Peek after recovery: %+v", r)
		}
		if c := rec.counts(); c[0] != after[0]+1 || c[1] != after[1] {
			t.Fatalf("after recovery: counts %v -> %v, want one EVALSHA", after, c)
		}
	})
}

func TestRedisHashTaggedKey(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		lim := Limit{Rate: 1, Capacity: 10}
		for _, identity := range []string{"203.0.113.7", "2001:db8:1:2::/64", "key-id:abc}def{", ""} {
			key := f.key(identity)
			if r := mustSpend(t, f.store, key, lim, 2); !r.Allowed || r.Remaining != 8 {
				t.Fatalf("%q: %+v", key, r)
			}
			if !f.exists(key) {
				t.Fatalf("%q: bucket not stored under its key", key)
			}
		}
	})
}

func TestRedisCorruptBucketIsFull(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		ctx := context.Background()
		lim := Limit{Rate: 1e-6, Capacity: 10}
		for _, fields := range [][]any{
			{"tokens", "garbage", "ts", "1"},
			{"tokens", "nan", "ts", "1"},
			{"tokens", "5"},
			{"tokens", "-7", "ts", "1e300"},
		} {
			key := f.key(fmt.Sprint(fields...))
			if err := f.rdb.HSet(ctx, key, fields...).Err(); err != nil {
				t.Fatal(err)
			}
			r := mustSpend(t, f.store, key, lim, 1)
			o := step(bucketState{}, false, 0, lim.Rate, lim.Capacity, 1)
			if fields[1] == "-7" {
				o = step(bucketState{-7, 1e300}, true, 0, lim.Rate, lim.Capacity, 1)
			}
			if r.Allowed != o.Allowed || r.Remaining != o.Tokens {
				t.Errorf("bucket %v: Redis %+v, step %+v", fields, r, o)
			}
		}
	})
}

// TestRedisScriptRejectsBadArguments calls bucket.lua directly, as a client
// other than RedisStore could, with arguments RedisStore never sends.
func TestRedisScriptRejectsBadArguments(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("args")
		tests := []struct {
			name string
			args []any
		}{
			{"missing", []any{}},
			{"rate not a number", []any{"x", "10", "1", "spend"}},
			{"rate NaN", []any{"nan", "10", "1", "spend"}},
			{"rate Inf", []any{"inf", "10", "1", "spend"}},
			{"rate zero", []any{"0", "10", "1", "spend"}},
			{"capacity negative", []any{"1", "-10", "1", "spend"}},
			{"cost zero", []any{"1", "10", "0", "spend"}},
			{"cost above capacity", []any{"1", "10", "11", "spend"}},
			{"cost -Inf", []any{"1", "10", "-inf", "peek"}},
			{"mode unknown", []any{"1", "10", "1", "steal"}},
			{"mode missing", []any{"1", "10", "1"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := f.store.script.Run(context.Background(), f.rdb, []string{key}, tt.args...).Err()
				if err == nil || errors.Is(err, redis.Nil) {
					t.Fatalf("script accepted %v: %v", tt.args, err)
				}
			})
		}
		if f.exists(key) {
			t.Fatal("a refused call created the bucket")
		}
	})
}

// TestRedisMatchesMemoryStore runs one sequence of spends, peeks and pauses
// against Redis and against a MemoryStore whose clock is set to the time
// Redis used, and compares every Result. An admitted spend stores Redis's
// clock (ts), so there the comparison is exact; for rejections and peeks the
// clock is bracketed by TIME before and after the call.
func TestRedisMatchesMemoryStore(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("mirror")
		lim := Limit{Rate: 2, Capacity: 10}
		var clock fakeClock
		mem := NewMemoryStore(MemoryOptions{Now: clock.Now})

		type op struct {
			cost  float64 // 0: peek
			sleep time.Duration
		}
		// Every decision has a margin of at least 0.1 tokens (50 ms of refill),
		// far more than the refill during one call.
		seq := []op{
			{cost: 4}, {cost: 4}, {cost: 10}, {cost: 3}, {}, {sleep: 100 * time.Millisecond},
			{cost: 1}, {cost: 0.25}, {cost: 2}, {sleep: 300 * time.Millisecond},
			{cost: 1.25}, {}, {cost: 10}, {cost: 0.1}, {cost: 0.1},
		}
		for i, o := range seq {
			if o.sleep > 0 {
				time.Sleep(o.sleep)
				continue
			}
			t0 := f.redisNow()
			var got Result
			var err error
			if o.cost > 0 {
				got, err = f.store.Spend(context.Background(), key, lim, o.cost)
			} else {
				got, err = f.store.Peek(context.Background(), key, lim)
			}
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			t1 := f.redisNow()
			st, _, _ := f.state(key)

			// The clock the script used: exact for an admitted spend, else t0.
			at, slack := t0, t1.Sub(t0)
			if got.Allowed && o.cost > 0 {
				at, slack = fromSeconds(st.TS), 0
				if at.Before(t0) || at.After(t1) {
					t.Fatalf("op %d: stored ts %v outside [%v, %v]", i, at, t0, t1)
				}
			}
			clock.Set(at)
			var want Result
			if o.cost > 0 {
				want = mustSpend(t, mem, key, lim, o.cost)
			} else {
				want = mustPeek(t, mem, key, lim)
			}

			tokSlack := lim.Rate*slack.Seconds() + 1e-9
			msSlack := slack + time.Millisecond
			if slack == 0 {
				tokSlack, msSlack = 1e-12, 0
			}
			if got.Allowed != want.Allowed || got.Cost != want.Cost || got.Limit != want.Limit ||
				got.Remaining < want.Remaining-1e-12 || got.Remaining > want.Remaining+tokSlack ||
				got.RetryAfter > want.RetryAfter || got.RetryAfter < want.RetryAfter-msSlack ||
				got.ResetAfter > want.ResetAfter || got.ResetAfter < want.ResetAfter-msSlack {
				t.Fatalf("op %d (cost %v): Redis %+v\nMemoryStore %+v (clock slack %v)", i, o.cost, got, want, slack)
			}
			if got.Allowed && o.cost > 0 {
				mb := mem.buckets[key]
				if mb == nil || mb.state != st {
					t.Fatalf("op %d: Redis stores %+v, MemoryStore %+v", i, st, mb)
				}
			}
			t.Logf("op %d cost %v: allowed=%v remaining=%.6f retry=%v reset=%v", i, o.cost, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter)
		}
	})
}

// fromSeconds inverts timeSeconds for a value bucket.lua stored.
func fromSeconds(s float64) time.Time {
	sec := math.Floor(s)
	usec := math.Round((s - sec) * 1e6)
	t := time.Unix(int64(sec), int64(usec)*1000)
	if timeSeconds(t) != s {
		panic(fmt.Sprintf("fromSeconds(%v) does not round-trip: %v", s, timeSeconds(t)))
	}
	return t
}

// fakeScripter answers every script call with one canned reply.
type fakeScripter struct {
	redis.Scripter
	reply any
	err   error
}

func (s fakeScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(s.reply, s.err)
}

func TestRedisStoreMalformedReply(t *testing.T) {
	lim := Limit{Rate: 1, Capacity: 10}
	tests := []struct {
		name  string
		reply any
		err   error
	}{
		{"nil", nil, nil},
		{"status", "OK", nil},
		{"wrong types", []any{"1", int64(9), "0", "0"}, nil},
		{"server error", nil, errors.New("ERR boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewRedisStore(fakeScripter{reply: tt.reply, err: tt.err})
			if r, err := s.Spend(context.Background(), "k", lim, 1); err == nil {
				t.Fatalf("Spend = %+v, want an error", r)
			}
			if r, err := s.Peek(context.Background(), "k", lim); err == nil {
				t.Fatalf("Peek = %+v, want an error", r)
			}
		})
	}
	good := NewRedisStore(fakeScripter{reply: []any{int64(0), "2.5", int64(250), int64(3750)}})
	r, err := good.Spend(context.Background(), "k", lim, 3)
	want := Result{Cost: 3, Remaining: 2.5, RetryAfter: 250 * time.Millisecond, ResetAfter: 3750 * time.Millisecond, Limit: lim}
	if err != nil || r != want {
		t.Fatalf("Spend = %+v, %v; want %+v", r, err, want)
	}
	if _, err := good.Spend(context.Background(), "k", lim, 11); !errors.Is(err, ErrCostExceedsCapacity) {
		t.Fatalf("Spend above capacity: %v", err)
	}
}
