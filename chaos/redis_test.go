package chaos

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/throttle"
)

// redisConfig is baseConfig on one Redis with a fail mode.
func redisConfig(s *sc, r *redisServer, mode string) config {
	return baseConfig(s.env.pg).set("redis.url", r.url()).set("redis.fail_mode", mode).set("redis.replicas", 2)
}

// spend sends n sequential tile requests and returns how many were
// admitted (2xx) and the slowest; any other answer is reported.
func spend(s *sc, c *http.Client, g *geotoll, n int) (ok int, slowest time.Duration, bad []string) {
	for i := 0; i < n; i++ {
		r := get(c, g.tile("places"))
		slowest = max(slowest, r.took)
		if r.success() {
			ok++
		} else {
			bad = append(bad, r.String())
		}
	}
	return ok, slowest, bad
}

// untilRedisCharges sends a request every 100 ms (at most 40) until one is
// charged in Redis — the bucket drops below before — and returns how long
// that took and the replies (all but the last were decided without Redis).
func untilRedisCharges(c *http.Client, g *geotoll, rdb redis.Cmdable, before float64) (time.Duration, []reply) {
	start := time.Now()
	var replies []reply
	for i := 0; i < 40; i++ {
		time.Sleep(100 * time.Millisecond)
		replies = append(replies, get(c, g.tile("places")))
		if tok, err := tokens(rdb, clientKey, 1000); err == nil && tok < before-0.5 {
			return time.Since(start), replies
		}
	}
	return -1, replies
}

// readyDetail is g.readyz for the redis check's detail.
func readyDetail(g *geotoll, want func(status int, detail string) bool) (int, string, bool) {
	status, checks, ok := g.readyz(func(status int, checks map[string]string) bool { return want(status, checks["redis"]) })
	return status, checks["redis"], ok
}

// Redis killed with fail_mode local: requests go on against in-process
// buckets holding this process's share (1/replicas: 2 here) of the
// caller's budget, degraded mode shows in /readyz, metrics and one
// log line, and a restarted Redis (empty, no scripts cached) is used again
// within about a second.
func redisKilledLocal(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "local"))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)

	n, _, bad := spend(s, c, g, 20)
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("healthy: Redis bucket = capacity − admitted", n == 20 && err == nil && exact(tok, 1000-20, start),
		"%d/20 admitted %v, Redis holds %.4f", n, bad, tok)

	r.kill()
	var local []reply
	slowest := time.Duration(0)
	for i := 0; i < 30; i++ {
		rep := get(c, g.tile("places"))
		local = append(local, rep)
		slowest = max(slowest, rep.took)
	}
	served, lastRemaining := 0, -1
	for _, rep := range local {
		if rep.success() {
			served++
			lastRemaining = rep.remaining()
		}
	}
	s.check("killed: every request served (2xx), each in < 1 s", served == 30 && slowest < time.Second,
		"%d/30 2xx, slowest %v", served, slowest.Round(time.Millisecond))
	s.check("local bucket starts at this replica's share of where Redis left the caller (980 / 2 replicas), charged once per request", lastRemaining == 980/2-30,
		"X-RateLimit-Remaining %d after 30 local admits (want 460)", lastRemaining)
	status, detail, ok := readyDetail(g, func(status int, detail string) bool {
		return status == 200 && strings.HasPrefix(detail, "degraded: using local buckets")
	})
	s.check(`/readyz 200, redis "degraded: using local buckets"`, ok, "%d %q", status, clip(detail, 70))
	s.check("metric geotoll_limiter_degraded = 1", g.metric("geotoll_limiter_degraded") == 1,
		"degraded %g, fallbacks %g", g.metric("geotoll_limiter_degraded"), g.metric("geotoll_limiter_fallbacks_total"))
	s.check("one log line for the transition, not one per request", g.logCount("budget store failing: using local buckets") == 1,
		"%d line(s) for 30 requests", g.logCount("budget store failing"))

	r.start() // same port, empty, no scripts: NOSCRIPT on the first EVALSHA
	back, replies := untilRedisCharges(c, g, rdb, 1000)
	s.check("restarted: back on Redis within 1.5 s (NOSCRIPT → EVAL)", back >= 0 && back <= 1500*time.Millisecond && allSuccess(replies),
		"first Redis charge %v after the restart; %d request(s) meanwhile, all 2xx: %v", back.Round(time.Millisecond), len(replies), allSuccess(replies))
	n, _, bad = spend(s, c, g, 20)
	tok, err = tokens(rdb, clientKey, 1000)
	spent, ok := localSpendingCharged(g)
	s.check("recovered: Redis bucket = capacity − admitted since − what was spent locally, charged once", n == 20 && err == nil && ok && exact(tok, 1000-21-spent, start),
		"%d/20 admitted %v, Redis holds %.4f (want %g: 979 less %g spent locally)", n, bad, tok, 979-spent, spent)
	status, detail, ok = readyDetail(g, func(status int, detail string) bool { return status == 200 && detail == "ok" })
	s.check(`recovered: /readyz "ok", degraded 0, logged once`,
		ok && g.metric("geotoll_limiter_degraded") == 0 && g.logCount("budget store recovered") == 1,
		"%d %q, degraded %g, %d recovery line(s)", status, detail, g.metric("geotoll_limiter_degraded"), g.logCount("budget store recovered"))
}

