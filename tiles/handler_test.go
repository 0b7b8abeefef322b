package tiles_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

func TestParseRequest(t *testing.T) {
	t.Parallel()
	c := newCatalog(t, append(demoLayers(),
		tiles.Layer{Name: "lowzoom", Table: "t", GeometryColumn: "g", MaxZoom: 10},
		tiles.Layer{Name: "highzoom", Table: "t", GeometryColumn: "g", MinZoom: 12, MaxZoom: 14},
	)...)
	for _, tc := range []struct {
		name           string
		layer, z, x, y string
		wantLayers     []string
		wantTile       maptile.Tile
		status         int
		param          string
	}{
		{name: "ok", layer: "places", z: "14", x: "8802", y: "5373.mvt",
			wantLayers: []string{"places"}, wantTile: maptile.New(8802, 5373, 14)},
		{name: "pbf", layer: "places", z: "0", x: "0", y: "0.pbf",
			wantLayers: []string{"places"}, wantTile: maptile.New(0, 0, 0)},
		{name: "composite", layer: "districts,places", z: "12", x: "2200", y: "1343.mvt",
			wantLayers: []string{"districts", "places"}, wantTile: maptile.New(2200, 1343, 12)},
		{name: "at minzoom", layer: "districts", z: "4", x: "8", y: "5.mvt",
			wantLayers: []string{"districts"}, wantTile: maptile.New(8, 5, 4)},
		{name: "at maxzoom", layer: "lowzoom", z: "10", x: "0", y: "0.mvt",
			wantLayers: []string{"lowzoom"}, wantTile: maptile.New(0, 0, 10)},

		{name: "below minzoom", layer: "districts", z: "3", x: "4", y: "2.mvt", status: 422, param: "z"},
		// A composite serves the layers in range, in their order; 422 only
		// when none is.
		{name: "composite below one minzoom", layer: "places,districts", z: "0", x: "0", y: "0.mvt",
			wantLayers: []string{"places"}, wantTile: maptile.New(0, 0, 0)},
		{name: "composite above one maxzoom", layer: "lowzoom,districts,places", z: "11", x: "0", y: "0.mvt",
			wantLayers: []string{"districts", "places"}, wantTile: maptile.New(0, 0, 11)},
		{name: "composite with no layer in range", layer: "districts,highzoom", z: "3", x: "0", y: "0.mvt", status: 422, param: "z"},
		// A zoom between its layers' ranges is inside the composite's
		// (0..14, which its TileJSON advertises): an empty tile, no layer
		// to read. Beyond every layer's range it is still a 422.
		{name: "composite in the gap between its layers' zooms", layer: "lowzoom,highzoom", z: "11", x: "0", y: "0.mvt",
			wantLayers: nil, wantTile: maptile.New(0, 0, 11)},
		{name: "composite above every layer's maxzoom", layer: "lowzoom,highzoom", z: "15", x: "0", y: "0.mvt", status: 422, param: "z"},
		{name: "above maxzoom", layer: "lowzoom", z: "11", x: "0", y: "0.mvt", status: 422, param: "z"},
		{name: "above MaxZoom", layer: "places", z: "23", x: "0", y: "0.mvt", status: 422, param: "z"},
		{name: "x out of range", layer: "places", z: "1", x: "2", y: "0.mvt", status: 422, param: "x"},
		{name: "y out of range", layer: "places", z: "1", x: "0", y: "2.mvt", status: 422, param: "y"},
		{name: "bad z", layer: "places", z: "-1", x: "0", y: "0.mvt", status: 400, param: "z"},
		{name: "bad y", layer: "places", z: "1", x: "0", y: "0x1.mvt", status: 400, param: "y"},
		{name: "no format", layer: "places", z: "1", x: "0", y: "0", status: 404, param: "format"},
		{name: "png", layer: "places", z: "1", x: "0", y: "0.png", status: 404, param: "format"},
		{name: "unknown layer", layer: "nope", z: "1", x: "0", y: "0.mvt", status: 404, param: "layer"},
		{name: "empty layer", layer: "", z: "1", x: "0", y: "0.mvt", status: 400, param: "layer"},
		{name: "duplicate layer", layer: "places,places", z: "1", x: "0", y: "0.mvt", status: 400, param: "layer"},
		{name: "too many layers", layer: strings.Repeat("places,", 8) + "places", z: "1", x: "0", y: "0.mvt", status: 422, param: "layer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := c.ParseRequest(tc.layer, tc.z, tc.x, tc.y)
			if tc.status != 0 {
				wantProblem(t, err, tc.status, tc.param)
				return
			}
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if req.Tile != tc.wantTile {
				t.Errorf("tile = %v, want %v", req.Tile, tc.wantTile)
			}
			if got := layerNames(req.Layers); !slices.Equal(got, tc.wantLayers) {
				t.Errorf("layers = %v, want %v", got, tc.wantLayers)
			}
		})
	}
}

