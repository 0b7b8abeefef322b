package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

type admitAll struct{}

func (admitAll) AdmitTile(http.ResponseWriter, *http.Request, tiles.Demand) bool { return true }

type oneTile struct{}

func (oneTile) Tile(context.Context, []*tiles.Layer, maptile.Tile) ([]byte, error) {
	return []byte("a tile of some bytes"), nil
}

// fetchHeaders are the request headers the Fetch standard (HTTP-network-
// or-cache fetch; web-platform-tests fetch/http-cache/cache-mode.any.js)
// adds for a request's cache mode: "no-store" and "reload" send
// Cache-Control: no-cache and Pragma: no-cache, "no-cache" sends
// Cache-Control: max-age=0.
func fetchHeaders(mode string) map[string]string {
	switch mode {
	case "no-store", "reload":
		return map[string]string{"Cache-Control": "no-cache", "Pragma": "no-cache"}
	case "no-cache":
		return map[string]string{"Cache-Control": "max-age=0"}
	}
	return nil
}

// The preview page fetches its tiles itself (loadTile) and bypasses the
// browser's cache "so that every response the meter sees is one the
// server priced". It does so with cache: 'no-store', for which the browser
// sends Cache-Control: no-cache — which geotoll reads as "render afresh,
// not from the tile cache, priced in full" (README). So every tile the
// preview page shows skips the server's tile cache: rendered again and
// charged in full on every pan back, and the meter never shows a hit's
// price. A tile the server holds must be answered from its cache.
func TestPreviewTileFetchUsesTheServerCache(t *testing.T) {
	src, err := os.ReadFile("app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`await fetch\(url, \{[^}]*cache: '([a-z-]+)'`).FindSubmatch(src)
	mode := "default"
	if m != nil {
		mode = string(m[1])
	}
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := tiles.NewCache(tiles.CacheOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	r.Handle("/tiles/{"+tiles.VarLayer+"}/{"+tiles.VarZ+"}/{"+tiles.VarX+"}/{"+tiles.VarY+"}",
		&tiles.Handler{Catalog: cat, Store: oneTile{}, Gate: admitAll{}, Cache: cache})
	get := func(hdr map[string]string) string {
		req := httptest.NewRequest(http.MethodGet, "/tiles/places/3/4/2.mvt", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Header().Get("X-Cache")
	}
	get(nil) // the server renders and keeps the tile
	if got := get(fetchHeaders(mode)); got != "HIT" {
		t.Errorf("the preview page's tile fetch (cache: %q, so %v) got X-Cache %q from a server that holds the tile",
			mode, fetchHeaders(mode), got)
	}
}
