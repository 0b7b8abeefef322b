package tiles_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// fakeDescriber describes every layer with fixed bounds per layer name.
type fakeDescriber struct {
	bounds map[string][4]float64
	err    error
	calls  atomic.Int32
}

func (f *fakeDescriber) Describe(_ context.Context, l *tiles.Layer) (tiles.LayerInfo, error) {
	f.calls.Add(1)
	if f.err != nil {
		return tiles.LayerInfo{}, f.err
	}
	fields := map[string]string{}
	for _, p := range l.Properties {
		fields[p] = "String"
	}
	if l.Name == "places" {
		fields["rank"] = "Number"
	}
	return tiles.LayerInfo{Bounds: f.bounds[l.Name], Fields: fields}, nil
}

type tileJSONDoc struct {
	TileJSON     string    `json:"tilejson"`
	Name         string    `json:"name"`
	Scheme       string    `json:"scheme"`
	Tiles        []string  `json:"tiles"`
	MinZoom      *int      `json:"minzoom"`
	MaxZoom      *int      `json:"maxzoom"`
	Bounds       []float64 `json:"bounds"`
	Center       []float64 `json:"center"`
	VectorLayers []struct {
		ID            string            `json:"id"`
		Fields        map[string]string `json:"fields"`
		MinZoom       int               `json:"minzoom"`
		MaxZoom       int               `json:"maxzoom"`
		GeometryKind  string            `json:"geometry_kind"`
		ServedMaxZoom int               `json:"served_maxzoom"`
		Storage       []any             `json:"storage"`
	} `json:"vector_layers"`
}

func metaHandler(t *testing.T, d tiles.Describer, proxies []string) http.Handler {
	t.Helper()
	return metaHandlerVia(t, d, proxies, forwarded.XForwardedFor)
}

// metaHandlerVia is metaHandler behind proxies that write header.
func metaHandlerVia(t *testing.T, d tiles.Describer, proxies []string, header string) http.Handler {
	t.Helper()
	var p *forwarded.Trusted
	if proxies != nil {
		var err error
		if p, err = forwarded.New(proxies); err != nil {
			t.Fatal(err)
		}
		if p, err = p.WithHeader(header); err != nil {
			t.Fatal(err)
		}
	}
	return tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, demoLayers()...), Store: &countingRenderer{}, Gate: &pricingGate{},
		Logger: discardLogger(), Describer: d, Proxies: p,
	})
}

func getJSON(t *testing.T, h http.Handler, r *http.Request, into any) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code == http.StatusOK {
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if err := json.Unmarshal(w.Body.Bytes(), into); err != nil {
			t.Fatalf("%s: %v; body %s", r.URL, err, w.Body)
		}
	}
	return w
}