// Redis killed with fail_mode local on 4 replicas: each process's local
// buckets hold a quarter of the capacity and refill at rate/4, so that the
// 4 together admit what the shared bucket would have. The tier refills
// fast here (20 tokens/s, 5/s locally) so that the two rates differ by
// whole requests within a second.
func redisKilledLocalRate(s *sc) {
	r := startRedis(s.t)
	cfg := redisConfig(s, r, "local").set("redis.replicas", 4).
		set("throttle.tiers.anonymous.rate", 20).set("throttle.tiers.anonymous.capacity", 20).
		set("throttle.weights.max_cost", 10) // below the capacity
	g := startGeotoll(s.t, s.env.bin, cfg)
	c := newClient(4)
	r.kill()

	drainStart := time.Now()
	n, first := untilRefused(c, g, 100)
	drained := time.Now()
	s.check("killed: the local bucket holds this replica's share of the tier's capacity (20 / 4)",
		n >= 5 && float64(n) <= 5+5*drained.Sub(drainStart).Seconds()+1 && first.status == 429,
		"%d admitted, then %s", n, clip(first.String(), 50))
	s.check("X-RateLimit-Reset of the drained local bucket: 5 tokens at 20/4 per s = 1 s", first.header.Get("X-RateLimit-Reset") == "1",
		"X-RateLimit-Reset %q (4 would be the whole capacity at the divided rate)", first.header.Get("X-RateLimit-Reset"))

	time.Sleep(time.Second)
	m, last := untilRefused(c, g, 100)
	refused := time.Now()
	// The bucket held less than 1 token when the drain was refused and
	// again when this burst was: it admitted what it earned in between, at
	// 5 tokens/s, ± 1.
	lo := 5*(refused.Sub(drained)-last.took).Seconds() - 1
	hi := 5*(refused.Sub(drained)+first.took).Seconds() + 1
	s.check("1 s later: admitted what 5 tokens/s earned (20/s would refill all 20)", float64(m) >= lo && float64(m) <= hi && last.status == 429,
		"%d admitted over %v (bounds %.1f–%.1f), then %s", m, refused.Sub(drained).Round(10*time.Millisecond), lo, hi, clip(last.String(), 40))
}

// untilRefused sends tile requests one at a time until one is not 2xx (at
// most limit) and returns how many were admitted and the refusal.
func untilRefused(c *http.Client, g *geotoll, limit int) (int, reply) {
	var rep reply
	for i := 0; i < limit; i++ {
		if rep = get(c, g.tile("places")); !rep.success() {
			return i, rep
		}
	}
	return limit, rep
}

