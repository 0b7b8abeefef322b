package throttle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
)

// redisFixture is one integration test's Redis client, store and key space.
type redisFixture struct {
	t     *testing.T
	rdb   redis.UniversalClient
	store *RedisStore
	pre   string
}

// testLeaseHold is the LeaseHold of the tests' stores: as long as a
// request's default TTL lets a lease live (half of it), far longer than a
// test. With the default half second, a loaded machine that paused a test
// that long would find its lease gone and test something else (a request
// sent to Redis where the test meant one on the lease). The tests of a
// lease's end call expire, or fire the hold's timer, at once; the stress
// tests keep short holds of their own.
const testLeaseHold = DefaultTTL / 2

// testCallTimeout bounds one Redis call of the tests' stores: generous, so
// that a call on a machine the other packages' tests keep busy (the race
// detector, a browser, pgbench on two CPUs) is not cut; no test depends on
// a call being cut at it.
const testCallTimeout = 5 * time.Second

func newRedisFixture(t *testing.T, rdb redis.UniversalClient) *redisFixture {
	t.Helper()
	store := NewRedisStore(rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
	return &redisFixture{t: t, rdb: rdb, store: store, pre: testenv.Prefix(t)}
}

// forEachRedis runs an integration test against the single test Redis and
// against the test Redis Cluster, where every key of a test lands in the
// slot of its own hash tag.
func forEachRedis(t *testing.T, fn func(t *testing.T, f *redisFixture)) {
	t.Helper()
	t.Run("single", func(t *testing.T) { fn(t, newRedisFixture(t, testenv.Redis(t))) })
	t.Run("cluster", func(t *testing.T) { fn(t, newRedisFixture(t, testenv.RedisCluster(t))) })
}

// key returns a hash-tagged bucket key unique to the test; it and its open
// hash are deleted when the test ends.
func (f *redisFixture) key(identity string) string {
	k := BucketKey(f.pre, "test", identity)
	f.t.Cleanup(func() {
		for _, x := range []string{k, OpenKey(k), VoidKey(k)} {
			f.rdb.Del(context.Background(), x)
		}
	})
	return k
}

// state reads a caller's stored state as admit.lua left it.
func (f *redisFixture) state(key string) keyState {
	f.t.Helper()
	ctx := context.Background()
	raw, err := f.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return keyState{}
	}
	if err != nil {
		f.t.Fatalf("GET %s: %v", key, err)
	}
	var st keyState
	var tok float64
	if _, err := fmt.Sscanf(raw, "%g %d %d %d %d %d %d", &tok, &st.b.sec, &st.b.usec, &st.b.expiresMS, &st.b.openExpires, &st.b.n, &st.b.voidsUntil); err != nil {
		f.t.Fatalf("%s holds %q: %v", key, raw, err)
	}
	if fields := strings.Fields(raw); len(fields) > 7 { // what is out on leases
		if _, err := fmt.Sscanf(strings.Join(fields[7:], " "), "%g %d", &st.b.leased, &st.b.leasedUntil); err != nil || len(fields) != 9 {
			f.t.Fatalf("%s holds %q: %v", key, raw, err)
		}
	}
	st.b.tokens, st.found = tok, true
	open, err := f.rdb.HGetAll(ctx, OpenKey(key)).Result()
	if err != nil {
		f.t.Fatalf("HGETALL: %v", err)
	}
	for id, v := range open {
		paid, exp, _ := strings.Cut(v, " ")
		exp, lease := strings.CutSuffix(exp, " L")
		p, err1 := strconv.ParseFloat(paid, 64)
		e, err2 := strconv.ParseInt(exp, 10, 64)
		if err1 != nil || err2 != nil {
			f.t.Fatalf("open request %s = %q", id, v)
		}
		if st.open == nil {
			st.open = map[string]openReq{}
		}
		st.open[id] = openReq{paid: p, expiresMS: e, lease: lease}
	}
	voids, err := f.rdb.HKeys(ctx, VoidKey(key)).Result()
	if err != nil {
		f.t.Fatalf("HKEYS: %v", err)
	}
	for _, id := range voids {
		if st.voids == nil {
			st.voids = map[string]bool{}
		}
		st.voids[id] = true
	}
	return st
}

func (f *redisFixture) redisClock() clock {
	f.t.Helper()
	now, err := f.rdb.Time(context.Background()).Result()
	if err != nil {
		f.t.Fatalf("TIME: %v", err)
	}
	return clock{sec: now.Unix(), usec: int64(now.Nanosecond() / 1000)}
}

