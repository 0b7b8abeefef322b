package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// cachingServer answers every tile from its tile cache (X-Cache: HIT), at
// the base price a hit is charged, and quotes that price to a dry run.
func cachingServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dry_run") == "1" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"dry_run":true,"cost":0.01,"would_allow":true,"retry_after":0}`)
			return
		}
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("X-Request-Cost", "0.01")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// refusesCacheHit fails the test unless err says a tile came from the
// server's tile cache, and which setting turns that cache off.
func refusesCacheHit(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "X-Cache: HIT") || !strings.Contains(err.Error(), "tiles.cache.max_bytes 0") {
		t.Errorf("%s against a server that answers from its tile cache: error %v, want one naming the hit and tiles.cache.max_bytes 0", what, err)
	}
}

// The instruments that measure the server's rendering refuse an answer
// from its tile cache: fidelity priced every cached tile at the hit's
// base price and printed ρ NaN, and ceiling reported many times the
// database's ceiling, both exiting 0. Each stops at the first hit.
func TestInstrumentsRefuseCacheHits(t *testing.T) {
	t.Run("fidelity", func(t *testing.T) {
		c := &Client{BaseURL: cachingServer(t).URL}
		if err := c.check(); err != nil {
			t.Fatal(err)
		}
		o := FidelityOptions{Client: c, Timer: fixedTimer{}, Layer: &tiles.Layer{Name: "l", MaxZoom: 16}}
		_, err := measure(t.Context(), o, maptile.New(1, 1, 3))
		refusesCacheHit(t, "measure", err)
	})
	t.Run("loop", func(t *testing.T) {
		c := &Client{BaseURL: cachingServer(t).URL}
		start := time.Now()
		r, err := c.Loop(t.Context(), "l", []maptile.Tile{maptile.New(0, 0, 1), maptile.New(1, 0, 1)}, 2, 10*time.Second, false)
		refusesCacheHit(t, "Loop", err)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Loop of 10 s against a caching server ended after %s (%d requests), not at its first hit", took, r.Requests)
		}
	})
	t.Run("ceiling", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := RunCeiling(ctx, CeilingOptions{
			Client: &Client{BaseURL: cachingServer(t).URL}, Layer: placesLayer(t),
			Lists: []TileList{{"z14", []maptile.Tile{maptile.At(berlin, 14), maptile.At(berlin, 13)}}},
			Pgbench: Pgbench{Path: fakeSteadyPgbench(t), DatabaseURL: "postgres://127.0.0.1:1/none", Clients: 2, Threads: 1,
				Duration: time.Second, Steady: 1, Dir: t.TempDir()},
		})
		refusesCacheHit(t, "RunCeiling", err)
	})
}
