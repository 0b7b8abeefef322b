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

// Every answer a cache may keep varies on the caller's key, private ones
// too: a keyed tile or TileJSON (200 or 304) carries that key's budget
// headers and Cache-Control, and a browser's cache must not answer a
// request with another key, or none, from it. An answer no cache keeps
// (no-store) needs no Vary.
func TestKeyedAnswersVaryOnTheKey(t *testing.T) {
	h := tolledPlaces(t)
	etag := serve(h, http.MethodGet, "/tiles/places.json").Header().Get("ETag")
	tileETag := serve(h, http.MethodGet, "/tiles/places/14/8802/5373.mvt").Header().Get("ETag")
	varies := func(w interface{ Header() http.Header }) bool {
		vary := strings.Join(w.Header().Values("Vary"), ",")
		return strings.Contains(vary, "Authorization") && strings.Contains(vary, "X-API-Key")
	}
	for _, tc := range []struct {
		name, path string
		hdr        []string
		status     int
		cc         string
		vary       bool
	}{
		{"a keyed tile", "/tiles/places/14/8802/5373.mvt", []string{"X-API-Key", "k1"}, http.StatusOK, "private, max-age=90", true},
		{"a keyed tile's 304", "/tiles/places/14/8802/5373.mvt", []string{"X-API-Key", "k1", "If-None-Match", tileETag}, http.StatusNotModified, "private, max-age=90", true},
		{"a keyed TileJSON", "/tiles/places.json", []string{"Authorization", "Bearer k1"}, http.StatusOK, "private, max-age=60", true},
		{"a keyed TileJSON's 304", "/tiles/places.json", []string{"X-API-Key", "k1", "If-None-Match", etag}, http.StatusNotModified, "private, max-age=60", true},
		{"an anonymous tile", "/tiles/places/14/8802/5373.mvt", nil, http.StatusOK, "public, max-age=90", true},
		{"an anonymous TileJSON's 304", "/tiles/places.json", []string{"If-None-Match", etag}, http.StatusNotModified, "public, max-age=60", true},
		{"a TileJSON carrying ?key=", "/tiles/places.json?key=k1", nil, http.StatusOK, "private, no-store", false},
		{"a keyed problem", "/tiles/nope/14/8802/5373.mvt", []string{"X-API-Key", "k1"}, http.StatusNotFound, "no-store", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(h, http.MethodGet, tc.path, tc.hdr...)
			if w.Code != tc.status || w.Header().Get("Cache-Control") != tc.cc {
				t.Fatalf("%d Cache-Control %q, want %d %q", w.Code, w.Header().Get("Cache-Control"), tc.status, tc.cc)
			}
			if varies(w) != tc.vary {
				t.Errorf("Vary %q: varies on the key %v, want %v", w.Header().Values("Vary"), varies(w), tc.vary)
			}
		})
	}
}