func TestTileJSON(t *testing.T) {
	t.Parallel()
	d := &fakeDescriber{bounds: map[string][4]float64{
		"places":    {-10, 40, 20, 60},
		"districts": {-20, 30, 10, 50},
	}}
	h := metaHandler(t, d, nil)
	var doc tileJSONDoc
	r := httptest.NewRequest(http.MethodGet, "http://maps.example.org:8080/tiles/places.json", nil)
	if w := getJSON(t, h, r, &doc); w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if doc.TileJSON != "3.0.0" || doc.Name != "places" || doc.Scheme != "xyz" {
		t.Errorf("header fields: %+v", doc)
	}
	if want := []string{"http://maps.example.org:8080/tiles/places/{z}/{x}/{y}.mvt"}; !slices.Equal(doc.Tiles, want) {
		t.Errorf("tiles %q, want %q", doc.Tiles, want)
	}
	// maxzoom is the data's deepest zoom (16 by default), not the deepest
	// served (22): clients overzoom from there.
	if doc.MinZoom == nil || *doc.MinZoom != 0 || doc.MaxZoom == nil || *doc.MaxZoom != tiles.DefaultDataMaxZoom {
		t.Errorf("zoom range %v..%v, want 0..%d", doc.MinZoom, doc.MaxZoom, tiles.DefaultDataMaxZoom)
	}
	if !slices.Equal(doc.Bounds, []float64{-10, 40, 20, 60}) {
		t.Errorf("bounds %v", doc.Bounds)
	}
	// Centre of the bounds, at the zoom where 30° of longitude fill a view.
	if !slices.Equal(doc.Center, []float64{5, 50, 3}) {
		t.Errorf("center %v, want [5 50 3]", doc.Center)
	}
	if len(doc.VectorLayers) != 1 {
		t.Fatalf("vector_layers %+v", doc.VectorLayers)
	}
	vl := doc.VectorLayers[0]
	if vl.ID != "places" || vl.MinZoom != 0 || vl.MaxZoom != 16 || vl.ServedMaxZoom != 22 ||
		vl.GeometryKind != "point" || vl.Storage == nil || len(vl.Storage) != 0 {
		t.Errorf("vector layer %+v", vl)
	}
	// Every point feature carries its cluster's count too.
	wantFields := map[string]string{"name": "String", "kind": "String", "city": "String", "rank": "Number", "point_count": "Number"}
	if len(vl.Fields) != len(wantFields) {
		t.Errorf("fields %v, want %v", vl.Fields, wantFields)
	}
	for k, v := range wantFields {
		if vl.Fields[k] != v {
			t.Errorf("field %s: %q, want %q", k, vl.Fields[k], v)
		}
	}

	// Described once, then remembered.
	getJSON(t, h, httptest.NewRequest(http.MethodGet, "/tiles/places.json", nil), &doc)
	if n := d.calls.Load(); n != 1 {
		t.Errorf("Describe called %d times for two requests, want 1", n)
	}
}

func TestTileJSONComposite(t *testing.T) {
	t.Parallel()
	d := &fakeDescriber{bounds: map[string][4]float64{
		"places":    {-10, 40, 20, 60},
		"districts": {-20, 30, 10, 50},
	}}
	var doc tileJSONDoc
	w := getJSON(t, metaHandler(t, d, nil), httptest.NewRequest(http.MethodGet, "http://h/tiles/places,districts.json", nil), &doc)
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if doc.Tiles[0] != "http://h/tiles/places,districts/{z}/{x}/{y}.mvt" {
		t.Errorf("tiles %q", doc.Tiles)
	}
	// Served wherever one of them is (places from z0; districts join at
	// z4), with data down to z16.
	if *doc.MinZoom != 0 || *doc.MaxZoom != 16 {
		t.Errorf("zoom range %d..%d, want 0..16", *doc.MinZoom, *doc.MaxZoom)
	}
	if !slices.Equal(doc.Bounds, []float64{-20, 30, 20, 60}) {
		t.Errorf("bounds %v, want the union", doc.Bounds)
	}
	if len(doc.VectorLayers) != 2 || doc.VectorLayers[0].ID != "places" || doc.VectorLayers[1].ID != "districts" ||
		doc.VectorLayers[1].MinZoom != 4 {
		t.Fatalf("vector_layers %+v", doc.VectorLayers)
	}
	// point_count is a point layer's field only.
	if _, ok := doc.VectorLayers[0].Fields["point_count"]; !ok {
		t.Errorf("places' fields %v lack point_count", doc.VectorLayers[0].Fields)
	}
	if _, ok := doc.VectorLayers[1].Fields["point_count"]; ok {
		t.Errorf("districts' fields %v have point_count", doc.VectorLayers[1].Fields)
	}
	if doc.Center[2] < 0 || doc.Center[2] > 16 {
		t.Errorf("center zoom %v outside 0..16", doc.Center[2])
	}
}

