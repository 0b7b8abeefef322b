package toll

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/throttle"
)

// callCounter is a go-redis hook that counts what a client sends to
// Redis: every command, and among the calls of admit.lua those that carry
// an admission (the calls a client waits for; a call of finishes alone is
// sent after the answer).
type callCounter struct {
	commands, scripts, admitting atomic.Int64
	mu                           sync.Mutex
	others                       []string // the commands that were not scripts
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// An EVALSHA that found no script (another package's test flushed
		// them) is retried as EVAL: one call, counted once.
		if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			c.count(cmd)
		}
		return err
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *callCounter) count(cmd redis.Cmder) {
	c.commands.Add(1)
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		c.mu.Lock()
		c.others = append(c.others, fmt.Sprint(cmd.Args()...))
		c.mu.Unlock()
		return
	}
	c.scripts.Add(1)
	// EVALSHA sha numkeys KEYS… ARGV: 8 arguments of the batch's shape,
	// then kind, id and amount per operation (see admit.lua).
	args := cmd.Args()
	if len(args) < 3 {
		return
	}
	nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
	for i := 3 + nkeys + 8; i < len(args); i += 3 {
		if k := fmt.Sprint(args[i]); k == "A" || k == "S" {
			c.admitting.Add(1)
			return
		}
	}
}

func (c *callCounter) reset() { c.commands.Store(0); c.scripts.Store(0); c.admitting.Store(0) }

// countedToll is redisTollOn behind a Failover (as the server runs it) on
// rdb, whose commands the returned counter counts. flush sends every
// settlement still on its way.
func countedToll(t *testing.T, rdb redis.UniversalClient) (toll *Toll, c *callCounter, flush func()) {
	t.Helper()
	return countedTollWith(t, rdb, nil)
}

// countedTollWith is countedToll over a RedisStore made with opts (nil: the
// one redisTollOn makes).
func countedTollWith(t *testing.T, rdb redis.UniversalClient, opts *throttle.RedisOptions) (toll *Toll, c *callCounter, flush func()) {
	t.Helper()
	c = &callCounter{}
	rdb.AddHook(c)
	toll, _ = redisTollOn(t, rdb)
	store := toll.Store.(*throttle.RedisStore)
	if opts != nil {
		store = throttle.NewRedisStore(rdb, *opts)
	}
	// The Failover's own bound (100 ms by default) would undo the store's
	// generous timeout: on a loaded machine a request that waits for the
	// batch before its own would fail over, a 503, as if Redis had failed.
	// It may take the store's two calls.
	toll.Store = &throttle.Failover{Primary: store, Mode: throttle.FailClosed, Timeout: 2 * redisTimeout, Logger: discard()}
	return toll, c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := store.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// serveTile is a tile route through toll and Finish that answers 200 to
// what toll admits; the request ends (and is settled) when it returns.
func serveTile(toll *Toll) http.Handler {
	return Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if toll.AdmitTile(w, r, tileDemand(14, "places")) {
			pgcall.AddTo(r.Context(), 0) // as the tile's query records its time (under the settle floor)
			w.WriteHeader(http.StatusOK)
		}
	}))
}

func tileRequest(key, addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/14/0/0.mvt", nil)
	r.RemoteAddr = net.JoinHostPort(addr, "5555")
	if key != "" {
		r.Header.Set("X-API-Key", key)
	}
	return r
}

