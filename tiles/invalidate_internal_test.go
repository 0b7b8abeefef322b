package tiles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
)

// A layer's tiles are invalidated (a fence write, or serving storage
// swapped in by Catalog.Refresh) while a render of one of them is running:
// that render read the data as it was before the change, so the tile it
// makes must not be kept in the cache. The next request after the
// invalidation must render afresh, not be answered from the cache with the
// tile of the old data for the rest of its TTL.
func TestInvalidateLayerDuringRenderKeepsNoStaleTile(t *testing.T) {
	t.Parallel()
	rend := &heldRenderer{release: make(chan struct{}), ctxs: make(chan context.Context, 4)}
	h, srv := internalHandler(t, 1<<20, rend, nil)

	first := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil))
		first <- w
	}()
	testenv.Receive(t, rend.ctxs, "the render to start")
	// The data changes while the render runs: its reader drops the
	// layer's tiles, as serve's OnWrite and refreshStorage do.
	h.Cache.InvalidateLayer("places")
	close(rend.release)
	if w := testenv.Receive(t, first, "the first request's answer"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}

	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil))
	if got := w.Header().Get("X-Cache"); got != "MISS" || rend.calls.Load() != 2 {
		t.Errorf("a request after InvalidateLayer was answered with X-Cache %q after %d render(s): "+
			"the render that started before the invalidation stored its (stale) tile after it", got, rend.calls.Load())
	}
}

// A request that comes after InvalidateLayer, while a render begun before
// it still runs, does not wait for that render (whose tile shows the data
// as it was): it renders the tile afresh.
func TestRequestAfterInvalidateLayerDoesNotJoinTheEarlierRender(t *testing.T) {
	t.Parallel()
	rend := &heldRenderer{release: make(chan struct{}), ctxs: make(chan context.Context, 4)}
	obs := &resultCounter{n: map[string]int{}}
	h, srv := internalHandler(t, 1<<20, rend, obs)

	answers := make(chan *httptest.ResponseRecorder, 2)
	get := func() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil))
		answers <- w
	}
	go get()
	testenv.Receive(t, rend.ctxs, "the first render to start")
	h.Cache.InvalidateLayer("places")
	go get()
	// Joining the first render instead would start none.
	testenv.Receive(t, rend.ctxs, "a second render, for the request after the invalidation")
	close(rend.release)
	for range 2 {
		if w := testenv.Receive(t, answers, "an answer"); w.Code != http.StatusOK || w.Header().Get("X-Cache") != "MISS" {
			t.Errorf("%d X-Cache %q, want 200 MISS", w.Code, w.Header().Get("X-Cache"))
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.n["miss"] != 2 || obs.n["shared"] != 0 {
		t.Errorf("observed %v, want 2 misses and none shared", obs.n)
	}
}