// Every zoom a composite's TileJSON advertises is answered with a tile
// (an empty one where none of its layers is served: the gap between
// gapLayers' ranges), and the zoom past its maxzoom, which no layer
// serves, is a 422.
func TestTileJSONCompositeZoomsAreServed(t *testing.T) {
	t.Parallel()
	h := tileRouter(&tiles.Handler{Catalog: newCatalog(t, gapLayers()...), Store: &countingRenderer{}, Gate: &pricingGate{},
		Logger: discardLogger(), Describer: &fakeDescriber{}})
	var doc tileJSONDoc
	if w := getJSON(t, h, httptest.NewRequest(http.MethodGet, "http://h/tiles/low,high.json", nil), &doc); w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if *doc.MinZoom != 0 || *doc.MaxZoom != 14 {
		t.Fatalf("zoom range %d..%d, want 0..14", *doc.MinZoom, *doc.MaxZoom)
	}
	for z := *doc.MinZoom; z <= *doc.MaxZoom+1; z++ {
		path := "/tiles/low,high/" + strconv.Itoa(z) + "/0/0.mvt"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		want := []int{http.StatusOK, http.StatusNoContent}
		if z > *doc.MaxZoom {
			want = []int{http.StatusUnprocessableEntity}
		}
		if !slices.Contains(want, w.Code) {
			t.Errorf("GET %s: %d %s, want one of %v", path, w.Code, w.Body, want)
		}
	}
}

func TestTileJSONErrors(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{}, nil)
	for path, want := range map[string]int{
		"/tiles/nope.json":          http.StatusNotFound,
		"/tiles/places,places.json": http.StatusBadRequest,
		"/tiles/,places.json":       http.StatusBadRequest,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != want || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q, want %d problem", path, w.Code, w.Header().Get("Content-Type"), want)
		}
	}
}