// Redis killed with fail_mode closed (503) or open (admit, uncharged).
func redisKilledStrict(s *sc, mode string) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, mode))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	n, _, _ := spend(s, c, g, 10)

	r.kill()
	var replies []reply
	slowest := time.Duration(0)
	for i := 0; i < 20; i++ {
		rep := get(c, g.tile("places"))
		replies = append(replies, rep)
		slowest = max(slowest, rep.took)
	}
	good := 0
	for _, rep := range replies {
		switch mode {
		case "closed":
			if rep.status == 503 && rep.header.Get("Retry-After") != "" && rep.header.Get("Content-Type") == "application/problem+json" {
				good++
			}
		case "open":
			if rep.success() && rep.remaining() == 1000 {
				good++
			}
		}
	}
	if mode == "closed" {
		s.check("killed: 503 + Retry-After problem, each in < 1 s", good == 20 && slowest < time.Second,
			"%d/20 such answers (e.g. %s), slowest %v", good, clip(replies[0].String(), 60), slowest.Round(time.Millisecond))
		status, detail, ok := readyDetail(g, func(status int, detail string) bool {
			return status == 503 && strings.HasPrefix(detail, "down: refusing with 503")
		})
		s.check("/readyz 503, redis down", ok, "%d %q", status, clip(detail, 70))
	} else {
		s.check("killed: admitted (2xx), uncharged (remaining = capacity)", good == 20 && slowest < time.Second,
			"%d/20 such answers, slowest %v", good, slowest.Round(time.Millisecond))
		status, detail, ok := readyDetail(g, func(status int, detail string) bool {
			return status == 200 && strings.HasPrefix(detail, "degraded: admitting without charging")
		})
		s.check(`/readyz 200, redis "degraded: admitting without charging"`, ok, "%d %q", status, clip(detail, 70))
	}
	r.start()
	back, replies := untilRedisCharges(c, g, rdb, 1000)
	m, _, _ := spend(s, c, g, 10)
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("restarted: back on Redis within 1.5 s; bucket = capacity − admitted since", back >= 0 && back <= 1500*time.Millisecond &&
		err == nil && n == 10 && m == 10 && exact(tok, 1000-11, start),
		"first Redis charge %v after the restart (%d requests meanwhile), then Redis holds %.4f (want 989)", back.Round(time.Millisecond), len(replies), tok)
}

func allSuccess(rs []reply) bool {
	for _, r := range rs {
		if !r.success() {
			return false
		}
	}
	return true
}

// Redis paused: each budget call waits at most the 50 ms timeout, and only
// one call per probe interval does; the calls left in the paused Redis's
// socket buffers admit nothing when it resumes — they are past their
// deadline, and their admits were voided (their callers were charged
// locally) — so nothing is charged twice: the bucket holds exactly its
// capacity less what Redis admitted.
func redisPaused(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "local"))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	n, _, _ := spend(s, c, g, 10)

	r.pause()
	pausedAt := time.Now()
	var replies []reply
	slowest := time.Duration(0)
	for i := 0; i < 40; i++ {
		rep := get(c, g.tile("places"))
		replies = append(replies, rep)
		slowest = max(slowest, rep.took)
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(pausedAt)
	storeErrors := g.metric("geotoll_limiter_store_errors_total")
	bound := elapsed.Seconds()/0.5 + 2
	s.check("paused: all served, each < 1 s; ≤ 1 Redis timeout per 500 ms probe interval",
		allSuccess(replies) && slowest < time.Second && storeErrors <= bound,
		"%d requests over %v: all 2xx %v, slowest %v, %g store timeouts (bound %.0f)",
		len(replies), elapsed.Round(100*time.Millisecond), allSuccess(replies), slowest.Round(time.Millisecond), storeErrors, bound)
	status, detail, ok := readyDetail(g, func(status int, detail string) bool {
		return status == 200 && strings.HasPrefix(detail, "degraded: using local buckets")
	})
	s.check(`/readyz 200 "degraded: using local buckets" while paused`, ok, "%d %q", status, clip(detail, 70))

	// Quiet for longer than timeout + max_clock_skew: every spend still in
	// Redis's buffers is past its deadline when Redis resumes.
	time.Sleep(1500 * time.Millisecond)
	r.resume()
	back, _ := untilRedisCharges(c, g, rdb, 1000-10)
	m, _, _ := spend(s, c, g, 10)
	tok, err := tokens(rdb, clientKey, 1000)
	spent, ok := localSpendingCharged(g)
	s.check("resumed: back on Redis; stranded calls charged nothing, bucket = capacity − Redis-admitted − what was spent locally, charged once",
		back >= 0 && err == nil && n == 10 && m == 10 && ok && exact(tok, 1000-21-spent, start),
		"back after %v; Redis holds %.4f (want %g: 979 less %g spent locally)", back.Round(time.Millisecond), tok, 979-spent, spent)
	s.check("one degraded and one recovered log line", g.logCount("budget store failing") == 1 && g.logCount("budget store recovered") == 1,
		"%d and %d", g.logCount("budget store failing"), g.logCount("budget store recovered"))
}