func layerNames(ls []*tiles.Layer) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

// fakeRenderer records its calls and answers with tile or err.
type fakeRenderer struct {
	tile []byte
	err  error

	mu    sync.Mutex
	calls []tiles.Demand
}

func (f *fakeRenderer) Tile(ctx context.Context, layers []*tiles.Layer, t maptile.Tile) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, tiles.Demand{Layers: layers, Tile: t})
	return f.tile, f.err
}

func (f *fakeRenderer) Calls() []tiles.Demand {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// fakeGate admits or refuses every request and records what it priced.
type fakeGate struct {
	refuse bool

	mu      sync.Mutex
	demands []tiles.Demand
}

func (g *fakeGate) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	g.mu.Lock()
	g.demands = append(g.demands, d)
	g.mu.Unlock()
	w.Header().Set("X-Budget-Remaining", "7")
	if g.refuse {
		problem.Write(w, r, &problem.Error{Code: problem.Exhausted, Detail: "budget exhausted", RetryAfter: 3})
		return false
	}
	return true
}

func (g *fakeGate) Demands() []tiles.Demand {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.demands)
}

// router mounts h as the server does.
func router(h http.Handler) http.Handler {
	r := mux.NewRouter()
	path := "/tiles/{" + tiles.VarLayer + "}/{" + tiles.VarZ + "}/{" + tiles.VarX + "}/{" + tiles.VarY + "}"
	r.Handle(path, h).Methods(http.MethodGet, http.MethodHead)
	return r
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type problemDoc struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Param    string `json:"param"`
	Instance string `json:"instance"`
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) problemDoc {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %q; body %s", ct, problem.ContentType, w.Body)
	}
	var doc problemDoc
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if doc.Status != w.Code {
		t.Errorf("problem status %d, response status %d", doc.Status, w.Code)
	}
	return doc
}