// run sends one batch straight to the script.
func (f *redisFixture) run(key string, sh shape, ops []op) []opResult {
	f.t.Helper()
	args := []any{formatMicro(sh.rate), formatMicro(sh.capacity), formatMicro(sh.floor), "", "",
		strconv.Itoa(sh.max), strconv.FormatInt(sh.ttlMS, 10), ""}
	if sh.notAfterMS != 0 {
		args[7] = strconv.FormatInt(sh.notAfterMS, 10)
	}
	for _, o := range ops {
		args = append(args, string(o.kind), o.id, o.wireAmount())
	}
	v, err := f.store.script.Run(context.Background(), f.rdb, []string{key, OpenKey(key), VoidKey(key)}, args...).Result()
	if err != nil {
		f.t.Fatalf("script: %v", err)
	}
	rs, err := parseBatchReply(v, len(ops))
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// TestScriptMatchesTwin holds admit.lua to applyBatch, operation for
// operation: random batches run on Redis, then on the Go twin at the very
// clock the script stored; replies and stored state must be identical.
// Batches that write nothing are checked against the twin at the clocks
// just before and after them. Redis deletes a key once its expiry has
// passed, and a loaded machine may pause the test that long — between two
// batches, or between a batch and the reads of what it stored: the twin
// forgets what Redis has deleted (expiredAt), and what Redis deleted
// before it was read is not compared.
func TestScriptMatchesTwin(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("twin")
		rng := rand.New(rand.NewPCG(7, 11))
		sh := shape{rate: 5 * micro, capacity: 20 * micro, floor: 8 * micro, max: 3, ttlMS: 150}
		var twin keyState
		ids := []string{"0a", "1b", "2c", "3d", "4e", "0a+", "1b+"} // x+: what moving x opens
		for batch := range 60 {
			var ops []op
			for range 1 + rng.IntN(4) {
				id := ids[rng.IntN(len(ids))]
				switch rng.IntN(7) {
				case 5:
					ops = append(ops, op{kind: opMove, id: id, amount: math.Round(float64(rng.IntN(13)-6) * micro / 3)})
				case 0:
					ops = append(ops, op{kind: opAdmit, id: id, amount: float64(1+rng.IntN(9)) * micro / 2})
				case 1: // a lease: counted as leased until it closes
					ops = append(ops, op{kind: opLease, id: id, amount: float64(1+rng.IntN(9)) * micro / 2})
				case 2:
					ops = append(ops, op{kind: opShadow, id: id, amount: float64(1+rng.IntN(9)) * micro})
				case 3:
					ops = append(ops, op{kind: opFinish, id: id, amount: math.Round(float64(rng.IntN(13)-6) * micro / 3)})
				case 4: // a lease's give-back: settlements made in process, replayed at their moments
					o := op{kind: opFinish, id: id, amount: -1}
					if rng.IntN(3) == 0 {
						o.kind = opMove
					}
					for range rng.IntN(4) {
						o.replay = append(o.replay, replayed{d: math.Round(float64(rng.IntN(17)-5) * micro / 3), agoUS: int64(rng.IntN(400_000))})
					}
					ops = append(ops, o)
				default: // a tombstone's deadline, when the id is not open
					ops = append(ops, op{kind: opVoid, id: id, amount: float64(time.Now().Add(time.Duration(rng.IntN(300)) * time.Millisecond).UnixMilli())})
				}
			}
			before := f.redisClock()
			got := f.run(key, sh, ops)
			after := f.redisClock()
			stored := f.state(key)
			// Redis drops the tombstones' hash a grace after voidsUntil,
			// the twin at its next batch: they hold the same tombstones
			// unless that moment has passed when the state is read.
			read := f.redisClock()
			voidsLive := stored.b.voidsUntil == 0 || read.ms() <= voidsExpiry(stored.b.voidsUntil)
			openLive := read.ms() <= stored.b.openExpires
			if stored.found && (stored.b.sec != twin.b.sec || stored.b.usec != twin.b.usec || !twin.found) {
				// The script wrote: run the twin at the clock it stored.
				c := clock{sec: stored.b.sec, usec: stored.b.usec}
				twin = expiredAt(twin, c)
				want := applyBatch(&twin, nil, sh, c, ops)
				compareResults(t, batch, ops, got, want)
				if twin.b != stored.b || (openLive && len(twin.open) != len(stored.open)) || (voidsLive && !maps.Equal(twin.voids, stored.voids)) {
					t.Fatalf("batch %d: Redis stores %+v (%d open, %d tombstones), the twin %+v (%d open, %d tombstones)",
						batch, stored.b, len(stored.open), len(stored.voids), twin.b, len(twin.open), len(twin.voids))
				}
				for id, r := range twin.open {
					if openLive && stored.open[id] != r {
						t.Fatalf("batch %d: open %s: Redis %+v, twin %+v", batch, id, stored.open[id], r)
					}
				}
			} else {
				// Nothing written: the twin at either bound agrees on every
				// status, and the tokens lie between.
				// Each runs on its own copy: applyBatch writes the maps
				// of the state it is given, and the twin must stay as the
				// script left it, which changed nothing.
				lo, hi := expiredAt(twin.clone(), before), expiredAt(twin.clone(), after)
				a := applyBatch(&lo, nil, sh, before, ops)
				b := applyBatch(&hi, nil, sh, after, ops)
				// A request or tombstone may expire between the two clocks,
				// which changes the decisions of the whole batch: the script
				// agrees with the twin at one of them on every status, and
				// its tokens lie between the two.
				same := func(w []opResult) bool {
					for i := range got {
						if got[i].status != w[i].status {
							return false
						}
					}
					return true
				}
				if !same(a) && !same(b) {
					t.Fatalf("batch %d: Redis %+v, twin %+v before and %+v after", batch, got, a, b)
				}
				// When the two clocks disagree, the script's tokens are
				// those of the twin it agrees with, refilled by at most
				// what the time between the clocks adds.
				refill := float64((after.sec-before.sec)*1_000_000+(after.usec-before.usec)) * sh.rate / 1e6
				for i := range got {
					lo, hi := min(a[i].tokens, b[i].tokens), max(a[i].tokens, b[i].tokens)
					if !same(b) {
						lo, hi = a[i].tokens, min(a[i].tokens+refill, sh.capacity)
					} else if !same(a) {
						lo, hi = b[i].tokens-refill, b[i].tokens
					}
					if got[i].tokens < lo || got[i].tokens > hi {
						t.Fatalf("batch %d op %d (%c %s): Redis %+v, twin between %+v and %+v", batch, i, ops[i].kind, ops[i].id, got[i], a[i], b[i])
					}
				}
			}
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		}
	})
}

