package toll

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"
	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// blockingRenderer holds every render until released, counting how many
// run at once.
type blockingRenderer struct {
	release chan struct{}
	running atomic.Int32
	peak    atomic.Int32
}

func (b *blockingRenderer) Tile(ctx context.Context, _ []*tiles.Layer, _ maptile.Tile) ([]byte, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	pgcall.AddTo(ctx, 0) // as the render's call records its time (under the settle floor)
	return []byte{0x1a, 0}, nil
}

// tileServer serves the layer "places" through toll and Finish, rendered by
// a blockingRenderer, with tier's max_in_flight set to maxInFlight.
func tileServer(t *testing.T, toll *Toll, tier string, maxInFlight int) (http.Handler, *blockingRenderer) {
	t.Helper()
	tr := toll.Tiers[tier]
	tr.MaxInFlight = maxInFlight
	toll.Tiers[tier] = tr
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &blockingRenderer{release: make(chan struct{})}
	router := mux.NewRouter()
	router.Handle("/tiles/{"+tiles.VarLayer+"}/{"+tiles.VarZ+"}/{"+tiles.VarX+"}/{"+tiles.VarY+"}",
		&tiles.Handler{Catalog: cat, Store: r, Gate: toll, Logger: discard()})
	return Finish(router), r
}

// Shadow mode waives only the caller's own bucket. Four shadow requests
// with max_in_flight 1 whose own bucket cannot pay: one runs, three get
// 429; and shadow-admitted requests spend the global database budget.
func TestShadowKeepsInFlightCapAndGlobalBudget(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, _ := redisTollOn(t, rdb)
		global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 0.001, Capacity: 1000}}
		toll.Global = &throttle.Global{Store: toll.Store, Bucket: global, Chunk: 1} // leases of one request: exact counts
		h, r := tileServer(t, toll, "shadow", 1)                                    // 70 tokens; a z2 tile costs 60
		shadow := toll.Tiers["shadow"]
		get := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, "/tiles/places/2/1/1.mvt", nil)
			req.Header.Set("X-API-Key", "shadowy")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
		// Empty the caller's own bucket: every request below is a would-be
		// refusal that shadow mode admits.
		own := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "shadow", "k:99"), Limit: shadow.Limit}
		if res, err := throttle.Charge(t.Context(), toll.Store, own, 65); err != nil || !res.Allowed {
			t.Fatalf("drain the own bucket: %+v %v", res, err)
		}
		codes := make(chan int, 4)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { codes <- get().Code })
		}
		deadline := time.After(10 * time.Second)
		for refused := 0; refused < 3; refused++ {
			select {
			case c := <-codes:
				if c != http.StatusTooManyRequests {
					t.Fatalf("a shadow request beyond max_in_flight 1 got %d, want 429", c)
				}
			case <-deadline:
				t.Fatalf("only %d of 3 shadow requests beyond max_in_flight 1 were refused; %d renders running", refused, r.running.Load())
			}
		}
		close(r.release)
		wg.Wait()
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("the admitted request got %d", c)
		}
		if p := r.peak.Load(); p != 1 {
			t.Fatalf("%d renders ran at once with max_in_flight 1", p)
		}
		w := get()
		if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Shadow") != "would-refuse" {
			t.Fatalf("shadow request: %d %q %s", w.Code, w.Header().Get("X-RateLimit-Shadow"), w.Body)
		}
		toll.Global.Close()                                                          // this replica's lease goes back…
		if err := toll.Store.(*throttle.RedisStore).Flush(t.Context()); err != nil { // …now
			t.Fatal(err)
		}
		g, err := toll.Store.Peek(t.Context(), global)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1000.0 - 2*60; math.Abs(g.Remaining-want) > 1 {
			t.Fatalf("global budget %.3f after two shadow-admitted requests ran, want %v", g.Remaining, want)
		}
	})
}

