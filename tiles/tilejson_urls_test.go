package tiles_test

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/tiles"
)

// publicHandler is metaHandler with Handler.PublicURL set, behind
// trusted proxies at 10.0.0.0/8 that write X-Forwarded-For.
func publicHandler(t *testing.T, publicURL string) http.Handler {
	t.Helper()
	p, err := forwarded.New([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	return tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, demoLayers()...), Store: &countingRenderer{}, Gate: &pricingGate{},
		Logger: discardLogger(), Describer: &fakeDescriber{}, Proxies: p, BasePath: "/ignored", PublicURL: publicURL,
	})
}

type catalogDoc struct {
	Layers []struct {
		Name     string `json:"name"`
		TileJSON string `json:"tilejson"`
		Tiles    string `json:"tiles"`
	} `json:"layers"`
}

// With PublicURL set, every URL TileJSON and the catalog write starts
// with it, whatever Host, X-Forwarded-Host or Forwarded the request
// carries (even from a trusted proxy, even an invalid Host), and the
// documents do not Vary on forwarding headers: nothing a client sends
// can change what a shared cache keeps for everyone else. ?key= is still
// carried along.
func TestTileJSONPublicURL(t *testing.T) {
	t.Parallel()
	for _, public := range []string{"https://tiles.example.com/maps", "https://tiles.example.com/maps/"} {
		h := publicHandler(t, public)
		for _, tc := range []struct {
			name string
			r    func(path string) *http.Request
		}{
			{"plain", func(p string) *http.Request {
				return httptest.NewRequest(http.MethodGet, "http://internal:8080"+p, nil)
			}},
			{"forwarded by a trusted proxy", func(p string) *http.Request {
				r := httptest.NewRequest(http.MethodGet, "http://internal:8080"+p, nil)
				r.RemoteAddr = "10.1.2.3:1"
				r.Header.Set("X-Forwarded-Host", "evil.example")
				r.Header.Set("X-Forwarded-Proto", "http")
				return r
			}},
			{"invalid Host", func(p string) *http.Request {
				r := httptest.NewRequest(http.MethodGet, "http://internal:8080"+p, nil)
				r.Host = "example.com:abc"
				return r
			}},
		} {
			t.Run(public+" "+tc.name, func(t *testing.T) {
				var doc tileJSONDoc
				w := getJSON(t, h, tc.r("/tiles/places,districts.json"), &doc)
				if w.Code != http.StatusOK || len(doc.Tiles) != 1 ||
					doc.Tiles[0] != "https://tiles.example.com/maps/tiles/places,districts/{z}/{x}/{y}.mvt" {
					t.Fatalf("TileJSON: %d tiles %q", w.Code, doc.Tiles)
				}
				if vary := strings.Join(w.Header().Values("Vary"), ","); strings.Contains(vary, "Forwarded") {
					t.Errorf("TileJSON Vary %q: a document written from public_url depends on no forwarding header", vary)
				}
				var cat catalogDoc
				w = getJSON(t, h, tc.r("/tiles"), &cat)
				if w.Code != http.StatusOK || len(cat.Layers) != 3 ||
					cat.Layers[1].TileJSON != "https://tiles.example.com/maps/tiles/districts.json" ||
					cat.Layers[1].Tiles != "https://tiles.example.com/maps/tiles/districts/{z}/{x}/{y}.mvt" {
					t.Fatalf("catalog: %d %+v", w.Code, cat.Layers)
				}
				if vary := strings.Join(w.Header().Values("Vary"), ","); strings.Contains(vary, "Forwarded") {
					t.Errorf("catalog Vary %q", vary)
				}
			})
		}
		var doc tileJSONDoc
		getJSON(t, h, httptest.NewRequest(http.MethodGet, "http://internal/tiles/places.json?key=k1", nil), &doc)
		if len(doc.Tiles) != 1 || doc.Tiles[0] != "https://tiles.example.com/maps/tiles/places/{z}/{x}/{y}.mvt?key=k1" {
			t.Errorf("with ?key=: tiles %q", doc.Tiles)
		}
	}
}