// expiredAt is s as Redis holds it at c: nothing once the bucket key's
// expiry has passed (it outlives the hashes, which applyBatch drops by
// their own expiries).
func expiredAt(s keyState, c clock) keyState {
	if s.found && c.ms() > s.b.expiresMS {
		return keyState{}
	}
	return s
}

// clone returns a copy of s that shares none of its maps.
func (s keyState) clone() keyState {
	s.open, s.voids = maps.Clone(s.open), maps.Clone(s.voids)
	return s
}

func compareResults(t *testing.T, batch int, ops []op, got, want []opResult) {
	t.Helper()
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("batch %d op %d (%c %s %v): Redis %+v, twin %+v", batch, i, ops[i].kind, ops[i].id, ops[i].amount, got[i], want[i])
		}
	}
}

// TestScriptOpenHashAlwaysExpires: the hash of a caller's open requests
// expires whatever emptied it and opened it again — a finish or a move of
// its last request, in the same batch as the next open or in an earlier
// one — and no later than its bucket. Redis deletes an emptied hash, its
// expiry with it; one made again without an expiry would outlive its
// bucket, forever when its requests are never finished (their process
// died), and a caller whose bucket vanished would still find them open.
func TestScriptOpenHashAlwaysExpires(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		// A TTL of a minute: the expiry recorded stays ahead of every
		// batch, however slow the machine, so only the fix sets it again.
		long := shape{rate: micro, capacity: 10 * micro, max: 4, ttlMS: 60000}
		short := long
		short.ttlMS = 150
		four := []op{{kind: opAdmit, id: "a", amount: micro}, {kind: opAdmit, id: "b", amount: micro},
			{kind: opAdmit, id: "c", amount: micro}, {kind: opAdmit, id: "d", amount: micro}}
		for _, c := range []struct {
			name    string
			sh      shape
			batches [][]op
			pause   time.Duration // before the last batch
		}{
			{name: "finish and open in one batch", sh: long, batches: [][]op{
				{{kind: opAdmit, id: "a", amount: micro}},
				{{kind: opFinish, id: "a"}, {kind: opAdmit, id: "b", amount: micro}},
			}},
			{name: "open after a finish", sh: long, batches: [][]op{
				{{kind: opAdmit, id: "a", amount: micro}},
				{{kind: opFinish, id: "a"}},
				{{kind: opAdmit, id: "b", amount: micro}},
			}},
			{name: "move of the last request", sh: long, batches: [][]op{
				{{kind: opAdmit, id: "a", amount: micro}},
				{{kind: opMove, id: "a"}},
			}},
			// At the in-flight cap the script sweeps the requests past
			// their TTL (150 ms): all four, so the hash goes before the
			// open makes it again.
			{name: "open after a sweep of every request", sh: short, batches: [][]op{four, {{kind: opAdmit, id: "e", amount: micro}}}, pause: 300 * time.Millisecond},
		} {
			key := f.key(c.name)
			for i, ops := range c.batches {
				if i == len(c.batches)-1 {
					time.Sleep(c.pause)
				}
				for j, r := range f.run(key, c.sh, ops) {
					if r.status != stAdmitted {
						t.Fatalf("%s: batch %d op %d: status %d", c.name, i, j, r.status)
					}
				}
			}
			// Moments, not times to live: two reads are apart.
			ctx := context.Background()
			open, bucket := f.rdb.PExpireTime(ctx, OpenKey(key)).Val(), f.rdb.PExpireTime(ctx, key).Val()
			if open <= 0 || bucket < open {
				t.Fatalf("%s: the open hash expires at %v (negative: never, or gone), its bucket at %v (Unix ms)", c.name, open, bucket)
			}
		}

		// A bucket without a value has nothing open: the hash that outlived
		// it (deleted by hand here, as an eviction would) goes with the next
		// call, rather than live on, without an expiry, under a move.
		key := f.key("bucket gone")
		if r := f.run(key, long, []op{{kind: opAdmit, id: "a", amount: micro}}); r[0].status != stAdmitted {
			t.Fatalf("bucket gone: admit: status %d", r[0].status)
		}
		ctx := context.Background()
		f.rdb.Del(ctx, key)
		if r := f.run(key, long, []op{{kind: opMove, id: "a"}}); r[0].status != stRefused {
			t.Errorf("bucket gone: move of a request it no longer holds: status %d, want %d", r[0].status, stRefused)
		}
		if n := f.rdb.Exists(ctx, OpenKey(key)).Val(); n != 0 {
			t.Errorf("bucket gone: the open hash is still there (PTTL %v)", f.rdb.PTTL(ctx, OpenKey(key)).Val())
		}
	})
}