// SCRIPT FLUSH between requests: NOSCRIPT is handled (EVAL), no request
// fails over and nothing is charged twice.
func redisScriptFlush(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	// 20 requests at once: a cap above them (this is not the cap's test).
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "closed").set("throttle.tiers.anonymous.max_in_flight", 64))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(8)
	var mu sync.Mutex
	admitted := 0
	for round := 0; round < 3; round++ {
		if round > 0 {
			if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
				s.t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Go(func() {
				if get(c, g.tile("places")).success() {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	tok, err := tokens(rdb, clientKey, 1000)
	errs := g.metric("geotoll_limiter_store_errors_total")
	s.check("2 × SCRIPT FLUSH under 60 concurrent requests: all 2xx, no store error", admitted == 60 && errs == 0,
		"%d/60 2xx, %g store errors", admitted, errs)
	s.check("bucket = capacity − admitted (no double charge)", err == nil && exact(tok, 1000-60, start),
		"Redis holds %.4f (want 940)", tok)
}

// Redis out of memory (maxmemory reached, noeviction): writes fail with
// OOM, so budgets fall back to local buckets and Redis is left as it was.
func redisOOM(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "local"))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	n, _, _ := spend(s, c, g, 10)
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		s.t.Fatal(err)
	}
	m, slowest, bad := spend(s, c, g, 10)
	tok, _ := tokens(rdb, clientKey, 1000)
	status, detail, ok := readyDetail(g, func(status int, detail string) bool {
		return status == 200 && strings.HasPrefix(detail, "degraded: using local buckets") && strings.Contains(detail, "OOM")
	})
	s.check("OOM: served from local buckets; Redis bucket untouched", m == 10 && exact(tok, 1000-10, start) && n == 10,
		"%d/10 2xx %v (slowest %v), Redis holds %.4f (want 990)", m, bad, slowest.Round(time.Millisecond), tok)
	s.check(`/readyz 200 "degraded: using local buckets (… OOM …)"`, ok, "%d %q", status, clip(detail[strings.Index(detail+"OOM", "OOM"):], 60))
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		s.t.Fatal(err)
	}
	back, _ := untilRedisCharges(c, g, rdb, 1000-10)
	k, _, _ := spend(s, c, g, 10)
	tok, err := tokens(rdb, clientKey, 1000)
	spent, ok := localSpendingCharged(g)
	s.check("memory freed: back on Redis within 1.5 s; bucket exact, what was spent locally charged once", back >= 0 && back <= 1500*time.Millisecond &&
		err == nil && k == 10 && ok && exact(tok, 1000-21-spent, start),
		"back after %v; Redis holds %.4f (want %g: 979 less %g spent locally)", back.Round(time.Millisecond), tok, 979-spent, spent)
}

// Redis out of memory with fail_mode closed: Redis answers PING but
// refuses every bucket write, so the instance is not ready until memory is
// freed — /readyz 503 at every look, not only until the next PING passed
// (the background check's PING ended degraded mode and said ready, while
// every priced request was refused) — and ready again once it is.
func redisOOMClosed(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, redisConfig(s, r, "closed"))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	n, _, _ := spend(s, c, g, 5)
	before, _ := tokens(rdb, clientKey, 1000) // 995, or less by a lease still out (given back once memory is freed)
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		s.t.Fatal(err)
	}
	downNow := func(status int, checks map[string]string) bool {
		return status == 503 && strings.HasPrefix(checks["redis"], "down: refusing with 503") && strings.Contains(checks["redis"], "OOM")
	}
	refused, looks, down := 0, 0, 0
	_, _, first := g.readyz(func(status int, checks map[string]string) bool {
		if rep := get(c, g.tile("places")); rep.status == 503 {
			refused++
		}
		return downNow(status, checks)
	})
	for end := time.Now().Add(2 * time.Second); first && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if rep := get(c, g.tile("places")); rep.status == 503 {
			refused++
		}
		looks++
		if status, checks, _ := g.readyz(func(int, map[string]string) bool { return true }); downNow(status, checks) { // one look
			down++
		}
	}
	tok, _ := tokens(rdb, clientKey, 1000)
	s.check(`OOM, closed: /readyz 503 "down: refusing with 503 (… OOM …)" at every look for 2 s; Redis bucket untouched`,
		n == 5 && first && looks >= 10 && down == looks && exact(tok, before, start),
		"down at first within 5 s: %v; then down at %d of %d looks; %d requests refused; Redis holds %.4f (want %.4f, as before)", first, down, looks, refused, tok, before)
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		s.t.Fatal(err)
	}
	status, detail, ok := readyDetail(g, func(status int, detail string) bool { return status == 200 && detail == "ok" })
	m, _, _ := spend(s, c, g, 5)
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("memory freed: /readyz 200 and charged on Redis again", ok && m == 5 && err == nil && exact(tok, 1000-10, start),
		"%d %q; %d/5 2xx; Redis holds %.4f (want 990)", status, clip(detail, 60), m, tok)
}