// Without PublicURL, a request Host that is not a valid host[:port] —
// a port that is not a number from 1 to 65535 above all — is never
// written into the documents: it is a 400 problem (RFC 9110 §7.2: a
// Host with an invalid field value is a bad request). A forwarded host
// from a trusted proxy that is invalid is ignored, as before: the
// request's own (valid) Host is used. A missing Host (HTTP/1.0) is
// still "localhost".
func TestTileJSONInvalidHost(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{}, []string{"10.0.0.0/8"})
	for _, host := range []string{"example.com:abc", "example.com:0", "example.com:65536", "example.com:99999",
		"example.com:", "example.com:80:80", "[2001:db8::1", "2001:db8::1", "[2001:db8::1]:x"} {
		for _, path := range []string{"/tiles/places.json", "/tiles"} {
			r := httptest.NewRequest(http.MethodGet, "http://h"+path, nil)
			r.Host = host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("Host %q, GET %s: %d %q %s, want a 400 problem", host, path, w.Code, w.Header().Get("Content-Type"), w.Body)
				continue
			}
			if p := decodeProblem(t, w); !strings.Contains(p.Detail, "Host") {
				t.Errorf("Host %q: problem %+v does not name the Host", host, p)
			}
		}
	}
	for host, want := range map[string]string{
		"example.com:65535":  "http://example.com:65535/tiles/",
		"example.com:1":      "http://example.com:1/tiles/",
		"[2001:db8::1]:8443": "http://[2001:db8::1]:8443/tiles/",
		"[2001:db8::1]":      "http://[2001:db8::1]/tiles/",
		"127.0.0.1:8080":     "http://127.0.0.1:8080/tiles/",
		"tiles.example.com":  "http://tiles.example.com/tiles/",
		"":                   "http://localhost/tiles/",
	} {
		r := httptest.NewRequest(http.MethodGet, "http://h/tiles/places.json", nil)
		r.Host = host
		var doc tileJSONDoc
		if w := getJSON(t, h, r, &doc); w.Code != http.StatusOK || len(doc.Tiles) != 1 || !strings.HasPrefix(doc.Tiles[0], want) {
			t.Errorf("Host %q: %d tiles %q, want prefix %q", host, w.Code, doc.Tiles, want)
		}
	}
	// A trusted proxy's forwarded host with an invalid port is ignored.
	for _, hdr := range [][2]string{{"X-Forwarded-Host", "tiles.example.com:abc"}, {"X-Forwarded-Host", "tiles.example.com:70000"}} {
		r := httptest.NewRequest(http.MethodGet, "http://internal:8080/tiles/places.json", nil)
		r.RemoteAddr = "10.1.2.3:1"
		r.Header.Set(hdr[0], hdr[1])
		var doc tileJSONDoc
		if w := getJSON(t, h, r, &doc); w.Code != http.StatusOK || len(doc.Tiles) != 1 ||
			!strings.HasPrefix(doc.Tiles[0], "http://internal:8080/tiles/") {
			t.Errorf("%s: %s: %d tiles %q, want the request's own host", hdr[0], hdr[1], w.Code, doc.Tiles)
		}
	}
}