// TestScriptTombstoneOutlivesASlowBatch: a void whose deadline the clock
// reaches while the script still runs leaves its tombstone, which turns
// away the admit of the same id later in the batch. The peeks before the
// void keep the script busy past the deadline (on Redis 7.0 a PEXPIREAT at
// a moment already reached deletes the key at once).
func TestScriptTombstoneOutlivesASlowBatch(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		sh := shape{rate: micro, capacity: 10 * micro, max: 4, ttlMS: 60000}
		ops := make([]op, 20000, 20002)
		for i := range ops {
			ops[i] = op{kind: opPeek}
		}
		// The script must read its clock before the deadline, and the
		// peeks take it past: a try that starts too late sets the next
		// deadline that much later. A loaded machine (a fresh-clone CI)
		// can start each try later than the one before: up to 10 tries.
		lead := int64(5)
		const tries = 10
		for attempt := range tries {
			key := f.key(fmt.Sprintf("slow%d", attempt))
			sent := f.redisClock().ms()
			keep := sent + lead
			got := f.run(key, sh, append(ops, op{kind: opVoid, id: "x", amount: float64(keep)}, op{kind: opAdmit, id: "x", amount: micro}))
			st := f.state(key)
			if began := (clock{sec: st.b.sec, usec: st.b.usec}).ms(); began >= keep {
				lead = began - sent + 2
				continue
			}
			if last := got[len(got)-1]; last.status != stLate || st.b.voidsUntil != keep || !st.voids["x"] || len(st.open) != 0 {
				t.Fatalf("void until %d then admit: %+v; stored %+v, tombstones %v, open %v; want the admit turned away by the tombstone", keep, last, st.b, st.voids, st.open)
			}
			return
		}
		t.Fatalf("the script never read its clock before the deadline in %d tries (last lead %d ms)", tries, lead)
	})
}

func TestScriptLateBatchAdmitsNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("late")
		sh := shape{rate: micro, capacity: 10 * micro, max: 4, ttlMS: 60000}
		f.run(key, sh, []op{{kind: opAdmit, id: "early", amount: micro}})
		sh.notAfterMS = time.Now().Add(-time.Second).UnixMilli()
		got := f.run(key, sh, []op{{kind: opAdmit, id: "late", amount: micro}, {kind: opFinish, id: "early", amount: -micro}})
		if got[0].status != stLate || got[1].status != stAdmitted || got[1].tokens != 10*micro {
			t.Fatalf("late batch: %+v; want the admit dropped and the finish applied", got)
		}
		if st := f.state(key); len(st.open) != 0 {
			t.Fatalf("open after a late batch: %+v", st.open)
		}
	})
}