// A client that hangs up while Redis hangs is denied: its request is not
// failed over to a local bucket (nor counted as a Redis failure), and the
// spend it left in Redis's buffer is not charged when Redis resumes.
func redisHungCancelled(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	// A long Redis timeout so the client can hang up while the toll waits;
	// no readiness round after the first (start-up's) within the test, so
	// that the background check, which degrades an instance whose Redis it
	// finds down, leaves these requests to Redis.
	cfg := redisConfig(s, r, "local").set("redis.timeout", "2s").set("redis.max_clock_skew", "200ms").
		set("http.ready_interval", "1m")
	g := startGeotoll(s.t, s.env.bin, cfg)
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	n, _, _ := spend(s, c, g, 5)
	// Once the server's lease is back, each request asks Redis.
	if _, err := tokens(rdb, clientKey, 1000); err != nil {
		s.t.Fatal(err)
	}

	r.pause()
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		do(ctx, c, http.MethodGet, g.tile("places"), nil, nil)
		cancel()
	}
	// The server sees each hang-up at once; give the log a moment.
	ok := waitFor(2*time.Second, func() bool {
		return g.metric("geotoll_priced_requests_total", `outcome="limiter-failure"`) == 3
	})
	failures := g.metric("geotoll_priced_requests_total", `outcome="limiter-failure"`)
	fallbacks := g.metric("geotoll_limiter_fallbacks_total")
	storeErrs := g.metric("geotoll_limiter_store_errors_total")
	s.check("3 clients hang up during a Redis hang: denied, not failed over", ok && fallbacks == 0 && storeErrs == 0,
		"limiter-failure %g, fallback decisions %g, store errors %g", failures, fallbacks, storeErrs)
	time.Sleep(2500 * time.Millisecond) // past timeout + max_clock_skew of the last one
	r.resume()
	m, _, _ := spend(s, c, g, 5)
	tok, err := tokens(rdb, clientKey, 1000)
	s.check("their stranded spends are not charged when Redis resumes", err == nil && n == 5 && m == 5 && exact(tok, 1000-10, start),
		"Redis holds %.4f (want 990)", tok)
}

// Redis Cluster: the client bucket and the global budget (different hash
// tags, so different slots) are spent in one pipelined round trip that
// go-redis splits per master; refusals refund across masters; nothing hits
// CROSSSLOT. fail_mode closed, so any cluster error would show as a 503.
func redisCluster(s *sc) {
	start := time.Now()
	cl := startCluster(s.t)
	cfg := baseConfig(s.env.pg).
		set("redis.addrs", cl.addrs).set("redis.cluster", true).set("redis.fail_mode", "closed").
		set("throttle.tiers.anonymous.max_in_flight", 64).
		set("throttle.global", map[string]any{"rate": rate, "capacity": 50}).
		set("throttle.weights.max_cost", 10) // below the global capacity
	g := startGeotoll(s.t, s.env.bin, cfg)
	rdb := cl.client()
	defer rdb.Close()
	ctx := context.Background()
	globalKey := throttle.BucketKey("chaos", "global", "database")
	masterOf := func(key string) string {
		c, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			return "?"
		}
		return c.Options().Addr
	}

	c := newClient(10)
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := 0; i < 100; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rep := get(c, g.tile("places"))
			k := "other: " + clip(rep.String(), 80)
			switch {
			case rep.success():
				k = "2xx"
			case rep.status == 503 && strings.Contains(string(rep.body), `"global"`):
				k = "503 global"
			}
			mu.Lock()
			counts[k]++
			mu.Unlock()
		})
	}
	wg.Wait()
	s.check("100 requests, global budget 50: 50 × 2xx, 50 × 503 global, nothing else", counts["2xx"] == 50 && counts["503 global"] == 50 && len(counts) == 2,
		"%v", counts)
	ct, err1 := tokens(rdb, clientKey, 1000)
	gt, err2 := tokens(rdb, globalKey, 50)
	s.check("client bucket = capacity − admitted (refunds across masters); global = 0",
		err1 == nil && err2 == nil && exact(ct, 1000-50, start) && exact(gt, 0, start),
		"client %.4f on %s, global %.4f on %s", ct, masterOf(clientKey), gt, masterOf(globalKey))
	// Releases are sent just after the responses: give them a moment.
	var held int64
	var err error
	waitFor(2*time.Second, func() bool {
		held, err = rdb.HLen(ctx, throttle.OpenKey(clientKey)).Result()
		return err == nil && held == 0
	})
	status, checks, ok := g.readyz(func(status int, checks map[string]string) bool { return status == 200 && checks["redis"] == "ok" })
	s.check("every in-flight slot released; /readyz ok (all masters)", err == nil && held == 0 && ok,
		"%d slot(s) held, readyz %d %q", held, status, checks["redis"])
}