// pausable connects to the test Redis (or Cluster) with context deadlines
// bound to the socket, as geotoll's own client is, and returns a function
// that pauses every master for d (CLIENT PAUSE ALL).
func pausable(t *testing.T, cluster bool) (redis.UniversalClient, func(d time.Duration)) {
	t.Helper()
	var rdb redis.UniversalClient
	if cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t), ContextTimeoutEnabled: true})
	} else {
		opt, err := redis.ParseURL(testenv.RedisURL(t))
		if err != nil {
			t.Fatal(err)
		}
		opt.ContextTimeoutEnabled = true
		rdb = redis.NewClient(opt)
	}
	t.Cleanup(func() { rdb.Close() })
	pause := func(d time.Duration) {
		t.Helper()
		ms := strconv.FormatInt(d.Milliseconds(), 10)
		do := func(ctx context.Context, c *redis.Client) error { return c.Do(ctx, "CLIENT", "PAUSE", ms, "ALL").Err() }
		var err error
		if c, ok := rdb.(*redis.ClusterClient); ok {
			err = c.ForEachMaster(t.Context(), do)
		} else {
			err = do(t.Context(), rdb.(*redis.Client))
		}
		if err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
	}
	return rdb, pause
}

// One caller's Redis timeout opens the process-wide breaker; requests of
// other callers that finish meanwhile still free their slots in Redis, so
// a client at its cap is not refused with nothing in flight.
func TestSlotsReleasedWhileDegraded(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			rdb, pause := pausable(t, cluster)
			toll, _ := redisTollOn(t, rdb)
			store := throttle.NewRedisStore(rdb, throttle.RedisOptions{Timeout: 300 * time.Millisecond, RetryInterval: 100 * time.Millisecond})
			failover := &throttle.Failover{Primary: store, Mode: throttle.FailClosed, Timeout: 300 * time.Millisecond,
				ProbeInterval: 500 * time.Millisecond, Logger: discard()}
			toll.Store = failover
			h, r := tileServer(t, toll, "free", 1)
			get := func(key string) int {
				req := httptest.NewRequest(http.MethodGet, "/tiles/places/14/8802/5373.mvt", nil)
				req.Header.Set("X-API-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w.Code
			}
			slots := throttle.OpenKey(throttle.BucketKey(toll.Prefix, "free", "k:1"))
			held := func() int64 {
				n, err := rdb.HLen(t.Context(), slots).Result()
				if err != nil {
					t.Fatal(err)
				}
				return n
			}

			first := make(chan int, 1)
			go func() { first <- get("k1") }() // holds k1's only slot in Redis
			deadline := time.Now().Add(10 * time.Second)
			for held() != 1 {
				if time.Now().After(deadline) {
					t.Fatal("k1's request never held its slot")
				}
				time.Sleep(5 * time.Millisecond)
			}
			pausedAt := time.Now()
			pause(time.Second)
			if c := get("a"); c != http.StatusServiceUnavailable { // times out: the breaker opens (fail_mode closed)
				t.Fatalf("another caller's request during the pause got %d, want 503", c)
			}
			if !failover.Health().Degraded {
				t.Fatal("the timeout did not open the breaker")
			}
			time.Sleep(time.Until(pausedAt.Add(1100 * time.Millisecond))) // Redis answers again…
			if !failover.Health().Degraded {
				t.Fatal("the breaker closed without a request probing Redis")
			}
			close(r.release) // …and k1's request finishes while the breaker is still open
			if c := <-first; c != http.StatusOK {
				t.Fatalf("k1's first request got %d", c)
			}
			// Its release is sent soon after (not on the client's path),
			// whatever the breaker says.
			for deadline := time.Now().Add(2 * time.Second); held() != 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("k1's finished request still holds %d slot(s) in Redis while the breaker is open", held())
				}
			}
			time.Sleep(failover.ProbeInterval) // the next request probes Redis again
			if c := get("k1"); c != http.StatusOK {
				t.Fatalf("k1's next request got %d with nothing in flight", c)
			}
		})
	}
}