func TestScriptRefusalWritesNothing(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("refusal")
		sh := shape{rate: 1, capacity: 10 * micro, max: 1, ttlMS: 60000}
		f.run(key, sh, []op{{kind: opAdmit, id: "a", amount: 9 * micro}})
		before := f.written(t, key)
		f.run(key, sh, []op{{kind: opAdmit, id: "b", amount: 2 * micro}, {kind: opAdmit, id: "c", amount: micro}, {kind: opPeek}, {kind: opFinish, id: "zz"}})
		after := f.written(t, key)
		for k, b := range before {
			if a := after[k]; a.value != b.value || a.ttl > b.ttl {
				t.Errorf("refusals wrote %s: %q (ttl %v) -> %q (ttl %v)", k, b.value, b.ttl, a.value, a.ttl)
			}
		}
		if before[OpenKey(key)].value == "" {
			t.Fatal("the admitted request is not open: the refusals were not tested against an open request")
		}
		fresh := f.key("never")
		f.run(fresh, sh, []op{{kind: opAdmit, id: "a", amount: 11 * micro}, {kind: opPeek}, {kind: opVoid, id: "a"}})
		if n, _ := f.rdb.Exists(context.Background(), fresh, OpenKey(fresh)).Result(); n != 0 {
			t.Fatalf("an invalid admit, a peek and a void created %d keys", n)
		}
	})
}

// stored is one Redis key's value as written (a hash's fields, sorted)
// and its time to live.
type stored struct {
	value string
	ttl   time.Duration
}

// written is what Redis holds of a bucket: the bucket, its open requests
// and its tombstones.
func (f *redisFixture) written(t *testing.T, key string) map[string]stored {
	t.Helper()
	ctx := context.Background()
	out := map[string]stored{}
	for _, k := range []string{key, OpenKey(key), VoidKey(key)} {
		var value string
		switch typ, err := f.rdb.Type(ctx, k).Result(); {
		case err != nil:
			t.Fatal(err)
		case typ == "hash":
			m, err := f.rdb.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			fields := make([]string, 0, len(m))
			for name, v := range m {
				fields = append(fields, name+"="+v)
			}
			sort.Strings(fields)
			value = strings.Join(fields, ",")
		case typ == "string":
			value, _ = f.rdb.Get(ctx, k).Result()
		case typ != "none":
			value = "a " + typ
		}
		ttl, _ := f.rdb.PTTL(ctx, k).Result()
		out[k] = stored{value: value, ttl: ttl}
	}
	return out
}

func TestScriptReplacesAnOlderVersionsBucket(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("old")
		f.rdb.HSet(context.Background(), key, "tokens", "3", "ts", "1700000000")
		got := f.run(key, shape{rate: micro, capacity: 10 * micro, max: 1, ttlMS: 1000}, []op{{kind: opAdmit, id: "a", amount: 4 * micro}})
		if got[0] != (opResult{status: stAdmitted, tokens: 6 * micro}) || !f.state(key).found {
			t.Fatalf("admit over an old hash bucket: %+v", got)
		}
	})
}

func TestScriptKeysExpire(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("expire")
		// 0.2 s to refill, a request open 0.3 s: both keys expire within
		// that plus the slack (at least a second).
		f.run(key, shape{rate: 10 * micro, capacity: 10 * micro, max: 1, ttlMS: 300}, []op{{kind: opAdmit, id: "a", amount: 2 * micro}})
		ctx := context.Background()
		for _, k := range []string{key, OpenKey(key)} {
			ttl, err := f.rdb.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 || ttl > 1400*time.Millisecond {
				t.Fatalf("PTTL %s = %v, %v; want (0, 1.4 s]", k, ttl, err)
			}
		}
	})
}

// TestRedisGroupsConcurrentRequests: a burst of concurrent requests of one
// caller shares calls, and admits exactly what the bucket holds.
func TestRedisGroupsConcurrentRequests(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("burst"), Limit: Limit{Rate: 1e-6, Capacity: 100}}
		const n = 200
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				a, err := f.store.Admit(context.Background(), Request{Bucket: b, Cost: 1, MaxInFlight: n})
				if err != nil {
					t.Error(err)
					return
				}
				if a.Allowed {
					admitted.Add(1)
					a.Ticket.Release()
				}
			})
		}
		close(start)
		wg.Wait()
		st := f.store.Stats()
		if admitted.Load() != 100 {
			t.Fatalf("admitted %d of %d, want exactly the capacity 100", admitted.Load(), n)
		}
		if st.Admits+st.Local < n || st.Calls >= n {
			t.Fatalf("%d admits sent and %d in process in %d calls: a burst should share calls", st.Admits, st.Local, st.Calls)
		}
		t.Logf("%d admits sent and %d in process (and their releases) in %d calls", st.Admits, st.Local, st.Calls)
		flushWithin(t, f.store)
		if st := f.state(b.Key); st.b.n != 0 || len(st.open) != 0 {
			t.Fatalf("%d requests left open after every release", st.b.n)
		}
	})
}