// Redis Sentinel: geotoll finds the master through a Sentinel. When the
// master dies, budgets fall back to local buckets until the Sentinel has
// promoted the replica; then the buckets replicated to it are charged
// again: the budget survives the failover.
func redisSentinel(s *sc) {
	start := time.Now()
	master := startRedis(s.t)
	replica := startRedis(s.t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	sentinel := startSentinel(s.t, master)
	ctx := context.Background()
	sen := redis.NewSentinelClient(&redis.Options{Addr: sentinel.addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	defer sen.Close()
	mc, rc := master.client(), replica.client()
	defer mc.Close()
	defer rc.Close()
	synced := waitFor(20*time.Second, func() bool {
		reps, err := sen.Replicas(ctx, "geotoll").Result()
		info, _ := rc.Info(ctx, "replication").Result()
		return err == nil && len(reps) == 1 && strings.Contains(info, "master_link_status:up")
	})
	if !synced {
		s.t.Fatal("the replica never synced, or the Sentinel never saw it")
	}
	cfg := baseConfig(s.env.pg).set("redis.addrs", []string{sentinel.addr()}).set("redis.master_name", "geotoll").
		set("redis.fail_mode", "local").set("redis.replicas", 2)
	g := startGeotoll(s.t, s.env.bin, cfg)
	c := newClient(4)
	n, _, _ := spend(s, c, g, 10)
	mc.Wait(ctx, 1, 2*time.Second) // replicated before the master dies
	onMaster, err1 := tokens(mc, clientKey, 1000)
	onReplica, err2 := tokens(rc, clientKey, 1000)
	s.check("via Sentinel: master bucket = capacity − admitted, replicated", n == 10 && err1 == nil && err2 == nil &&
		exact(onMaster, 990, start) && onReplica == onMaster,
		"master %.4f, replica %.4f (want 990)", onMaster, onReplica)

	master.kill()
	killed := time.Now()
	var promoted, charged time.Duration = -1, -1
	var replies []reply
	for i := 0; i < 150 && charged < 0; i++ { // at most 15 s
		time.Sleep(100 * time.Millisecond)
		replies = append(replies, get(c, g.tile("places")))
		if addr, err := sen.GetMasterAddrByName(ctx, "geotoll").Result(); promoted < 0 && err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.port) {
			promoted = time.Since(killed)
		}
		if tok, err := tokens(rc, clientKey, 1000); err == nil && tok < onReplica-0.5 {
			charged = time.Since(killed)
		}
	}
	s.check("master killed: served meanwhile; the promoted replica is charged again",
		allSuccess(replies) && promoted >= 0 && charged >= 0,
		"replica promoted %v after the kill, charged %v after; %d requests meanwhile, all 2xx: %v",
		promoted.Round(100*time.Millisecond), charged.Round(100*time.Millisecond), len(replies), allSuccess(replies))
	m, _, _ := spend(s, c, g, 10)
	tok, err := tokens(rc, clientKey, 1000)
	spent, ok := localSpendingCharged(g)
	s.check("the budget survived the failover: new master = 990 − admitted since − what was spent locally, charged once", err == nil && m == 10 && ok && exact(tok, 990-11-spent, start),
		"new master holds %.4f (want %g: 979 less %g spent locally)", tok, 979-spent, spent)
}

// Two geotoll processes share one Redis: 500 concurrent spends split
// across both never admit more than capacity + refill × elapsed.
func twoReplicas(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	cfg := func() config {
		// A cap above the 50 connections: the budget refuses, not the cap.
		return redisConfig(s, r, "closed").set("throttle.tiers.anonymous.capacity", 100).set("throttle.tiers.anonymous.max_in_flight", 64)
	}
	gs := []*geotoll{startGeotoll(s.t, s.env.bin, cfg()), startGeotoll(s.t, s.env.bin, cfg())}
	rdb := r.client()
	defer rdb.Close()
	c := newClient(50)
	var mu sync.Mutex
	admitted, refused := [2]int{}, 0
	var others []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50)
	spendStart := time.Now()
	for i := 0; i < 500; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rep := get(c, gs[i%2].base+"/tiles/places/14/8802/5373.mvt")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case rep.success():
				admitted[i%2]++
			case rep.status == 429:
				refused++
			default:
				others = append(others, clip(rep.String(), 60))
			}
		})
	}
	wg.Wait()
	total := admitted[0] + admitted[1]
	bound := 100 + rate*time.Since(spendStart).Seconds()
	s.check("500 concurrent spends over 2 processes: admitted ≤ capacity + refill × elapsed",
		float64(total) <= bound && total == 100 && refused == 400 && len(others) == 0,
		"admitted %d (%d + %d; bound %.3f), 429 × %d, other %v", total, admitted[0], admitted[1], bound, refused, others)
	tok, err := tokens(rdb, clientKey, 100)
	s.check("Redis bucket = capacity − admitted", err == nil && exact(tok, 100-float64(total), start),
		"Redis holds %.4f (want %d)", tok, 100-total)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// Redis answering late (frozen for 60 ms to 0.5 s at a time) under the
