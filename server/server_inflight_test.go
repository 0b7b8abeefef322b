package server

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
	"github.com/redis/go-redis/v9"

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
	return []byte{0x1a, 0}, nil
}

// The in-flight cap holds through the whole handler chain that New builds,
// not only when a test wraps withInFlight by hand.
func TestNewEnforcesInFlightCap(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	free := toll.Tiers["free"]
	free.MaxInFlight = 2
	toll.Tiers["free"] = free
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &blockingRenderer{release: make(chan struct{})}
	h := New(Options{Tiles: &tiles.Handler{Catalog: cat, Store: r, Gate: toll}, Logger: discard()})

	var wg sync.WaitGroup
	codes := make(chan int, 10)
	for i := 0; i < 10; i++ {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodGet, "/tiles/places/14/8802/5373.mvt", nil)
			req.Header.Set("X-API-Key", "k1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			codes <- w.Code
		})
	}
	// The refused ones answer at once; wait for them, then let the renders go.
	refused := 0
	deadline := time.After(10 * time.Second)
	for refused < 8 {
		select {
		case c := <-codes:
			if c != http.StatusTooManyRequests {
				t.Fatalf("a request beyond the cap got %d", c)
			}
			refused++
		case <-deadline:
			t.Fatalf("only %d of 8 requests beyond max_in_flight 2 were refused; %d renders running", refused, r.running.Load())
		}
	}
	close(r.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("an admitted request got %d", c)
		}
	}
	if p := r.peak.Load(); p > 2 {
		t.Fatalf("%d renders ran at once with max_in_flight 2", p)
	}
	// Slots were released: the next request passes.
	req := httptest.NewRequest(http.MethodGet, "/tiles/places/14/8802/5373.mvt", nil)
	req.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	r.release = make(chan struct{})
	close(r.release)
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("after the others finished: %d (slots leaked?)", w.Code)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Shadow mode waives only the caller's own bucket. Four shadow requests
// with max_in_flight 1 whose own bucket cannot pay: one runs, three get
// 429; and shadow-admitted requests spend the global database budget.
func TestShadowKeepsInFlightCapAndGlobalBudget(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, _ := redisTollOn(t, rdb)
		shadow := toll.Tiers["shadow"] // 70 tokens; a z2 tile costs 60
		shadow.MaxInFlight = 1
		toll.Tiers["shadow"] = shadow
		toll.Global = &throttle.Limit{Rate: 0.001, Capacity: 1000}
		cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
		if err != nil {
			t.Fatal(err)
		}
		r := &blockingRenderer{release: make(chan struct{})}
		h := New(Options{Tiles: &tiles.Handler{Catalog: cat, Store: r, Gate: toll}, Logger: discard()})
		get := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, "/tiles/places/2/1/1.mvt", nil)
			req.Header.Set("X-API-Key", "shadowy")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
		// Empty the caller's own bucket: every request below is a would-be
		// refusal that shadow mode admits.
		own := throttle.BucketKey(toll.Prefix, "shadow", "k:99")
		if res, err := toll.Store.Spend(t.Context(), own, shadow.Limit, 65); err != nil || !res.Allowed {
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
		g, err := toll.Store.Peek(t.Context(), toll.globalKey(), *toll.Global)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1000.0 - 2*60; math.Abs(g.Remaining-want) > 1 {
			t.Fatalf("global budget %.3f after two shadow-admitted requests ran, want %v", g.Remaining, want)
		}
	})
}
