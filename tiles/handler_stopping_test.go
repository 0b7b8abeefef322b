package tiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// stoppingRenderer fails every render with a timeout whose statement runs
// until stop is closed.
type stoppingRenderer struct{ stop chan struct{} }

func (s stoppingRenderer) Tile(context.Context, []*tiles.Layer, maptile.Tile) ([]byte, error) {
	return nil, pgcall.Outlast(&problem.Error{Code: problem.Timeout, Detail: "cut", RetryAfter: 4}, s.stop)
}

// A render whose statement is still running when it fails: the client has
// its whole 503 at once, and the handler — which holds the request's
// in-flight slot until it returns — returns only once the statement has
// stopped. With and without the cache (a shared render).
func TestHandlerAnswersThenWaitsForTheStatement(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		stop := make(chan struct{})
		h := &tiles.Handler{Catalog: newCatalog(t, demoLayers()...), Store: stoppingRenderer{stop}, Gate: allowAll{}, Logger: discardLogger()}
		if cached {
			h.Cache = newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20})
		}
		returned := make(chan struct{}, 1)
		router := tileRouter(h)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			router.ServeHTTP(w, r)
			returned <- struct{}{}
		}))
		resp, err := srv.Client().Get(srv.URL + "/tiles/places/14/8802/5373.mvt")
		if err != nil {
			t.Fatalf("cache %v: no answer while the statement runs: %v", cached, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "4" || !strings.Contains(string(body), "urn:geotoll:problem:timeout") {
			t.Errorf("cache %v: %d Retry-After %q %s; want a 503 timeout problem", cached, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		select {
		case <-returned:
			t.Errorf("cache %v: the handler returned while the statement ran", cached)
		case <-time.After(50 * time.Millisecond):
		}
		close(stop)
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Errorf("cache %v: the handler did not return once the statement stopped", cached)
		}
		srv.Close()
	}
}