// When the database cannot describe a layer, TileJSON still answers (with
// the world's bounds), and does not ask again for a while: TileJSON is
// unpriced, so a failing Describe must not run on every request.
func TestTileJSONDescribeFails(t *testing.T) {
	t.Parallel()
	d := &fakeDescriber{err: errors.New("database down")}
	h := metaHandler(t, d, nil)
	var doc tileJSONDoc
	for range 2 {
		if w := getJSON(t, h, httptest.NewRequest(http.MethodGet, "/tiles/places.json", nil), &doc); w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	if !slices.Equal(doc.Bounds, func() []float64 { w := tiles.WorldBounds(); return w[:] }()) || doc.VectorLayers[0].Fields["rank"] != "String" {
		t.Errorf("fallback: bounds %v, fields %v", doc.Bounds, doc.VectorLayers[0].Fields)
	}
	if n := d.calls.Load(); n != 1 {
		t.Errorf("Describe called %d times, want 1: a failure is remembered (backoff)", n)
	}
}

// Forwarded host and scheme shape the tile URL only from a trusted proxy.
func TestTileJSONForwarded(t *testing.T) {
	t.Parallel()
	req := func(remote string, hdr ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://internal:8080/tiles/places.json", nil)
		r.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	trusted := metaHandler(t, &fakeDescriber{}, []string{"10.0.0.0/8"})
	untrusting := metaHandler(t, &fakeDescriber{}, nil)
	viaForwarded := metaHandlerVia(t, &fakeDescriber{}, []string{"10.0.0.0/8"}, forwarded.Forwarded)
	for _, tc := range []struct {
		name string
		h    http.Handler
		r    *http.Request
		want string
	}{
		{"no proxy", trusted, req("203.0.113.5:1"), "http://internal:8080/"},
		{"X-Forwarded from a trusted proxy", trusted,
			req("10.1.2.3:1", "X-Forwarded-Host", "tiles.example.com", "X-Forwarded-Proto", "https"), "https://tiles.example.com/"},
		{"Forwarded from a trusted proxy", viaForwarded,
			req("10.1.2.3:1", "Forwarded", `proto=https;host="maps.example.org"`), "https://maps.example.org/"},
		{"a client's Forwarded behind proxies that write X-Forwarded-For", trusted,
			req("10.1.2.3:1", "Forwarded", `proto=https;host="evil.example"`), "http://internal:8080/"},
		{"X-Forwarded from an untrusted peer", trusted,
			req("203.0.113.5:1", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https"), "http://internal:8080/"},
		{"no trusted proxies configured", untrusting,
			req("10.1.2.3:1", "X-Forwarded-Host", "evil.example"), "http://internal:8080/"},
		{"forwarded host that is not a host", trusted,
			req("10.1.2.3:1", "X-Forwarded-Host", "evil.example/<script>"), "http://internal:8080/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc tileJSONDoc
			w := getJSON(t, tc.h, tc.r, &doc)
			if w.Code != http.StatusOK || len(doc.Tiles) != 1 || !strings.HasPrefix(doc.Tiles[0], tc.want+"tiles/") {
				t.Fatalf("%d tiles %q, want prefix %q", w.Code, doc.Tiles, tc.want)
			}
			// It varies with the headers the trusted proxies write, and
			// with none where no proxy is trusted.
			vary := strings.Join(w.Header().Values("Vary"), ",")
			switch tc.h {
			case trusted:
				if vary != "X-Forwarded-Host, X-Forwarded-Proto" {
					t.Errorf("Vary %q, want X-Forwarded-Host, X-Forwarded-Proto", vary)
				}
			case viaForwarded:
				if vary != "Forwarded" {
					t.Errorf("Vary %q, want Forwarded", vary)
				}
			default:
				if vary != "" {
					t.Errorf("Vary %q: with no proxy trusted, the document depends on no forwarding header", vary)
				}
			}
		})
	}
}

// ?key= travels into the tile URLs (map clients that cannot set headers),
// and such a document is private.
func TestTileJSONCarriesKey(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{}, nil)
	var doc tileJSONDoc
	w := getJSON(t, h, httptest.NewRequest(http.MethodGet, "http://h/tiles/places.json?key=a%26b%20c", nil), &doc)
	if doc.Tiles[0] != "http://h/tiles/places/{z}/{x}/{y}.mvt?key=a%26b+c" {
		t.Errorf("tiles %q", doc.Tiles)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "private, no-store" {
		t.Errorf("Cache-Control %q for a document holding a key", cc)
	}
	w = getJSON(t, h, httptest.NewRequest(http.MethodGet, "http://h/tiles/places.json", nil), &doc)
	if cc := w.Header().Get("Cache-Control"); !strings.HasPrefix(cc, "public") {
		t.Errorf("Cache-Control %q without a key", cc)
	}
}

func TestIndex(t *testing.T) {
	t.Parallel()
	d := &fakeDescriber{}
	h := metaHandler(t, d, nil)
	var doc struct {
		Layers []struct {
			Name       string   `json:"name"`
			MinZoom    int      `json:"minzoom"`
			MaxZoom    int      `json:"maxzoom"`
			Properties []string `json:"properties"`
			TileJSON   string   `json:"tilejson"`
			Tiles      string   `json:"tiles"`
		} `json:"layers"`
	}
	w := getJSON(t, h, httptest.NewRequest(http.MethodGet, "http://maps.example.org/tiles", nil), &doc)
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	var names []string
	for _, l := range doc.Layers {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"places", "districts", "geofences"}) {
		t.Fatalf("layers %v, want configuration order", names)
	}
	d0 := doc.Layers[1]
	if d0.MinZoom != 4 || d0.MaxZoom != 16 || !slices.Equal(d0.Properties, []string{"name", "city", "population"}) ||
		d0.TileJSON != "http://maps.example.org/tiles/districts.json" ||
		d0.Tiles != "http://maps.example.org/tiles/districts/{z}/{x}/{y}.mvt" {
		t.Errorf("districts entry %+v", d0)
	}
	if p := doc.Layers[0].Properties; !slices.Equal(p, []string{"name", "kind", "city", "rank", "point_count"}) {
		t.Errorf("places' properties %q, want its own and point_count, which every point feature carries", p)
	}
	if d.calls.Load() != 0 {
		t.Error("the catalog asked the database")
	}
}

// Concurrent first requests for a layer's TileJSON share one Describe,
// however late each arrives: one that joins the running Describe shares
// it, and one that comes after it ended, even one that looked for the
// layer's description just before it was kept, takes the kept one. The
// test releases Describe as soon as it runs, so some requests come
// during it and some after.
func TestTileJSONDescribeCoalesced(t *testing.T) {
	t.Parallel()
	d := &slowDescriber{release: make(chan struct{})}
	h := metaHandler(t, d, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tiles/places.json", nil))
			if w.Code != http.StatusOK {
				t.Errorf("%d %s", w.Code, w.Body)
			}
		})
	}
	for deadline := time.Now().Add(testenv.Patience); d.calls.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no request reached Describe within %v", testenv.Patience)
		}
	}
	close(d.release)
	wg.Wait()
	if n := d.calls.Load(); n != 1 {
		t.Fatalf("Describe ran %d times for 8 concurrent requests, want 1", n)
	}
}

