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