// A request admitted with the default tiers' shape — an in-flight cap
// (the pro tier's 64, the anonymous tier's 8), and for an anonymous IPv6
// caller its /48's aggregate bucket — costs at most one admit.lua call on the client's
// path, counted on the wire over 1,024 admitted requests: 16 clients at
// once (a map asks for its tiles in parallel), and one client that never
// overlaps its requests. The settlement rides on a later call. The budgets
// are large enough that nothing is refused; what is counted is the path
// of an admitted request. Each client's first request loads the script on
// its Redis node (EVALSHA, then EVAL once), as a running server has.
func TestOneScriptCallPerAdmittedRequest(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, calls, flush := countedToll(t, rdb)
		big := throttle.Limit{Rate: 1e6, Capacity: 1e9}
		toll.Tiers["bulk"] = Tier{Name: "bulk", Limit: big, MaxInFlight: 64}
		toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: big, MaxInFlight: 8}
		toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: big}
		keys := toll.Keys.(fakeKeys)
		keys["bulk"] = apikeys.Key{ID: 60, Name: "bulk", Tier: "bulk"}
		// A key that spends faster than its bucket refills: its requests
		// are admitted on leases, in process. Its bucket refills one
		// request's price in 100 s, so that it spends faster however slow
		// the machine is: at 1 token/s a tile of 0.01 token refilled in
		// 10 ms, and a loaded machine serving slower than that made it a
		// caller that keeps its bucket at the brim, which takes no lease.
		p := toll.TilePrice(tileDemand(14, "places"))
		toll.Tiers["steady"] = Tier{Name: "steady", Limit: throttle.Limit{Rate: p / 100, Capacity: 1000}, MaxInFlight: 64}
		keys["steady"] = apikeys.Key{ID: 61, Name: "steady", Tier: "steady"}
		h := serveTile(toll)
		for _, c := range []struct {
			name, key, addr string
			clients, each   int
			most            float64 // calls carrying admits per request
		}{
			{"16 clients of a key", "bulk", "192.0.2.8", 16, 64, 1},
			{"1 client of a key", "bulk", "192.0.2.9", 1, 1024, 1},
			{"8 anonymous IPv6 clients", "", "2001:db8:1:2::7", 8, 128, 1},
			{"1 client of a key spending faster than its refill", "steady", "192.0.2.10", 1, 1024, 0.25},
		} {
			t.Run(c.name, func(t *testing.T) {
				serve := func() int {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, tileRequest(c.key, c.addr))
					return w.Code
				}
				if code := serve(); code != http.StatusOK { // the script loaded
					t.Fatalf("first request: %d", code)
				}
				flush()
				calls.reset()
				var ok atomic.Int64
				var wg sync.WaitGroup
				for range c.clients {
					wg.Go(func() {
						for range c.each {
							if code := serve(); code != http.StatusOK {
								t.Errorf("status %d", code)
								return
							}
							ok.Add(1)
						}
					})
				}
				wg.Wait()
				onPath, scripts := calls.admitting.Load(), calls.scripts.Load()
				flush()
				n := ok.Load()
				if n != int64(c.clients*c.each) {
					t.Fatalf("%d of %d admitted", n, c.clients*c.each)
				}
				if float64(onPath) > c.most*float64(n) || calls.commands.Load() != calls.scripts.Load() {
					t.Fatalf("%d requests: %d calls carrying admits (want ≤ %v per request), %d commands in all, others %q",
						n, onPath, c.most, calls.commands.Load(), calls.others)
				}
				t.Logf("%d admitted requests: %d calls on their path (%.3f per request), %d script calls before the last flush, %d after",
					n, onPath, float64(onPath)/float64(n), scripts, calls.scripts.Load())
			})
		}
	})
}

// A settlement rides on its caller's next call to Redis: with FinishDelay
// longer than the test, every call sent before the last flush carries an
// admission, however many requests settled meanwhile (1,024 of one
// client of a key, the price of each charged after its request). A
// settlement sent on a call of its own would double a caller's calls.
func TestSettlementsRideOnLaterCalls(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		r := serveOneClient(t, rdb, throttle.RedisOptions{Timeout: redisTimeout, FinishDelay: time.Hour}, 63, "192.0.2.12")
		if r.onPath == 0 || r.scripts != r.onPath {
			t.Fatalf("%d requests: %d script calls, %d of them carrying admits: want every call to carry one", oneClientRequests, r.scripts, r.onPath)
		}
		if r.flushed > 1 {
			t.Errorf("the last flush sent %d calls, want 1", r.flushed)
		}
	})
}

// A key refused with Retry-After t is refused in process, without a
// Redis command, until t (the 429 carries the same budget headers); the
// first request after t goes to Redis once and is admitted. The bucket is
// sized on the tile's price p: 1.5 p, refilling p in 1.6 s, so the second
// request is refused until 0.8 s after the first was admitted
// (Retry-After: 1). A loaded machine may pause the test past that moment
// before the second request, or while a request meant to come before it
// runs: what that request meets is then not what the test asserts, and
// the time measured since the first request tells it apart. Such an
// attempt starts again with a key of its own, once what it left on its
// way to Redis is sent, at most 5 times; every request that ends before
// the moment is held to the assertions.
func TestRefusedKeyCostsNoRedisCallUntilRetryAfter(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, calls, flush := countedToll(t, rdb)
		p := toll.TilePrice(tileDemand(14, "places"))
		toll.Tiers["free"] = Tier{Name: "free", Limit: throttle.Limit{Rate: p / 1.6, Capacity: 1.5 * p}}
		h := serveTile(toll)
		untilUnpaused(t, toll, "refused", 200, "the Retry-After it tests",
			func(key string) bool { return refusedUntilRetryAfter(t, h, calls, key) },
			flush) // what it admitted, and any lease taken, sent back now: no call of it in the next
	})
}

