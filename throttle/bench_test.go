package throttle

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/paulmach/orb/maptile"
)

func BenchmarkTileCost(b *testing.B) {
	w := DefaultWeights()
	tiles := []maptile.Tile{maptile.New(8800, 5373, 14), maptile.New(1, 1, 2), maptile.New(300, 200, 9)}
	b.ReportAllocs()
	var sink float64
	for i := 0; b.Loop(); i++ {
		sink += w.Tile(tiles[i%len(tiles)])
	}
	if sink == 0 {
		b.Fatal("no cost")
	}
}

// benchLimit admits every request of cost 1 however fast the benchmark
// runs, so the benchmarks time the admitted path (the one that writes).
var benchLimit = Limit{Rate: 1e6, Capacity: 1e9}

// BenchmarkAdmitMemory times a request's whole budget path in process:
// an admission with its in-flight slot, then its settlement.
func BenchmarkAdmitMemory(b *testing.B) {
	ctx := context.Background()
	s := NewMemoryStore(MemoryOptions{})
	req := Request{Bucket: Bucket{Key: "k", Limit: benchLimit}, Cost: 1, MaxInFlight: 16}
	b.ReportAllocs()
	for b.Loop() {
		a, err := s.Admit(ctx, req)
		if err != nil || !a.Allowed {
			b.Fatal(a, err)
		}
		a.Ticket.Settle(0.5)
	}
}

// BenchmarkApplyBatch times the budget arithmetic alone (admit.lua's Go
// twin) on the batches a busy map client sends: 16 admissions that share
// one call with an aggregate bucket, then their 16 settlements.
func BenchmarkApplyBatch(b *testing.B) {
	sh := shapeOf(Request{Bucket: Bucket{Key: "k", Limit: benchLimit}, Cost: 1, MaxInFlight: 64,
		Aggregate: &Bucket{Key: "agg", Limit: benchLimit}})
	admits, finishes := make([]op, 16), make([]op, 16)
	for i := range admits {
		id := strconv.Itoa(i)
		admits[i] = op{kind: opAdmit, id: id, amount: micro}
		finishes[i] = op{kind: opFinish, id: id, amount: -micro / 2}
	}
	var st, agg keyState
	now := clock{sec: 1_700_000_000}
	b.ReportAllocs()
	for b.Loop() {
		now.usec += 1000
		if now.usec >= 1_000_000 {
			now.sec, now.usec = now.sec+1, 0
		}
		if r := applyBatch(&st, &agg, sh, now, admits); r[15].status != stAdmitted {
			b.Fatal(r[15])
		}
		if r := applyBatch(&st, &agg, sh, now, finishes); r[15].status != stAdmitted {
			b.Fatal(r[15])
		}
	}
}

// seedBaseline is a token bucket script equivalent to the classic
// cost-throttling one (HMGET, HMSET, PEXPIRE; the caller's clock): the
// yardstick of what one call of a minimal bucket costs Redis.
var seedBaseline = redis.NewScript(`local key = KEYS[1]
local now, rate, cap, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local data = redis.call('HMGET', key, 'tokens', 'ts')
local tokens, ts = tonumber(data[1]), tonumber(data[2])
if tokens == nil then tokens = cap; ts = now end
local elapsed = math.max(0, now - ts) / 1000.0
tokens = math.min(cap, tokens + elapsed * rate)
if tokens >= cost then
  tokens = tokens - cost
  redis.call('HMSET', key, 'tokens', tokens, 'ts', now)
  redis.call('PEXPIRE', key, math.ceil(cap / rate * 1000))
  return {1, tokens}
end
redis.call('HMSET', key, 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', key, math.ceil(cap / rate * 1000))
return {0, math.ceil((cost - tokens) / rate * 1000)}`)

var evalshaStats = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

// redisUsec is the EVALSHA calls Redis has run and the microseconds it
// spent in them (INFO commandstats).
func redisUsec(b *testing.B, rdb *redis.Client) (calls, usec float64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStats.FindStringSubmatch(info)
	if m == nil {
		return 0, 0
	}
	calls, _ = strconv.ParseFloat(m[1], 64)
	usec, _ = strconv.ParseFloat(m[2], 64)
	return calls, usec
}

// redisTimer measures what Redis spends in EVALSHA calls (INFO
// commandstats), and the baseline script's share of it.
type redisTimer struct {
	rdb     *redis.Client
	baseKey string
}

func newRedisTimer(b *testing.B) *redisTimer {
	m := &redisTimer{rdb: testenv.Redis(b), baseKey: testenv.Prefix(b) + ":baseline"}
	b.Cleanup(func() { m.rdb.Del(context.Background(), m.baseKey) })
	return m
}