// TestRedisReplicasSettleConcurrently: two stores (two geotoll replicas)
// admit and settle on one caller's bucket at once; no update is lost.
func TestRedisReplicasSettleConcurrently(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("replicas"), Limit: Limit{Rate: 1e-5, Capacity: 10000}}
		replicas := []*RedisStore{f.store, NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout})}
		const each = 100
		var wg sync.WaitGroup
		for i, s := range replicas {
			wg.Go(func() {
				for j := range each {
					a, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 10, Debt: 100})
					if err != nil || !a.Allowed {
						t.Errorf("replica %d admit %d: %+v %v", i, j, a, err)
						return
					}
					// Replica 0's requests cost 4 (6 back), replica 1's 13 (3 more).
					a.Ticket.Settle([]float64{4, 13}[i])
				}
			})
		}
		wg.Wait()
		for _, s := range replicas {
			flushWithin(t, s)
		}
		settled(t, f.store, b, 10000-each*4-each*13)
	})
}

// flakyScripter runs every call for real and then, while armed, reports it
// as failed: a reply lost after Redis applied the batch.
type flakyScripter struct {
	redis.UniversalClient
	armed atomic.Bool
}

func (s *flakyScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := s.UniversalClient.EvalSha(ctx, sha, keys, args...)
	if s.armed.Load() && cmd.Err() == nil {
		cmd.SetErr(context.DeadlineExceeded)
	}
	return cmd
}

func (s *flakyScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	cmd := s.UniversalClient.Eval(ctx, script, keys, args...)
	if s.armed.Load() && cmd.Err() == nil {
		cmd.SetErr(context.DeadlineExceeded)
	}
	return cmd
}

// slowHolds reports whether a bucket of the slow limit, made after start,
// holds u micro-tokens where want tokens are expected: want, and the
// micro-token a second it may have refilled since. A script credits the
// whole micro-tokens elapsed since the bucket's last write, so a test
// that runs within a second finds exactly want, and one that a loaded
// machine stretched to n seconds up to n more.
func slowHolds(u, want float64, start time.Time) bool {
	extra := u - toMicro(want)
	return extra >= 0 && extra <= math.Floor(time.Since(start).Seconds()*toMicro(slow.Rate))
}

// TestRedisUnansweredBatchIsVoided: a batch Redis applied but whose answer
// never came is reported as failed to its callers (who are decided by the
// fail mode), and its admits are voided once its deadline has passed: the
// request is charged once, not twice.
func TestRedisUnansweredBatchIsVoided(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		flaky := &flakyScripter{UniversalClient: f.rdb}
		s := NewRedisStore(flaky, RedisOptions{Timeout: 200 * time.Millisecond})
		b := Bucket{Key: f.key("unanswered"), Limit: slow}
		start := time.Now()
		mustAdmit(t, s, Request{Bucket: b, Cost: 1}).Ticket.Release()
		flaky.armed.Store(true)
		if _, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 5}); err == nil {
			t.Fatal("an unanswered batch was reported as answered")
		}
		if st := f.state(b.Key); len(st.open) != 1 {
			t.Fatalf("the unanswered admit was not applied (%d open): the test proves nothing", len(st.open))
		}
		flaky.armed.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if st := f.state(b.Key); len(st.open) != 0 || !slowHolds(st.b.tokens, 9, start) {
			t.Fatalf("after the void: %v tokens, %d open; want 9 and none", st.b.tokens/micro, len(st.open))
		}
		if s.Stats().Voids != 1 {
			t.Fatalf("voids %d, want 1", s.Stats().Voids)
		}
	})
}

// TestRedisFinishesSurviveFailures: a finish whose call fails is sent
// again and applies once.
func TestRedisFinishesSurviveFailures(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		flaky := &flakyScripter{UniversalClient: f.rdb}
		s := NewRedisStore(flaky, RedisOptions{Timeout: 200 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
		b := Bucket{Key: f.key("finish"), Limit: slow}
		start := time.Now()
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 6})
		flaky.armed.Store(true)
		a.Ticket.Settle(1) // 5 back; its first call "fails" after applying
		time.Sleep(50 * time.Millisecond)
		flaky.armed.Store(false)
		flushWithin(t, s)
		if st := f.state(b.Key); !slowHolds(st.b.tokens, 9, start) || len(st.open) != 0 {
			t.Fatalf("%v tokens, %d open; want 9 and none (settled once)", st.b.tokens/micro, len(st.open))
		}
	})
}

func TestRedisScriptFlushIsRecovered(t *testing.T) {
	t.Parallel()
	f := newRedisFixture(t, testenv.Redis(t))
	b := Bucket{Key: f.key("noscript"), Limit: slow}
	start := time.Now()
	mustAdmit(t, f.store, Request{Bucket: b, Cost: 1}).Ticket.Release()
	if err := f.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if a := mustAdmit(t, f.store, Request{Bucket: b, Cost: 1}); !a.Allowed || !slowLeft(a.Result.Remaining, 8, start) {
		t.Fatalf("after SCRIPT FLUSH: %+v", a)
	}
}