// untilUnpaused runs try with a new key of the free tier, named prefix
// and the attempt, until an attempt is not paused past the moment it tests
// (try reports it), at most 5 times; after runs between attempts.
func untilUnpaused(t *testing.T, toll *Toll, prefix string, id int64, moment string, try func(key string) bool, after func()) {
	t.Helper()
	keys := toll.Keys.(fakeKeys)
	for attempt := range 5 {
		key := fmt.Sprintf("%s%d", prefix, attempt)
		keys[key] = apikeys.Key{ID: id + int64(attempt), Name: key, Tier: "free"}
		if try(key) {
			return
		}
		t.Logf("attempt %d paused past %s", attempt, moment)
		if after != nil {
			after()
		}
	}
	t.Fatalf("every attempt was paused past %s", moment)
}

// refusedUntilRetryAfter runs TestRefusedKeyCostsNoRedisCallUntilRetryAfter
// with key; false when the test was paused past the moment its bucket
// holds p again, 0.8 s after its first request was admitted.
func refusedUntilRetryAfter(t *testing.T, h http.Handler, calls *callCounter, key string) bool {
	t.Helper()
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, tileRequest(key, "192.0.2.10"))
		return w
	}
	// The first request is admitted after firstAt: the bucket cannot pay
	// p again before refill, the moment a request must end before to be
	// held to the refusal.
	firstAt := time.Now()
	refill := firstAt.Add(800 * time.Millisecond)
	if w := serve(); w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	refusal := serve()
	refusedAt := time.Now()
	if !refusedAt.Before(refill) {
		return false
	}
	if refusal.Code != http.StatusTooManyRequests || refusal.Header().Get("Retry-After") != "1" {
		t.Fatalf("second request: %d, Retry-After %q; want 429, 1", refusal.Code, refusal.Header().Get("Retry-After"))
	}
	calls.reset()
	n := 0
	for time.Since(refusedAt) < 400*time.Millisecond { // well before the bucket holds p again
		w := serve()
		if !time.Now().Before(refill) {
			return false
		}
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit") == "" {
			t.Fatalf("request %d before Retry-After: %d %v", n, w.Code, w.Header())
		}
		if c := calls.commands.Load(); c != 0 {
			t.Fatalf("%d refused requests before Retry-After sent %d Redis commands, want 0", n+1, c)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no request was sent before Retry-After")
	}
	time.Sleep(time.Until(refusedAt.Add(time.Second)))
	if w := serve(); w.Code != http.StatusOK {
		t.Fatalf("the first request after Retry-After: %d %s", w.Code, w.Body)
	}
	if c := calls.admitting.Load(); c != 1 {
		t.Fatalf("the first request after Retry-After made %d calls, want 1", c)
	}
	t.Logf("%d requests refused in process before Retry-After, none sent to Redis", n)
	return true
}

// TestBudgetReadsCostOneRedisCallPerSecond: /budget and dry runs are free
// to their caller; what bounds the Redis calls they cost is that a replica
// answers them from what it learnt of the caller's bucket within the last
// second. A flood of them costs one call, an admission in between is seen
// without another, and the next second's first read asks Redis again.
func TestBudgetReadsCostOneRedisCallPerSecond(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, calls, _ := countedToll(t, rdb)
		p := toll.TilePrice(tileDemand(14, "places"))
		toll.Tiers["free"] = Tier{Name: "free", Limit: throttle.Limit{Rate: p / 1000, Capacity: 10 * p}}
		untilUnpaused(t, toll, "reader", 300, "the second it tests",
			func(key string) bool { return budgetReadsWithinASecond(t, toll, calls, key, p) }, nil)
	})
}