func TestHandler(t *testing.T) {
	t.Parallel()
	cat := newCatalog(t, demoLayers()...)
	mvt := []byte{0x1a, 0x02, 0x78, 0x02} // any non-empty bytes: the handler does not look inside

	for _, tc := range []struct {
		name     string
		path     string
		tile     []byte
		err      error
		refuse   bool
		status   int
		param    string // problem param; "" for no problem document
		rendered bool   // whether the Renderer must have been called
	}{
		{name: "tile", path: "/tiles/places/14/8802/5373.mvt", tile: mvt, status: 200, rendered: true},
		{name: "pbf", path: "/tiles/places/0/0/0.pbf", tile: mvt, status: 200, rendered: true},
		{name: "composite", path: "/tiles/places,districts/12/2200/1343.mvt", tile: mvt, status: 200, rendered: true},
		{name: "empty tile", path: "/tiles/places/14/8192/8192.mvt", tile: nil, status: 204, rendered: true},
		{name: "empty non-nil tile", path: "/tiles/places/14/8192/8192.mvt", tile: []byte{}, status: 204, rendered: true},
		{name: "gate refuses", path: "/tiles/places/14/8802/5373.mvt", tile: mvt, refuse: true, status: 429, param: "", rendered: false},

		{name: "bad z", path: "/tiles/places/abc/0/0.mvt", status: 400, param: "z"},
		{name: "negative x", path: "/tiles/places/1/-1/0.mvt", status: 400, param: "x"},
		{name: "space in y", path: "/tiles/places/1/0/%201.mvt", status: 400, param: "y"},
		{name: "full-width z", path: "/tiles/places/%EF%BC%91/0/0.mvt", status: 400, param: "z"},
		{name: "duplicate layer", path: "/tiles/places,places/1/0/0.mvt", status: 400, param: "layer"},
		{name: "unknown layer", path: "/tiles/nope/1/0/0.mvt", status: 404, param: "layer"},
		{name: "png", path: "/tiles/places/1/0/0.png", status: 404, param: "format"},
		{name: "no extension", path: "/tiles/places/1/0/0", status: 404, param: "format"},
		{name: "zoom above max", path: "/tiles/places/23/0/0.mvt", status: 422, param: "z"},
		{name: "x out of range", path: "/tiles/places/3/8/0.mvt", status: 422, param: "x"},
		{name: "y out of range", path: "/tiles/places/3/0/8.mvt", status: 422, param: "y"},
		{name: "below layer minzoom", path: "/tiles/districts/2/0/0.mvt", status: 422, param: "z"},

		{name: "timeout", path: "/tiles/places/4/8/5.mvt",
			err: &problem.Error{Code: problem.Timeout, Detail: "slow", RetryAfter: 2}, status: 503, rendered: true},
		{name: "database down", path: "/tiles/places/4/8/5.mvt",
			err: &problem.Error{Code: problem.Unavailable, Detail: "down", RetryAfter: 5}, status: 503, rendered: true},
		{name: "internal", path: "/tiles/places/4/8/5.mvt",
			err: errors.New("secret connection string postgres://u:p@db"), status: 500, rendered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rend := &fakeRenderer{tile: tc.tile, err: tc.err}
			gate := &fakeGate{refuse: tc.refuse}
			h := router(&tiles.Handler{Catalog: cat, Store: rend, Gate: gate, Logger: discardLogger()})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))

			if w.Code != tc.status {
				t.Fatalf("GET %s: status %d, want %d; body %s", tc.path, w.Code, tc.status, w.Body)
			}
			calls := rend.Calls()
			if tc.rendered != (len(calls) == 1) {
				t.Fatalf("GET %s: Renderer called %d times, want rendered=%v", tc.path, len(calls), tc.rendered)
			}
			if tc.rendered {
				// What was rendered is what the gate priced.
				ds := gate.Demands()
				if len(ds) != 1 || ds[0].Tile != calls[0].Tile || !slices.Equal(ds[0].Layers, calls[0].Layers) {
					t.Errorf("gate priced %+v, renderer got %+v", ds, calls[0])
				}
			}

			cc := w.Header().Get("Cache-Control")
			if cacheable := tc.status == 200 || tc.status == 204; cacheable != strings.Contains(cc, "max-age=") {
				t.Errorf("status %d with Cache-Control %q", w.Code, cc)
			}
			switch {
			case tc.status == 200:
				if ct := w.Header().Get("Content-Type"); ct != tiles.ContentType {
					t.Errorf("Content-Type = %q, want %q", ct, tiles.ContentType)
				}
				if !slices.Equal(w.Body.Bytes(), tc.tile) {
					t.Errorf("body = %x, want %x", w.Body.Bytes(), tc.tile)
				}
				if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(tc.tile)) {
					t.Errorf("Content-Length = %q, want %d", cl, len(tc.tile))
				}
			case tc.status == 204:
				if w.Body.Len() != 0 {
					t.Errorf("204 with body %q", w.Body)
				}
				if ct := w.Header().Get("Content-Type"); ct == tiles.ContentType {
					t.Errorf("204 claims Content-Type %q", ct)
				}
			case tc.status == 429:
				if w.Header().Get("X-Budget-Remaining") != "7" || w.Header().Get("Retry-After") != "3" {
					t.Errorf("gate's headers lost: %v", w.Header())
				}
			case tc.status >= 500:
				doc := decodeProblem(t, w)
				if tc.status == 503 {
					want := problem.From(tc.err).RetryAfter
					if ra := w.Header().Get("Retry-After"); ra == "" || ra != strconv.Itoa(want) {
						t.Errorf("Retry-After = %q, want %d", ra, want)
					}
				}
				if tc.status == 500 && (doc.Detail != "internal error" || strings.Contains(w.Body.String(), "secret")) {
					t.Errorf("internal error leaked: %s", w.Body)
				}
			default:
				doc := decodeProblem(t, w)
				if doc.Param != tc.param {
					t.Errorf("problem param = %q, want %q; %s", doc.Param, tc.param, w.Body)
				}
				if doc.Detail == "" {
					t.Errorf("problem without detail: %s", w.Body)
				}
				if len(gate.Demands()) != 0 {
					t.Errorf("a bad request reached the gate: %+v", gate.Demands())
				}
			}
		})
	}
}