// default 50 ms timeout and in-flight caps: the calls that time out are
// decided by the fail mode (local buckets), and those Redis ran anyway are
// voided once their deadline has passed — so every admitted request is
// charged exactly once (in Redis, or locally) and no slot is left held.
func redisSlowReplies(s *sc) {
	start := time.Now()
	r := startRedis(s.t)
	g := startGeotoll(s.t, s.env.bin, baseConfig(s.env.pg).set("redis.url", r.url()))
	rdb := r.client()
	defer rdb.Close()
	c := newClient(4)
	stop := make(chan struct{})
	var freezes sync.WaitGroup
	freezes.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			r.pause()
			time.Sleep([]time.Duration{60, 120, 300, 500}[i%4] * time.Millisecond)
			r.resume()
		}
	})
	var mu sync.Mutex
	admitted, other := 0, map[string]int{}
	var wg sync.WaitGroup
	for range 4 { // 4 × 150 requests, 20 ms apart: about 3 s over the freezes
		wg.Go(func() {
			for range 150 {
				rep := get(c, g.tile("places"))
				mu.Lock()
				if rep.success() {
					admitted++
				} else {
					other[clip(rep.String(), 40)]++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(stop)
	freezes.Wait()
	local := g.metric("geotoll_limiter_fallbacks_total")
	// What was spent locally is charged to Redis once Redis admits the
	// caller again; the last outage's may not be, if no request followed it.
	carried := g.metric("geotoll_limiter_local_spending_carried_tokens_total")
	// The voids of unanswered batches go once their deadline (50 ms + the
	// 1 s clock skew allowance) has passed; releases right after.
	ctx := context.Background()
	settledOK := waitFor(10*time.Second, func() bool {
		tok, err := tokens(rdb, clientKey, 1000)
		n, _ := rdb.HLen(ctx, throttle.OpenKey(clientKey)).Result()
		return err == nil && n == 0 && exact(tok, 1000-(float64(admitted)-local)-carried, start)
	})
	tok, _ := tokens(rdb, clientKey, 1000)
	open, _ := rdb.HLen(ctx, throttle.OpenKey(clientKey)).Result()
	double := int(math.Round(1000-tok-carried)) - (admitted - int(local))
	s.check("late replies, default 50 ms timeout: every request served", len(other) == 0 && admitted > 0,
		"%d × 2xx (%g decided locally), other %v", admitted, local, other)
	s.check("0 double charges: Redis charged = admitted − decided locally + what was spent locally, charged once after", settledOK && double == 0 && carried <= local,
		"Redis holds %.4f: %d charged there, %d admitted − %g local + %g of it charged after; double charges: %d",
		tok, int(math.Round(1000-tok)), admitted, local, carried, double)
	s.check("0 leaked slots: nothing open once every request has finished", open == 0,
		"%d slot(s) still held", open)
}