// budgetReadsWithinASecond runs TestBudgetReadsCostOneRedisCallPerSecond
// with key; false when it was paused past the second it tests.
func budgetReadsWithinASecond(t *testing.T, toll *Toll, calls *callCounter, key string, p float64) bool {
	t.Helper()
	remaining := func(path string, h http.Handler) float64 {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "192.0.2.11:5555"
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body struct{ Remaining float64 }
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return body.Remaining
	}
	budget := http.HandlerFunc(toll.ServeBudget)
	tile := serveTile(toll)
	calls.reset()
	start := time.Now()
	full := remaining("/budget", budget)
	for i := range 200 {
		path := "/budget"
		if i%2 == 1 {
			path = "/tiles/places/14/0/0.mvt?dry_run=1"
		}
		h := http.Handler(budget)
		if i%2 == 1 {
			h = tile
		}
		if got := remaining(path, h); math.Abs(got-full) > p/100 {
			t.Fatalf("read %d (%s): remaining %g, want %g", i, path, got, full)
		}
	}
	if time.Since(start) >= throttle.DefaultPeekReuse {
		return false
	}
	if c := calls.commands.Load(); c != 1 {
		t.Fatalf("201 budget reads and dry runs within a second sent %d Redis commands, want 1", c)
	}
	w := httptest.NewRecorder()
	tile.ServeHTTP(w, tileRequest(key, "192.0.2.11"))
	if w.Code != http.StatusOK {
		t.Fatalf("a tile: %d %s", w.Code, w.Body)
	}
	admitted := time.Now() // Redis answered its admission before this
	before := calls.commands.Load()
	if got := remaining("/budget", budget); math.Abs(got-(full-p)) > p/100 {
		t.Fatalf("/budget after a tile of %g: %g, want %g", p, got, full-p)
	}
	if time.Since(start) >= throttle.DefaultPeekReuse {
		return false
	}
	if c := calls.commands.Load() - before; c != 0 {
		t.Fatalf("/budget right after an admission sent %d Redis commands, want 0", c)
	}
	time.Sleep(time.Until(admitted.Add(throttle.DefaultPeekReuse + 100*time.Millisecond)))
	before = calls.commands.Load()
	remaining("/budget", budget)
	if c := calls.commands.Load() - before; c != 1 {
		t.Fatalf("the first /budget a second later sent %d Redis commands, want 1", c)
	}
	return true
}

// A caller whose requests never overlap and whose bucket stays full, on the
// store geotoll serve makes: its requests are admitted on leases (whose
// give-back replays them at their moments, so the bucket's cap while a
// lease is out costs it nothing), so at most a quarter of a script call
// carries an admission per request, counted on the wire over 1,024
// admitted requests.
func TestOneScriptCallPerAdmittedRequestOfAFullBucket(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		r := serveOneClient(t, rdb, throttle.RedisOptions{Timeout: redisTimeout}, 62, "192.0.2.11")
		const n = oneClientRequests
		if float64(r.onPath) > 0.25*n || r.commands != r.scripts+r.flushed {
			t.Fatalf("%d requests: %d calls carrying admits (want ≤ 0.25 per request), %d commands in all, others %q",
				n, r.onPath, r.commands, r.others)
		}
		t.Logf("%d admitted requests: %d calls on their path (%.3f per request), %d script calls in all", n, r.onPath, float64(r.onPath)/n, r.scripts+r.flushed)
	})
}

// oneClientRequests is how many requests serveOneClient sends.
const oneClientRequests = 1024

// oneClient is what Redis was sent for serveOneClient's requests: the
// script calls that carried admits and all script calls before the last
// flush, the calls that flush sent, the commands in all, and any that
// were not the script.
type oneClient struct {
	onPath, scripts, flushed, commands int64
	others                             []string
}

// serveOneClient sends oneClientRequests tile requests, one after the
// other, of a key (id) of a tier with a bucket too large to refuse, from
// addr, through a toll on a store with opts, once the script is loaded,
// and counts what Redis was sent for them.
func serveOneClient(t *testing.T, rdb redis.UniversalClient, opts throttle.RedisOptions, id int64, addr string) oneClient {
	t.Helper()
	toll, calls, flush := countedTollWith(t, rdb, &opts)
	toll.Tiers["bulk"] = Tier{Name: "bulk", Limit: throttle.Limit{Rate: 1e6, Capacity: 1e9}, MaxInFlight: 64}
	toll.Keys.(fakeKeys)["bulk"] = apikeys.Key{ID: id, Name: "bulk", Tier: "bulk"}
	h := serveTile(toll)
	serve := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, tileRequest("bulk", addr))
		return w.Code
	}
	if code := serve(); code != http.StatusOK { // the script loaded
		t.Fatalf("first request: %d", code)
	}
	flush()
	calls.reset()
	for i := range oneClientRequests {
		if code := serve(); code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, code)
		}
	}
	r := oneClient{onPath: calls.admitting.Load(), scripts: calls.scripts.Load()}
	flush()
	r.flushed = calls.scripts.Load() - r.scripts
	r.commands, r.others = calls.commands.Load(), calls.others
	return r
}