func TestRedisAbandonedAdmitIsVoided(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("abandoned"), Limit: slow}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				// Callers that give up at once: whatever was admitted for
				// them is voided, whatever was queued is never sent.
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Microsecond)
				defer cancel()
				if a, err := f.store.Admit(ctx, Request{Bucket: b, Cost: 0.1}); err == nil {
					a.Ticket.Settle(0) // ran, cost nothing: all back
				}
			})
		}
		wg.Wait()
		flushWithin(t, f.store)
		if st := f.state(b.Key); st.found && (len(st.open) != 0 || st.b.tokens != 10*micro) {
			t.Fatalf("%v tokens, %d open after every caller left", st.b.tokens/micro, len(st.open))
		}
	})
}

// TestScriptTombstoneTurnsALateAdmitAway: a void that reaches Redis before
// the admit it voids (the admit's batch was stuck, then came) leaves a
// tombstone: the admit admits nothing, and holds no slot.
func TestScriptTombstoneTurnsALateAdmitAway(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("tomb")
		sh := shape{rate: micro, capacity: 10 * micro, max: 1, ttlMS: 60000}
		until := float64(time.Now().Add(time.Minute).UnixMilli())
		got := f.run(key, sh, []op{{kind: opVoid, id: "late", amount: until}, {kind: opVoid, id: "late", amount: until}})
		if got[0].status != stRefused || got[1].status != stRefused {
			t.Fatalf("voids of an id never admitted: %+v", got)
		}
		got = f.run(key, sh, []op{{kind: opAdmit, id: "late", amount: micro}, {kind: opAdmit, id: "next", amount: micro}})
		if got[0].status != stLate || got[0].tokens != 10*micro || got[1].status != stAdmitted {
			t.Fatalf("the voided admit, then another (cap 1): %+v", got)
		}
	})
}

// flushWithin sends what s has pending, failing the test after 10 s.
func flushWithin(t *testing.T, s *RedisStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// skewedScripter makes Redis's clock look ahead of this process's by
// ahead: it moves every batch's deadline (admit.lua's ARGV[8]) back by that
// much, which is what a Redis clock running ahead does to it.
type skewedScripter struct {
	redis.UniversalClient
	ahead time.Duration
}

func (s *skewedScripter) skew(args []any) []any {
	out := append([]any(nil), args...)
	if v, ok := out[7].(string); ok && v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			out[7] = strconv.FormatInt(ms-s.ahead.Milliseconds(), 10)
		}
	}
	return out
}

func (s *skewedScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.UniversalClient.EvalSha(ctx, sha, keys, s.skew(args)...)
}

func (s *skewedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.UniversalClient.Eval(ctx, script, keys, s.skew(args)...)
}

// TestRedisLateBatchIsNotARefusal: a batch that reaches Redis after its
// deadline by Redis's clock — here a Redis clock 5 s ahead of ours, past
// Timeout + ClockSkew — admits nothing. Its caller gets an error, not a
// refusal without a reason (a 429 that no bucket made), and a Failover
// decides by its fail mode instead.
func TestRedisLateBatchIsNotARefusal(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		skewed := &skewedScripter{UniversalClient: f.rdb, ahead: 5 * time.Second}
		s := NewRedisStore(skewed, RedisOptions{Timeout: time.Second}) // + ClockSkew: the skew's 5 s are past it
		b := Bucket{Key: f.key("late-batch"), Limit: slow}
		a, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 1})
		if err == nil {
			t.Fatalf("a late batch was answered allowed=%v refusal=%d %+v; want an error", a.Allowed, a.Refusal, a.Result)
		}
		if st := f.state(b.Key); st.found || len(st.open) != 0 {
			t.Fatalf("a late batch changed the bucket: %+v, %d open", st.b, len(st.open))
		}
		fo := &Failover{Primary: s, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Timeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		a, err = fo.Admit(context.Background(), Request{Bucket: b, Cost: 1})
		if err != nil || !a.Allowed || !fo.Health().Degraded {
			t.Fatalf("behind a failover (local): allowed=%v refusal=%d err=%v degraded=%v; want admitted by the local bucket",
				a.Allowed, a.Refusal, err, fo.Health().Degraded)
		}
		a.Ticket.Release()
	})
}