// measure is the Redis time, in µs, of the calls run makes.
func (m *redisTimer) measure(b *testing.B, run func()) float64 {
	ctx := context.Background()
	m.rdb.ConfigResetStat(ctx)
	c0, u0 := redisUsec(b, m.rdb)
	run()
	c1, u1 := redisUsec(b, m.rdb)
	if c1 <= c0 {
		b.Fatal("no EVALSHA reached Redis")
	}
	return u1 - u0
}

// baseline is the Redis time, in µs, of n calls of the baseline script.
func (m *redisTimer) baseline(b *testing.B, n int) float64 {
	ctx := context.Background()
	return m.measure(b, func() {
		for i := range n {
			if err := seedBaseline.Run(ctx, m.rdb, []string{m.baseKey}, time.Now().UnixMilli(), 1e6, 1e9, 1+i%2).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRedisTime measures what Redis itself spends (INFO commandstats)
// per admitted request — admission with its in-flight slot, and its
// settlement — against one call of the baseline script, measured in turn
// with it in every round: the ratio is reported as redis-time/baseline. A
// map client asks for many tiles at once (MapLibre: 6–16 in parallel), so
// "16 clients" is the usual case; "1 client" is a client that never
// overlaps its requests, once spending faster than its bucket refills
// and once slower (its bucket stays full); leases admit both in process.
// "2 replicas" is such a client whose requests alternate between two
// stores sharing its bucket, as geotoll serve's with redis.replicas above
// 1: each taking leases of its own, and, to compare, without leases (one
// call per request). It resets the Redis
// server's statistics: run it alone (make bench does).
func BenchmarkRedisTime(b *testing.B) {
	m := newRedisTimer(b)
	ctx := context.Background()
	pre := testenv.Prefix(b)
	const n = 4000
	for _, c := range []struct {
		name    string
		clients int
		limit   Limit
		stores  int // the client's requests alternate between this many stores (0: 1)
		leases  int // RedisOptions.LeaseRequests (0: the default; -1: none)
	}{
		{"1 client, faster than its refill", 1, Limit{Rate: 100, Capacity: 1e9}, 0, 0},
		{"1 client, slower than its refill", 1, benchLimit, 0, 0},
		{"16 clients", 16, benchLimit, 0, 0},
		{"2 replicas, 1 client, faster than its refill", 1, Limit{Rate: 100, Capacity: 1e9}, 2, 0},
		{"2 replicas without leases, 1 client, faster than its refill", 1, Limit{Rate: 100, Capacity: 1e9}, 2, -1},
		{"2 replicas, 1 client, slower than its refill", 1, benchLimit, 2, 0},
		{"2 replicas without leases, 1 client, slower than its refill", 1, benchLimit, 2, -1},
	} {
		b.Run(c.name, func(b *testing.B) {
			stores := make([]*RedisStore, max(c.stores, 1))
			for i := range stores {
				stores[i] = NewRedisStore(m.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: c.leases})
			}
			key := BucketKey(pre, "bench", c.name)
			b.Cleanup(func() { m.rdb.Del(context.Background(), key, OpenKey(key)) })
			req := Request{Bucket: Bucket{Key: key, Limit: c.limit}, Cost: 1, MaxInFlight: 64}
			var usec, base float64
			for b.Loop() {
				base += m.baseline(b, n) // alternating, so that both see the same load
				usec += m.measure(b, func() {
					var wg sync.WaitGroup
					for range c.clients {
						wg.Go(func() {
							for i := range n / c.clients {
								a, err := stores[i%len(stores)].Admit(ctx, req)
								if err != nil || !a.Allowed {
									b.Error(a, err)
									return
								}
								a.Ticket.Settle(0.5)
							}
						})
					}
					wg.Wait()
					for _, s := range stores {
						_ = s.Flush(ctx)
					}
				})
			}
			per := usec / float64(b.N) / n
			base /= float64(b.N) * n
			b.ReportMetric(per, "redis-µs/request")
			b.ReportMetric(base, "baseline-µs/call")
			b.ReportMetric(per/base, "redis-time/baseline")
			var calls, leases uint64
			for _, s := range stores {
				st := s.Stats()
				calls, leases = calls+st.Calls, leases+st.Leases
			}
			b.ReportMetric(float64(calls)/float64(b.N*n), "calls/request")
			b.ReportMetric(float64(leases)/float64(b.N*n), "leases/request")
		})
	}
}

// floorScript makes only the Redis commands a bucket needs that keeps
// Redis's clock, its value in one key and its open requests in a hash, as
// admit.lua does — read the clock and the bucket, open each admitted
// request and close each finished one, write the bucket back — and none
// of the arithmetic: what one call of admit.lua's shape costs Redis at the
// least. Its reply has admit.lua's shape: 1 for an operation applied (an
// admission opened, a finish closing an open request), else 0.
var floorScript = redis.NewScript(`#!lua
redis.call('TIME')
redis.pcall('GET', KEYS[1])
local out = {}
for i = 9, #ARGV, 3 do
  if ARGV[i] == 'A' then
    out[#out + 1] = redis.call('HSETNX', KEYS[2], ARGV[i + 1], '1000000 1')
  else
    out[#out + 1] = redis.call('HDEL', KEYS[2], ARGV[i + 1])
  end
  out[#out + 1] = 0
end
redis.call('SET', KEYS[1], '0 0 0 0 0 0 0', 'KEEPTTL')
return out`)

// BenchmarkRedisFloor puts admit.lua beside floorScript and the baseline
// script, each measured in turn in every round: calls that each carry n
// admissions and the n finishes of the call before, per request. n = 1 is
// a caller that never overlaps its requests and whose bucket stays full
// (one call per request), n = 8 what 16 parallel requests share. It shows
// how far a call per request can go with admit.lua's keys:
// floor-time/baseline is the least admit-time/baseline can be. Every
// operation must be applied (an admission admitted, a finish closing an
// open request), so that neither script is timed refusing.
func BenchmarkRedisFloor(b *testing.B) {
	m := newRedisTimer(b)
	admit := redis.NewScript(admitLua)
	const calls = 2000
	for _, n := range []int{1, 8} {
		b.Run(strconv.Itoa(n)+" per call", func(b *testing.B) {
			var used [2]float64
			var base float64
			for b.Loop() {
				base += m.baseline(b, calls)
				for i, s := range []*redis.Script{admit, floorScript} {
					key := BucketKey(testenv.Prefix(b), "floor", strconv.Itoa(i))
					keys := []string{key, OpenKey(key), VoidKey(key)}
					b.Cleanup(func() { m.rdb.Del(context.Background(), keys...) })
					used[i] += m.measure(b, func() { runFloorCalls(b, m.rdb, s, keys, calls, n) })
				}
			}
			requests := float64(b.N * calls * n)
			base /= float64(b.N * calls)
			b.ReportMetric(base, "baseline-µs/call")
			b.ReportMetric(used[0]/requests/base, "admit-time/baseline")
			b.ReportMetric(used[1]/requests/base, "floor-time/baseline")
		})
	}
}

// runFloorCalls sends calls batches to s, each of n admissions and the n
// finishes of the batch before, and fails b unless every one applied.
func runFloorCalls(b *testing.B, rdb *redis.Client, s *redis.Script, keys []string, calls, n int) {
	ctx := context.Background()
	for c := range calls {
		args := []any{"1000000000000", "1000000000000000", "1000000", "", "", "64", "30000", ""}
		ops := 0
		for j := range n {
			args = append(args, "A", strconv.Itoa(c*n+j), "1000000")
			ops++
			if c > 0 {
				args = append(args, "F", strconv.Itoa((c-1)*n+j), "-500000")
				ops++
			}
		}
		v, err := s.Run(ctx, rdb, keys, args...).Result()
		if err != nil {
			b.Fatal(err)
		}
		rs, err := parseBatchReply(v, ops)
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range rs {
			if r.status != stAdmitted {
				b.Fatalf("call %d, operation %d: status %d, want every one applied", c, i, r.status)
			}
		}
	}
}

// BenchmarkAdmitRedis times one admitted request's round trip on the
// client's path (the settlement rides on a later call), beside one PING.
func BenchmarkAdmitRedis(b *testing.B) {
	rdb := testenv.Redis(b)
	ctx := context.Background()
	s := NewRedisStore(rdb, RedisOptions{Timeout: testCallTimeout})
	key := BucketKey(testenv.Prefix(b), "bench", "client")
	b.Cleanup(func() { rdb.Del(context.Background(), key, OpenKey(key)) })
	req := Request{Bucket: Bucket{Key: key, Limit: benchLimit}, Cost: 1, MaxInFlight: 16}
	b.Run("admit+settle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, err := s.Admit(ctx, req)
			if err != nil || !a.Allowed {
				b.Fatal(a, err)
			}
			a.Ticket.Settle(0.5)
		}
	})
	b.Run("ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
