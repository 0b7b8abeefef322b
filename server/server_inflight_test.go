package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
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

// testToll is a toll with one keyed tier, "free" (100 tokens, 20/s), for key
// "k1".
func testToll(store throttle.Store) *toll.Toll {
	return &toll.Toll{
		Store:  store,
		Prefix: "test",
		Tiers: map[string]toll.Tier{
			toll.AnonymousTier: {Name: toll.AnonymousTier, Limit: throttle.Limit{Rate: 10, Capacity: 80}},
			"free":             {Name: "free", Limit: throttle.Limit{Rate: 20, Capacity: 100}},
		},
		FailedAuth: throttle.Limit{Rate: 0.1, Capacity: 3},
		Keys:       fakeKeys{"k1": {ID: 1, Name: "k1", Tier: "free"}},
		Default:    throttle.DefaultWeights(),
	}
}

// fakeKeys is a fixed key set.
type fakeKeys map[string]apikeys.Key

func (f fakeKeys) Lookup(key string) (apikeys.Key, bool) { k, ok := f[key]; return k, ok }

// tileServer is New serving the layer "places" through gate, rendered by
// a blockingRenderer, with tier's max_in_flight set to maxInFlight.
func tileServer(t *testing.T, gate *toll.Toll, tier string, maxInFlight int) (http.Handler, *blockingRenderer) {
	t.Helper()
	tr := gate.Tiers[tier]
	tr.MaxInFlight = maxInFlight
	gate.Tiers[tier] = tr
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &blockingRenderer{release: make(chan struct{})}
	return New(Options{Tiles: &tiles.Handler{Catalog: cat, Store: r, Gate: gate}, Logger: discard()}), r
}

// The in-flight cap holds through the whole handler chain that New builds:
// New installs toll.Finish, which frees the slots.
func TestNewEnforcesInFlightCap(t *testing.T) {
	h, r := tileServer(t, testToll(throttle.NewMemoryStore(throttle.MemoryOptions{})), "free", 2)

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
