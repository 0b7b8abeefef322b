package toll

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/throttle"
)

// A price preview and /budget describe one caller's budget at one moment:
// no cache may keep them (a shared cache would hand one caller's budget to
// another, a private one a stale budget to the same caller), and neither
// may it keep the refusals answered instead.
func TestDryRunIsNotStored(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	serve := func(h func(http.ResponseWriter, *http.Request), target, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "192.0.2.7:5555"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h(w, r)
		return w
	}
	tile := func(w http.ResponseWriter, r *http.Request) { toll.AdmitTile(w, r, tileDemand(2, "places")) }
	for _, tc := range []struct {
		name   string
		h      func(http.ResponseWriter, *http.Request)
		target string
		key    string
		status int
	}{
		{"dry run, anonymous", tile, "/tiles/places/2/0/0.mvt?dry_run=1", "", http.StatusOK},
		{"dry run, keyed", tile, "/tiles/places/2/0/0.mvt?dry_run=true", "k1", http.StatusOK},
		{"budget, anonymous", toll.ServeBudget, "/budget", "", http.StatusOK},
		{"budget, keyed", toll.ServeBudget, "/budget", "k1", http.StatusOK},
		{"budget, unknown key", toll.ServeBudget, "/budget", "gt_wrong", http.StatusUnauthorized},
		{"dry run, unknown key", tile, "/tiles/places/2/0/0.mvt?dry_run=1", "gt_wrong", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(tc.h, tc.target, tc.key)
			if w.Code != tc.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.status)
			}
			if cc := w.Header().Get("Cache-Control"); !strings.Contains(cc, "no-store") {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}
	// The bucket's refusal of a real request.
	for range 2 {
		serve(tile, "/tiles/places/2/0/0.mvt", "k1")
	}
	w := serve(tile, "/tiles/places/2/0/0.mvt", "k1")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third z2 tile: %d, want 429", w.Code)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("429: Cache-Control %q, want no-store", cc)
	}
}
