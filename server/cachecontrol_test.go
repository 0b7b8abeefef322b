package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/web"
)

// The preview page asked for with a key in its URL is no-store through the
// whole server: the keyed scope (withKeyedPrivate) leaves a no-store alone,
// so no browser or shared cache keeps the address that carries the key.
// Asked for with a key in a header, the address holds no secret: the page
// stays no-cache.
func TestPreviewPageWithAKeyInTheURLIsNotStored(t *testing.T) {
	h := New(Options{Web: web.Handler(), Logger: discard()})
	key := "gt_" + strings.Repeat("k", 43)
	for _, tc := range []struct {
		name, path string
		hdr        []string
		want       string
	}{
		{"?key=", "/?key=" + key, nil, "no-store"},
		{"X-API-Key", "/", []string{"X-API-Key", key}, "no-cache"},
		{"anonymous", "/", nil, "no-cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(h, http.MethodGet, tc.path, tc.hdr...)
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if got := w.Header().Get("Cache-Control"); got != tc.want {
				t.Errorf("Cache-Control %q, want %q", got, tc.want)
			}
		})
	}
}