// gapLayers are two layers whose zoom ranges leave a gap (z6..z9): their
// composite is advertised (TileJSON) and served at z0..z14.
func gapLayers() []tiles.Layer {
	return []tiles.Layer{
		{Name: "low", Table: "t", GeometryColumn: "g", MaxZoom: 5, MaxAge: 5 * time.Minute},
		{Name: "high", Table: "t", GeometryColumn: "g", MinZoom: 10, MaxZoom: 14, MaxAge: 2 * time.Minute},
	}
}

// A composite asked at a zoom inside its range (which its TileJSON
// advertises) that none of its layers serves is an empty tile, as any
// tile without features: 204 with ETag, Cache-Control (the smallest
// max_age of its layers) and Vary. Nothing reads the database for it, so
// the Gate prices it as a cache hit of the layers the address names (and
// may refuse it). Outside the composite's range it stays a 422, with or
// without a tile cache.
func TestHandlerCompositeGapIsAnEmptyTile(t *testing.T) {
	t.Parallel()
	cat := newCatalog(t, gapLayers()...)
	for _, withCache := range []bool{false, true} {
		t.Run("cache="+strconv.FormatBool(withCache), func(t *testing.T) {
			t.Parallel()
			rend := &fakeRenderer{tile: []byte{0x1a, 0x02, 0x78, 0x02}}
			gate := &fakeGate{}
			obs := &cacheResults{}
			th := &tiles.Handler{Catalog: cat, Store: rend, Gate: gate, Logger: discardLogger(), Observer: obs}
			if withCache {
				th.Cache = newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20})
			}
			h := router(th)
			for _, z := range []int{6, 7, 9} {
				path := "/tiles/low,high/" + strconv.Itoa(z) + "/0/0.mvt"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
				if w.Code != http.StatusNoContent || w.Body.Len() != 0 {
					t.Fatalf("GET %s: %d %s, want 204 without a body", path, w.Code, w.Body)
				}
				if x := w.Header().Values("X-Cache"); len(x) != 0 {
					t.Errorf("GET %s: X-Cache %q, want none: the tile is neither cached nor rendered", path, x)
				}
				etag := w.Header().Get("ETag")
				if etag == "" || w.Header().Get("Cache-Control") != "public, max-age=120" ||
					!slices.Contains(w.Header().Values("Vary"), "Accept-Encoding") {
					t.Errorf("GET %s: headers %v, want an ETag, Cache-Control public, max-age=120 and Vary: Accept-Encoding", path, w.Header())
				}
				r := httptest.NewRequest(http.MethodGet, path, nil)
				r.Header.Set("If-None-Match", etag)
				w = httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusNotModified {
					t.Errorf("GET %s with If-None-Match %s: %d, want 304", path, etag, w.Code)
				}
			}
			demands := gate.Demands()
			if len(demands) != 6 {
				t.Errorf("%d demands for 6 empty tiles (3 and their 304s), want 6", len(demands))
			}
			for _, d := range demands {
				if !d.CacheHit || len(d.Layers) != 2 || d.Layers[0].Name != "low" || d.Layers[1].Name != "high" {
					t.Errorf("an empty tile's demand: cache hit %v, %d layers; want a cache hit of low and high", d.CacheHit, len(d.Layers))
				}
			}
			if c := rend.Calls(); len(c) != 0 {
				t.Errorf("the empty tiles were rendered: %+v", c)
			}
			if got := obs.get(); !maps.Equal(got, map[string]int{"empty": 6}) {
				t.Errorf("cache results %v, want 6 empty", got)
			}
			for _, path := range []string{"/tiles/low,high/15/0/0.mvt", "/tiles/low,high/22/0/0.mvt"} {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
				if w.Code != http.StatusUnprocessableEntity {
					t.Fatalf("GET %s: %d, want 422", path, w.Code)
				}
				if doc := decodeProblem(t, w); doc.Param != "z" {
					t.Errorf("GET %s: problem param %q, want z", path, doc.Param)
				}
			}
			// In a layer's range the composite is rendered as before.
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tiles/low,high/12/0/0.mvt", nil))
			if d := gate.Demands(); w.Code != http.StatusOK || len(rend.Calls()) != 1 || len(d) != 7 || d[6].CacheHit || len(d[6].Layers) != 1 {
				t.Errorf("z12: %d, %d renders, %d prices; want 200, rendered once, priced as a miss of its one layer in range", w.Code, len(rend.Calls()), len(d))
			}
			// A refusal of the Gate is the answer, as for any tile.
			refused := router(&tiles.Handler{Catalog: cat, Store: rend, Gate: &fakeGate{refuse: true}, Logger: discardLogger()})
			w = httptest.NewRecorder()
			refused.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tiles/low,high/7/0/0.mvt", nil))
			if w.Code != http.StatusTooManyRequests {
				t.Errorf("an empty tile the Gate refuses: %d, want 429", w.Code)
			}
		})
	}
}