// TileJSON and the catalog carry a weak ETag made from their bytes, and
// answer an If-None-Match that names it — weakly or strongly, alone or in
// a list, or "*" — with 304 and no body, keeping ETag, Cache-Control and
// Vary (RFC 9110 §15.4.5). A document carrying ?key= is private, no-store:
// no cache keeps it, so it has no ETag and is always sent whole.
func TestTileJSONETag(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{}, nil)
	for _, path := range []string{"/tiles/places.json", "/tiles/places,districts.json", "/tiles"} {
		t.Run(path, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil))
			etag := w.Header().Get("ETag")
			opaque, weak := strings.CutPrefix(etag, "W/")
			if w.Code != http.StatusOK || !weak || len(opaque) < 3 || opaque[0] != '"' || opaque[len(opaque)-1] != '"' {
				t.Fatalf("%d ETag %q, want a weak entity tag", w.Code, etag)
			}
			cc, vary := w.Header().Get("Cache-Control"), w.Header().Values("Vary")
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("body %s", w.Body)
			}
			// The same document, the same tag; other bytes (another host), another.
			again := httptest.NewRecorder()
			h.ServeHTTP(again, httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil))
			if again.Header().Get("ETag") != etag || again.Body.String() != w.Body.String() {
				t.Errorf("the same document: ETag %q then %q", etag, again.Header().Get("ETag"))
			}
			other := httptest.NewRecorder()
			h.ServeHTTP(other, httptest.NewRequest(http.MethodGet, "http://tiles.example.net"+path, nil))
			if other.Header().Get("ETag") == etag || sha256.Sum256(other.Body.Bytes()) == sha256.Sum256(w.Body.Bytes()) {
				t.Errorf("another host: ETag %q, the same as %q", other.Header().Get("ETag"), etag)
			}

			for _, inm := range []string{etag, opaque, `"nope", ` + etag, `"a", W/"b",` + opaque + `, "c"`, "*", ` ` + etag + ` `} {
				r := httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil)
				r.Header.Set("If-None-Match", inm)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
					t.Errorf("If-None-Match %s: %d with %d bytes, want 304 and no body", inm, w.Code, w.Body.Len())
				}
				if w.Header().Get("ETag") != etag || w.Header().Get("Cache-Control") != cc ||
					strings.Join(w.Header().Values("Vary"), ",") != strings.Join(vary, ",") {
					t.Errorf("If-None-Match %s: 304 header %v, want ETag %s, Cache-Control %q, Vary %q", inm, w.Header(), etag, cc, vary)
				}
			}
			// Two request lines of If-None-Match are one list.
			r := httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil)
			r.Header.Add("If-None-Match", `"nope"`)
			r.Header.Add("If-None-Match", etag)
			if w := httptest.NewRecorder(); func() int { h.ServeHTTP(w, r); return w.Code }() != http.StatusNotModified {
				t.Errorf("If-None-Match over two lines: %d, want 304", w.Code)
			}
			// An unquoted tag is no entity tag: the header does not parse,
			// a 400 naming it (package etag), as on every route.
			unquoted := httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil)
			unquoted.Header.Set("If-None-Match", strings.Trim(opaque, `"`))
			if w := httptest.NewRecorder(); func() int { h.ServeHTTP(w, unquoted); return w.Code }() != http.StatusBadRequest ||
				!strings.Contains(w.Body.String(), `"param":"If-None-Match"`) {
				t.Errorf("an unquoted If-None-Match: %d %s, want a 400 naming it", w.Code, w.Body)
			}
			for _, inm := range []string{`"nope"`, `W/"nope", "other"`, etag[:len(etag)-1] + `x"`} {
				r := httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path, nil)
				r.Header.Set("If-None-Match", inm)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK || w.Body.String() != again.Body.String() || w.Header().Get("ETag") != etag {
					t.Errorf("If-None-Match %s: %d, want 200 with the document and its ETag", inm, w.Code)
				}
			}

			// ?key=: private, no-store, no ETag, never 304.
			for _, inm := range []string{"", "*", etag} {
				r := httptest.NewRequest(http.MethodGet, "http://maps.example.org"+path+"?key=k1", nil)
				if inm != "" {
					r.Header.Set("If-None-Match", inm)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK || w.Header().Get("ETag") != "" || w.Header().Get("Cache-Control") != "private, no-store" ||
					!strings.Contains(w.Body.String(), "key=k1") {
					t.Errorf("?key= with If-None-Match %q: %d ETag %q Cache-Control %q", inm, w.Code, w.Header().Get("ETag"), w.Header().Get("Cache-Control"))
				}
			}
		})
	}
}