// queued waits until key's lane holds n operations waiting for the call on
// its way, failing the test after 5 s.
func queued(t *testing.T, s *RedisStore, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		if l := s.lanes[key]; l != nil {
			got = len(l.queue)
		}
		s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations queued for %s, want %d", got, key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisBatchKeepsEachRequestsInFlightCap: two requests of one caller
// that wait for the same call, one capped at 2 requests open and one at
// 10, go to Redis each with its own cap: with 2 open, the first is refused
// by the cap whatever the second allows.
func TestRedisBatchKeepsEachRequestsInFlightCap(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseRequests: -1})
		b := Bucket{Key: f.key("shapes"), Limit: slow}
		held := mustAdmit(t, s, Request{Bucket: b, Cost: 1, MaxInFlight: 10})
		gate := make(chan struct{})
		g.gate.Store(&gate)
		blocker := make(chan Admission, 1)
		go func() { blocker <- mustAdmit(t, s, Request{Bucket: b, Cost: 1, MaxInFlight: 10}) }()
		<-g.sent // the blocker's call is on its way: the next requests wait for it
		g.gate.Store(nil)
		tight, loose := make(chan Admission, 1), make(chan Admission, 1)
		go func() { tight <- mustAdmit(t, s, Request{Bucket: b, Cost: 1, MaxInFlight: 2}) }()
		queued(t, s, b.Key, 1)
		go func() { loose <- mustAdmit(t, s, Request{Bucket: b, Cost: 1, MaxInFlight: 10}) }()
		queued(t, s, b.Key, 2)
		close(gate)
		bl, ti, lo := <-blocker, <-tight, <-loose
		if !bl.Allowed || ti.Allowed || ti.Refusal != RefusedInFlight || !lo.Allowed {
			t.Errorf("with 2 open: the request capped at 2 allowed=%v refusal=%d, the one capped at 10 allowed=%v (the blocker %v); want refused by the cap, admitted",
				ti.Allowed, ti.Refusal, lo.Allowed, bl.Allowed)
		}
		for _, a := range []Admission{held, bl, ti, lo} {
			a.Ticket.Release()
		}
		flushWithin(t, s)
	})
}

// A void of a request that is open (its batch reached Redis, its answer
// was lost) also leaves a tombstone until the voided batch's deadline: a
// copy of that batch arriving after the void (a resend) admits nothing.
func TestScriptVoidOfAnOpenRequestTurnsAwayALateCopy(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("void-open")
		sh := shape{rate: micro, capacity: 10 * micro, max: 4, ttlMS: 60000}
		keep := float64(time.Now().Add(time.Minute).UnixMilli())
		admit := op{kind: opAdmit, id: "a", amount: 4 * micro}
		got := f.run(key, sh, []op{admit, {kind: opVoid, id: "a", amount: keep}})
		if got[0].status != stAdmitted || got[1].status != stAdmitted {
			t.Fatalf("admit and void: %+v", got)
		}
		if got := f.run(key, sh, []op{admit}); got[0].status != stLate {
			t.Fatalf("a copy of the voided admit after its void: %+v, want late (turned away)", got)
		}
	})
}

// TestScriptReplaysSettlementsAtTheirMoments: a finish carrying a replay
// (a lease's settlements made in process) applies each at the moment it
// happened, with the refill in between — so a bucket at its capacity
// loses no refill to settlements that reached Redis late — and a repeated
// finish replays nothing. The twin, run at the clock the script stored,
// agrees to the micro-token.
func TestScriptReplaysSettlementsAtTheirMoments(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		key := f.key("replay")
		sh := shape{rate: 10 * micro, capacity: 10 * micro, floor: 8 * micro, max: 3, ttlMS: 60_000}
		if got := f.run(key, sh, []op{{kind: opAdmit, id: "lease", amount: micro}}); got[0].status != stAdmitted {
			t.Fatalf("the lease's admit: %+v", got)
		}
		twin := f.state(key)
		time.Sleep(500 * time.Millisecond)
		// 5 spent 400 ms ago (the bucket was back at 10 by then), 5 just
		// now, and the lease's own token handed back: 10 → 5 → 9 → 4 → 5.
		// Spent at once now, the bucket would hold 10 - 10 + 1 = 1.
		back := op{kind: opFinish, id: "lease", amount: -micro,
			replay: []replayed{{d: 5 * micro, agoUS: 400_000}, {d: 5 * micro, agoUS: 0}}}
		got := f.run(key, sh, []op{back})
		stored := f.state(key)
		want := applyBatch(&twin, nil, sh, clock{sec: stored.b.sec, usec: stored.b.usec}, []op{back})
		if got[0].status != stAdmitted || got[0].tokens < 5*micro-10 || got[0].tokens > 5*micro || got[0] != want[0] || twin.b != stored.b {
			t.Fatalf("give-back with a replay: Redis %+v (stored %+v), twin %+v (%+v); want 5 tokens", got[0], stored.b, want[0], twin.b)
		}
		if again := f.run(key, sh, []op{back}); again[0].status != stRefused || again[0].tokens < got[0].tokens {
			t.Fatalf("the same give-back again: %+v, want nothing replayed (not open, %v tokens or more)", again[0], got[0].tokens)
		}
	})
}