type slowDescriber struct {
	release chan struct{}
	calls   atomic.Int32
}

func (s *slowDescriber) Describe(ctx context.Context, l *tiles.Layer) (tiles.LayerInfo, error) {
	s.calls.Add(1)
	<-s.release
	return tiles.LayerInfo{Bounds: tiles.WorldBounds(), Fields: map[string]string{}}, nil
}

// TileJSON's ETag is weak, which If-Match's strong comparison never
// matches: any tag is a 412 problem, "*" the document (RFC 9110 §13.1.1).
func TestTileJSONIfMatch(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{bounds: map[string][4]float64{"places": {-10, 40, 20, 60}}}, nil)
	var doc tileJSONDoc
	first := getJSON(t, h, httptest.NewRequest(http.MethodGet, "/tiles/places.json", nil), &doc)
	etag := first.Header().Get("ETag")
	if !strings.HasPrefix(etag, "W/") {
		t.Fatalf("ETag %q, want a weak one", etag)
	}
	for _, tc := range []struct {
		path, ifMatch string
		want          int
	}{
		{"/tiles/places.json", "*", http.StatusOK},
		{"/tiles/places.json", etag, http.StatusPreconditionFailed},
		{"/tiles/places.json", strings.TrimPrefix(etag, "W/"), http.StatusPreconditionFailed},
		{"/tiles", `"x"`, http.StatusPreconditionFailed},
		{"/tiles", "*", http.StatusOK},
		// A private document (a key in its URLs) has no ETag.
		{"/tiles/places.json?key=k", `"x"`, http.StatusPreconditionFailed},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.Header.Set("If-Match", tc.ifMatch)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s, If-Match %s: %d, want %d", tc.path, tc.ifMatch, w.Code, tc.want)
		}
		if tc.want != http.StatusOK && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s, If-Match %s: Content-Type %q, want a problem", tc.path, tc.ifMatch, w.Header().Get("Content-Type"))
		}
	}
}

// A key given twice in the query is a 400 on the documents too, as on the
// priced routes: which one the tile URLs should carry is the client's to
// say.
func TestTileJSONKeyGivenTwice(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{}, nil)
	for _, path := range []string{"/tiles/places.json?key=a&key=b", "/tiles?key=a&key=b", "/tiles/places,districts.json?key=a&k%65y=b"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" || strings.Contains(w.Body.String(), "a&key") {
			t.Errorf("%s: %d %s %s, want a 400 problem", path, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tiles/places.json?key=a", nil))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), ".mvt?key=a") {
		t.Errorf("one key: %d %s, want its tile URLs to carry it", w.Code, w.Body)
	}
}