// cacheResults is a tiles.Observer that counts the cache results.
type cacheResults struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *cacheResults) TileCache(result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[result]++
}

func (*cacheResults) TileQuery(string, maptile.Zoom, time.Duration) {}

func (o *cacheResults) get() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.n)
}

// TestHandlerPassesRequestContext: the renderer gets the request's context
// (so a client that hangs up cancels the query), not a fresh one.
func TestHandlerPassesRequestContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	var got any
	rend := rendererFunc(func(ctx context.Context, _ []*tiles.Layer, _ maptile.Tile) ([]byte, error) {
		got = ctx.Value(key{})
		return nil, nil
	})
	h := router(&tiles.Handler{Catalog: newCatalog(t, demoLayers()...), Store: rend, Gate: &fakeGate{}, Logger: discardLogger()})
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/0/0/0.mvt", nil)
	r = r.WithContext(context.WithValue(r.Context(), key{}, "request"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNoContent || got != "request" {
		t.Fatalf("status %d, renderer context value %v; want 204 and the request's context", w.Code, got)
	}
}

type rendererFunc func(context.Context, []*tiles.Layer, maptile.Tile) ([]byte, error)

func (f rendererFunc) Tile(ctx context.Context, ls []*tiles.Layer, t maptile.Tile) ([]byte, error) {
	return f(ctx, ls, t)
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range [][4]string{
		{"places", "0", "0", "0.mvt"},
		{"places", "22", "4194303", "4194303.pbf"},
		{"places,districts", "12", "2200", "1343.mvt"},
		{"districts", "3", "0", "0.mvt"},
		{"places,places", "1", "0", "0.mvt"},
		{"nope", "1", "0", "0.mvt"},
		{"", "", "", ""},
		{",", "-1", "+1", " 1.png"},
		{"places", "1e3", "0x10", "１.mvt"},
		{"places", "23", "0", "0.mvt"},
		{"places", "14", "16384", "16384.mvt"},
		{"places", "4294967296", "0", "0.mvt.mvt"},
		{"a,b,c,d,e,f,g,h,i", "0", "0", "0.mvt"},
		{"places,districts", "2", "1", "1.mvt"},
		{"low,high", "7", "0", "0.mvt"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	c, err := tiles.NewCatalog(append(demoLayers(), gapLayers()...))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, layer, z, x, yext string) {
		req, err := c.ParseRequest(layer, z, x, yext)
		if err != nil {
			var p *problem.Error
			if !errors.As(err, &p) {
				t.Fatalf("ParseRequest(%q, %q, %q, %q): error %T %v is not a *problem.Error", layer, z, x, yext, err, err)
			}
			switch s := problem.Status(p.Code); s {
			case 400, 404, 422:
			default:
				t.Fatalf("ParseRequest(%q, %q, %q, %q): status %d (%v)", layer, z, x, yext, s, err)
			}
			if p.Param == "" {
				t.Fatalf("ParseRequest(%q, %q, %q, %q): problem names no param: %v", layer, z, x, yext, err)
			}
			return
		}
		if !req.Tile.Valid() || req.Tile.Z > tiles.MaxZoom {
			t.Fatalf("ParseRequest(%q, %q, %q, %q) = invalid tile %v", layer, z, x, yext, req.Tile)
		}
		if e := tiles.Envelope(req.Tile); !(e.Min[0] < e.Max[0] && e.Min[1] < e.Max[1]) {
			t.Fatalf("Envelope(%v) = %v is empty", req.Tile, e)
		}
		if len(req.Named) == 0 || len(req.Named) > tiles.MaxComposite {
			t.Fatalf("ParseRequest(%q, …) named %d layers", layer, len(req.Named))
		}
		if got := strings.Join(layerNames(req.Named), ","); got != layer {
			t.Fatalf("ParseRequest(%q, …) resolved %q", layer, got)
		}
		// Layers are the named ones served at z, in order; none only for
		// a composite (between its layers' zooms).
		var in []*tiles.Layer
		for _, l := range req.Named {
			if l != c.Layer(l.Name) {
				t.Fatalf("layer %q is not the catalog's", l.Name)
			}
			if l.ZoomInRange(req.Tile.Z) {
				in = append(in, l)
			}
		}
		if !slices.Equal(req.Layers, in) || len(in) == 0 && len(req.Named) == 1 {
			t.Fatalf("ParseRequest(%q, …) at z%d reads %q", layer, req.Tile.Z, layerNames(req.Layers))
		}
		// A zoom is served only between the least minzoom and the
		// greatest maxzoom of the layers named.
		lo, hi := int(tiles.MaxZoom), 0
		for _, l := range req.Named {
			lo, hi = min(lo, l.MinZoom), max(hi, l.MaxZoom)
		}
		if z := int(req.Tile.Z); z < lo || z > hi {
			t.Fatalf("ParseRequest(%q, …) served z%d, outside its layers' %d..%d", layer, z, lo, hi)
		}
	})
}

func BenchmarkParseRequest(b *testing.B) {
	c, err := tiles.NewCatalog(demoLayers())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, layer, z, x, y string }{
		{"single", "places", "14", "8802", "5373.mvt"},
		{"composite", "places,districts,geofences", "12", "2200", "1343.pbf"},
		{"malformed", "places", "14", "88o2", "5373.mvt"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.ParseRequest(bc.layer, bc.z, bc.x, bc.y)
			}
		})
	}
}
