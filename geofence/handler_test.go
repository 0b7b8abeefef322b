package geofence

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/problem"
)

// fakeReader answers every query with canned features and records calls.
type fakeReader struct {
	mu     sync.Mutex
	calls  []string
	within []WithinQuery
	bbox   []BBoxQuery
	points [][]Point
}

func (f *fakeReader) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

var cannedFeature = Feature{ID: 7, Geometry: json.RawMessage(`{"type":"Point","coordinates":[1,2]}`), Properties: json.RawMessage(`{"name":"x"}`)}

func (f *fakeReader) Within(_ context.Context, q WithinQuery) ([]Feature, bool, error) {
	f.record("within")
	f.within = append(f.within, q)
	return []Feature{cannedFeature}, false, nil
}

func (f *fakeReader) BBox(_ context.Context, q BBoxQuery) ([]Feature, bool, error) {
	f.record("bbox")
	f.bbox = append(f.bbox, q)
	return nil, false, nil
}

func (f *fakeReader) Contains(context.Context, ContainsQuery) ([]Feature, bool, error) {
	f.record("contains")
	return []Feature{cannedFeature}, false, nil
}

func (f *fakeReader) Check(_ context.Context, q CheckQuery) ([][]int64, error) {
	f.record("check")
	pts := q.Points
	f.points = append(f.points, pts)
	out := make([][]int64, len(pts))
	for i := range out {
		out[i] = []int64{}
	}
	out[0] = []int64{3, 9}
	return out, nil
}

func (f *fakeReader) Fence(_ context.Context, id int64) (Feature, error) {
	f.record("fence")
	if id != 7 {
		return Feature{}, noFence(id)
	}
	return cannedFeature, nil
}

func (f *fakeReader) Fences(context.Context, FencesQuery) ([]Feature, bool, error) {
	f.record("fences")
	return []Feature{cannedFeature, cannedFeature}, false, nil
}

// fakeGate admits while budget lasts (in requests) and records demands.
type fakeGate struct {
	budget  int
	demands []Demand
}

func (g *fakeGate) AdmitGeofence(w http.ResponseWriter, r *http.Request, d Demand) bool {
	g.demands = append(g.demands, d)
	if g.budget <= 0 {
		problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 3})
		return false
	}
	g.budget--
	return true
}

const testAdminKey = "admin-key-0123456789"

func testLayers() []Layer {
	return []Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom", Properties: []string{"name", "kind"}}}
}

func newTestHandler(t *testing.T, reader Reader, gate Gate, writer Writer) http.Handler {
	t.Helper()
	h, err := NewHandler(Options{
		Layers: testLayers(), Limits: DefaultLimits(), AdminKeys: []string{testAdminKey},
		Reader: reader, Writer: writer, Gate: gate, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return testRouter(h)
}

func serve(h http.Handler, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemDoc decodes a problem response.
func problemDoc(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %q; body %s", ct, problem.ContentType, w.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestHandlerRefusesBadParametersBeforePricing(t *testing.T) {
	tests := []struct {
		name   string
		target string
		status int
		param  string
	}{
		{"within: no layer", "/geofence/within?lng=1&lat=2&radius=10", 400, "layer"},
		{"within: unknown layer", "/geofence/within?layer=nope&lng=1&lat=2&radius=10", 404, "layer"},
		{"within: no lng", "/geofence/within?layer=places&lat=2&radius=10", 400, "lng"},
		{"within: empty lat", "/geofence/within?layer=places&lng=1&lat=&radius=10", 400, "lat"},
		{"within: NaN radius", "/geofence/within?layer=places&lng=1&lat=2&radius=NaN", 400, "radius"},
		{"within: Inf lng", "/geofence/within?layer=places&lng=Inf&lat=2&radius=10", 400, "lng"},
		{"within: hex lat", "/geofence/within?layer=places&lng=1&lat=0x1p3&radius=10", 400, "lat"},
		{"within: plus lng", "/geofence/within?layer=places&lng=%2B1&lat=2&radius=10", 400, "lng"},
		{"within: radius too big", "/geofence/within?layer=places&lng=1&lat=2&radius=50001", 422, "radius"},
		{"within: negative radius", "/geofence/within?layer=places&lng=1&lat=2&radius=-5", 422, "radius"},
		{"within: lat out of range", "/geofence/within?layer=places&lng=1&lat=91&radius=10", 422, "lat"},
		{"within: lng out of range", "/geofence/within?layer=places&lng=-180.5&lat=2&radius=10", 422, "lng"},
		{"within: limit too big", "/geofence/within?layer=places&lng=1&lat=2&radius=10&limit=1001", 422, "limit"},
		{"within: empty limit", "/geofence/within?layer=places&lng=1&lat=2&radius=10&limit=", 400, "limit"},
		{"within: lng twice", "/geofence/within?layer=places&lng=1&lng=3&lat=2&radius=10", 400, "lng"},
		{"within: bad escape", "/geofence/within?layer=places&lng=%zz", 400, ""},
		{"bbox: no bbox", "/geofence/bbox?layer=places", 400, "bbox"},
		{"bbox: three numbers", "/geofence/bbox?layer=places&bbox=1,2,3", 400, "bbox"},
		{"bbox: too big", "/geofence/bbox?layer=places&bbox=0,0,20,20", 422, "bbox"},
		{"bbox: upside down", "/geofence/bbox?layer=places&bbox=0,1,1,0", 422, "bbox"},
		{"bbox: limit zero", "/geofence/bbox?layer=places&bbox=0,0,1,1&limit=0", 422, "limit"},
		{"contains: no lat", "/geofence/contains?lng=1", 400, "lat"},
		{"contains: lat range", "/geofence/contains?lng=1&lat=-90.01", 422, "lat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader, gate := &fakeReader{}, &fakeGate{budget: 100}
			w := serve(newTestHandler(t, reader, gate, nil), http.MethodGet, tt.target, "")
			if w.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tt.status, w.Body)
			}
			doc := problemDoc(t, w)
			if tt.param != "" && doc["param"] != tt.param {
				t.Errorf("param = %v, want %q", doc["param"], tt.param)
			}
			if len(gate.demands) != 0 || len(reader.calls) != 0 {
				t.Errorf("a refused request was priced (%v) or queried (%v)", gate.demands, reader.calls)
			}
		})
	}
}

func TestHandlerDemands(t *testing.T) {
	reader, gate := &fakeReader{}, &fakeGate{budget: 100}
	h := newTestHandler(t, reader, gate, nil)

	w := serve(h, http.MethodGet, "/geofence/within?layer=places&lng=13.4&lat=52.5&radius=5000", "")
	if w.Code != 200 || w.Header().Get("Content-Type") != ContentType {
		t.Fatalf("within: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var fc struct {
		Type     string
		Features []map[string]any
	}
	if err := json.Unmarshal(w.Body.Bytes(), &fc); err != nil || fc.Type != "FeatureCollection" || len(fc.Features) != 1 ||
		fc.Features[0]["type"] != "Feature" || fc.Features[0]["id"] != 7.0 {
		t.Fatalf("within body %s (%v)", w.Body, err)
	}
	if got := reader.within[0]; got.Layer.Name != "places" || got.Lng != 13.4 || got.Lat != 52.5 || got.Radius != 5000 || got.Limit != 100 {
		t.Errorf("within query = %+v", got)
	}

	serve(h, http.MethodGet, "/geofence/bbox?layer=places&bbox=175,-20,-175,-10&limit=20", "")
	if got := reader.bbox[0]; !got.Box.CrossesAntimeridian() || got.Limit != 20 {
		t.Errorf("bbox query = %+v", got)
	}
	serve(h, http.MethodGet, "/geofence/contains?lng=1&lat=2", "")
	w = serve(h, http.MethodPost, "/geofence/check", `{"points":[{"id":"a","lng":1,"lat":2},{"id":"b","lng":3,"lat":4}]}`)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("check: %d %s", w.Code, w.Body)
	}
	if got, want := strings.TrimSpace(w.Body.String()), `{"results":[{"id":"a","fences":[3,9]},{"id":"b","fences":[]}]}`; got != want {
		t.Errorf("check body = %s, want %s", got, want)
	}

	want := []Demand{
		{Kind: KindWithin, Layer: "places", RadiusM: 5000, Limit: 100, At: []orb.Point{{13.4, 52.5}}},
		{Kind: KindBBox, Layer: "places", Limit: 20},
		{Kind: KindContains, Points: 1, Limit: 100, At: []orb.Point{{1, 2}}},
		{Kind: KindCheck, Points: 2, At: []orb.Point{{1, 2}, {3, 4}}, PieceVertices: FencePieceVertices},
	}
	if len(gate.demands) != len(want) {
		t.Fatalf("demands = %+v", gate.demands)
	}
	for i, d := range gate.demands {
		b := d.Bound
		d.Bound = want[i].Bound
		if !reflect.DeepEqual(d, want[i]) {
			t.Errorf("demand %d = %+v, want %+v", i, d, want[i])
		}
		if d.Kind == KindBBox {
			// 175..185 unwrapped: 10° × 10° = 100 square degrees, the sum of both parts.
			if b.Min[0] != 175 || b.Max[0] != 185 || b.Min[1] != -20 || b.Max[1] != -10 {
				t.Errorf("bbox bound = %v, want [175,-20]..[185,-10]", b)
			}
		}
	}
}

func TestHandlerRefusedByGateRunsNoQuery(t *testing.T) {
	reader, gate := &fakeReader{}, &fakeGate{budget: 0}
	h := newTestHandler(t, reader, gate, nil)
	for _, c := range []struct{ method, target, body string }{
		{http.MethodGet, "/geofence/within?layer=places&lng=13.4&lat=52.5&radius=50000", ""},
		{http.MethodGet, "/geofence/bbox?layer=places&bbox=0,0,1,1", ""},
		{http.MethodGet, "/geofence/contains?lng=0&lat=0", ""},
		{http.MethodPost, "/geofence/check", `{"points":[{"id":"a","lng":1,"lat":2}]}`},
	} {
		w := serve(h, c.method, c.target, c.body)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "3" {
			t.Errorf("%s: %d %v", c.target, w.Code, w.Header())
		}
	}
	if len(reader.calls) != 0 {
		t.Errorf("queries ran after a refusal: %v", reader.calls)
	}
}

func TestHandlerCheckBody(t *testing.T) {
	reader, gate := &fakeReader{}, &fakeGate{budget: 100}
	h, err := NewHandler(Options{Layers: testLayers(), Limits: func() Limits {
		l := DefaultLimits()
		l.MaxBodyBytes = 1024
		l.MaxBatch = 3
		return l
	}(), Reader: reader, Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	r := testRouter(h)
	big := `{"points":[{"id":"` + strings.Repeat("v", 2000) + `","lng":0,"lat":0}]}`
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"too large", big, 413},
		{"malformed", `{"points":[`, 400},
		{"too many", `{"points":[{"id":"a","lng":0,"lat":0},{"id":"a","lng":0,"lat":0},{"id":"a","lng":0,"lat":0},{"id":"a","lng":0,"lat":0}]}`, 422},
	} {
		w := serve(r, http.MethodPost, "/geofence/check", c.body)
		if w.Code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, w.Code, c.status, w.Body)
		}
		problemDoc(t, w)
	}
	if w := serve(r, http.MethodGet, "/geofence/check", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /geofence/check: %d", w.Code)
	}
	if len(gate.demands) != 0 || len(reader.calls) != 0 {
		t.Errorf("refused bodies were priced or queried: %v %v", gate.demands, reader.calls)
	}
}

func TestAdminNeedsAKey(t *testing.T) {
	reader, gate := &fakeReader{}, &fakeGate{budget: 100}
	h := newTestHandler(t, reader, gate, nil)
	for _, hdr := range [][]string{
		nil,
		{"X-API-Key", "wrong-key-0123456789"},
		{"X-API-Key", testAdminKey[:len(testAdminKey)-1]},
		{"Authorization", "Basic " + testAdminKey},
		{"X-API-Key", testAdminKey + "x"},
	} {
		for _, c := range []struct{ method, target string }{
			{http.MethodGet, "/geofences"}, {http.MethodGet, "/geofences/7"}, {http.MethodPost, "/geofences"},
			{http.MethodPut, "/geofences/7"}, {http.MethodDelete, "/geofences/7"},
		} {
			w := serve(h, c.method, c.target, "", hdr...)
			if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with %v: %d", c.method, c.target, hdr, w.Code)
			}
		}
	}
	if len(reader.calls) != 0 {
		t.Errorf("unauthorised admin calls queried: %v", reader.calls)
	}
	// The key is accepted from either header; admin calls are never priced.
	for _, hdr := range [][]string{{"X-API-Key", testAdminKey}, {"Authorization", "Bearer " + testAdminKey}, {"Authorization", "bearer  " + testAdminKey}} {
		if w := serve(h, http.MethodGet, "/geofences/7", "", hdr...); w.Code != 200 || w.Header().Get("Content-Type") != ContentType {
			t.Errorf("GET /geofences/7 with %v: %d %s", hdr, w.Code, w.Body)
		}
	}
	if w := serve(h, http.MethodGet, "/geofences/8", "", "X-API-Key", testAdminKey); w.Code != 404 {
		t.Errorf("GET /geofences/8: %d", w.Code)
	}
	// Ids past int64 name no fence; an after past int64 is out of range.
	if w := serve(h, http.MethodGet, "/geofences/99999999999999999999", "", "X-API-Key", testAdminKey); w.Code != 404 {
		t.Errorf("GET /geofences/99999999999999999999: %d", w.Code)
	}
	if w := serve(h, http.MethodGet, "/geofences?after=99999999999999999999", "", "X-API-Key", testAdminKey); w.Code != 422 {
		t.Errorf("GET /geofences?after=99999999999999999999: %d", w.Code)
	}
	w := serve(h, http.MethodGet, "/geofences?limit=2", "", "X-API-Key", testAdminKey)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"next":"/geofence/fences?after=7\u0026limit=2"`) {
		t.Errorf("GET /geofences?limit=2: %d %s", w.Code, w.Body)
	}
	if len(gate.demands) != 0 {
		t.Errorf("admin calls were priced: %v", gate.demands)
	}
}

// TestListFencesAfterIsANumber: after, like every number of the API, is
// a 400 naming it when it is empty or not a plain integer — not the first
// page, as if it had not been given.
func TestListFencesAfterIsANumber(t *testing.T) {
	reader := &fakeReader{}
	h := newTestHandler(t, reader, &fakeGate{budget: 100}, nil)
	for _, q := range []string{"after=", "after=%201", "after=1%20", "after=-1", "after=1.0", "after=%2B1", "after=0x1"} {
		w := serve(h, http.MethodGet, "/geofence/fences?"+q, "", "X-API-Key", testAdminKey)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"param":"after"`) {
			t.Errorf("GET /geofence/fences?%s: %d %s, want a 400 naming after", q, w.Code, w.Body)
		}
	}
	if len(reader.calls) != 0 {
		t.Errorf("refused lists were queried: %v", reader.calls)
	}
	for _, q := range []string{"after=0", "after=7", ""} {
		if w := serve(h, http.MethodGet, "/geofence/fences?"+q, "", "X-API-Key", testAdminKey); w.Code != http.StatusOK {
			t.Errorf("GET /geofence/fences?%s: %d %s", q, w.Code, w.Body)
		}
	}
}

// TestListFencesHonoursConditions: GET /geofence/fences is a fence route
// like the others, so a malformed If-Match or If-None-Match is a 400
// naming it. A well-formed one is evaluated against the collection of
// fences, which has no ETag, as a POST's is: If-Match holds only as "*"
// (else 412), and If-None-Match "*" never does (a GET: 304, no body). None
// of the refused lists is queried.
func TestListFencesHonoursConditions(t *testing.T) {
	for _, c := range []struct {
		name, header, value string
		status              int
	}{
		{"malformed If-Match", "If-Match", "41", http.StatusBadRequest},
		{"malformed If-None-Match", "If-None-Match", "41", http.StatusBadRequest},
		{"any among tags", "If-Match", `*, "1"`, http.StatusBadRequest},
		{"If-Match a tag", "If-Match", `"7"`, http.StatusPreconditionFailed},
		{"If-None-Match any", "If-None-Match", "*", http.StatusNotModified},
		{"If-Match any", "If-Match", "*", http.StatusOK},
		{"If-None-Match a tag", "If-None-Match", `"7"`, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			reader := &fakeReader{}
			h := newTestHandler(t, reader, &fakeGate{budget: 100}, nil)
			w := serve(h, http.MethodGet, FencesPath, "", "X-API-Key", testAdminKey, c.header, c.value)
			if w.Code != c.status {
				t.Fatalf("GET %s with %s: %s: %d %s, want %d", FencesPath, c.header, c.value, w.Code, w.Body, c.status)
			}
			switch c.status {
			case http.StatusOK:
				if len(reader.calls) != 1 {
					t.Errorf("an answered list made queries %v, want one", reader.calls)
				}
				return
			case http.StatusNotModified:
				if w.Body.Len() != 0 {
					t.Errorf("304 with a body: %q", w.Body)
				}
			default:
				if !strings.Contains(w.Body.String(), `"param":"`+c.header+`"`) {
					t.Errorf("%d %s does not name %s", w.Code, w.Body, c.header)
				}
			}
			if len(reader.calls) != 0 {
				t.Errorf("a refused list was queried: %v", reader.calls)
			}
		})
	}
}

// Without a writer, fence writes are a 404 problem: the server never
// takes them, so it is not a 503, which would tell the client to retry.
func TestAdminWritesWithoutWriterAre404(t *testing.T) {
	h := newTestHandler(t, &fakeReader{}, &fakeGate{budget: 100}, nil)
	for _, c := range []struct{ method, target string }{
		{http.MethodPost, "/geofences"}, {http.MethodPut, "/geofences/7"}, {http.MethodDelete, "/geofences/7"},
	} {
		w := serve(h, c.method, c.target, `{}`, "X-API-Key", testAdminKey)
		if w.Code != http.StatusNotFound || w.Header().Get("Content-Type") != problem.ContentType ||
			w.Header().Get("Retry-After") != "" || !strings.Contains(w.Body.String(), "fence admin not configured") {
			t.Errorf("%s %s: %d %v %s", c.method, c.target, w.Code, w.Header(), w.Body)
		}
	}
}

func TestNewHandlerValidates(t *testing.T) {
	base := Options{Layers: testLayers(), Limits: DefaultLimits(), Reader: &fakeReader{}, Gate: &fakeGate{}}
	for name, mutate := range map[string]func(*Options){
		"short admin key": func(o *Options) { o.AdminKeys = []string{"short"} },
		"bad layer name":  func(o *Options) { o.Layers = []Layer{{Name: "a b", Table: "t", GeometryColumn: "g"}} },
		"duplicate layer": func(o *Options) { o.Layers = append(testLayers(), testLayers()...) },
		"reserved property": func(o *Options) {
			o.Layers = []Layer{{Name: "a", Table: "t", GeometryColumn: "g", Properties: []string{"distance_m"}}}
		},
		"no radius bound":     func(o *Options) { o.Limits.MaxRadius = 0 },
		"default over max":    func(o *Options) { o.Limits.DefaultLimit = o.Limits.MaxLimit + 1 },
		"no reader":           func(o *Options) { o.Reader = nil },
		"no gate":             func(o *Options) { o.Gate = nil },
		"tiny body limit":     func(o *Options) { o.Limits.MaxBodyBytes = 10 },
		"bbox area unbounded": func(o *Options) { o.Limits.MaxBBoxArea = 1e9 },
	} {
		o := base
		mutate(&o)
		if _, err := NewHandler(o); err == nil {
			t.Errorf("%s: NewHandler accepted it", name)
		}
	}
	if _, err := NewHandler(base); err != nil {
		t.Errorf("base options: %v", err)
	}
}

// TestUnknownLayerNamesWhatWasSent: the 404 of an unknown ?layer= names
// the value sent. Bytes that are not UTF-8 show as U+FFFD, as they do
// everywhere else in a problem document; dropped, ?layer=%FF read as
// `unknown layer ""`, a 404 that looks like an empty parameter (itself a
// 400, "layer is empty").
func TestUnknownLayerNamesWhatWasSent(t *testing.T) {
	c, err := NewCatalog([]Layer{{Name: "zones", Table: "zones", GeometryColumn: "geom", IDColumn: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, sent, want string }{
		{"invalid byte", "\xff", "unknown layer \"\uFFFD\""},
		{"invalid byte inside", "zo\xffnes", "unknown layer \"zo\uFFFDnes\""},
		{"plain", "roads", `unknown layer "roads"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Resolve(tc.sent)
			var p *problem.Error
			if !errors.As(err, &p) || p.Code != problem.NotFound {
				t.Fatalf("Resolve(%q): %v, want a not-found problem", tc.sent, err)
			}
			if p.Detail != tc.want {
				t.Errorf("Resolve(%q): detail %q, want %q", tc.sent, p.Detail, tc.want)
			}
		})
	}
}

// TestEmptyLayerIsMalformed: ?layer= sent empty is a 400 that says it is
// empty — not "required", which misleads on contains and check, where the
// parameter is optional and leaving it out is the way to ask the fences.
func TestEmptyLayerIsMalformed(t *testing.T) {
	c, err := NewCatalog([]Layer{{Name: "zones", Table: "zones", GeometryColumn: "geom", IDColumn: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Resolve("")
	var p *problem.Error
	if !errors.As(err, &p) || p.Code != problem.Invalid || p.Param != "layer" {
		t.Fatalf("Resolve(\"\"): %v, want a malformed layer", err)
	}
	if want := "layer is empty; expected the name of a layer"; p.Detail != want {
		t.Errorf("Resolve(\"\"): detail %q, want %q", p.Detail, want)
	}
}

func TestLayerSQLQuotesIdentifiers(t *testing.T) {
	c, err := NewCatalog([]Layer{{Name: "odd", Table: `my schema.we"ird`, GeometryColumn: "the geom", IDColumn: "Id", Properties: []string{`na"me`}}})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Layer("odd")
	for _, sql := range []string{l.WithinSQL(), l.BBoxSQL()} {
		for _, want := range []string{`"my schema"."we""ird"`, `t."the geom"`, `t."Id"`, `t."na""me" AS p0`, `n.p0 AS "na""me"`} {
			if !strings.Contains(sql, want) {
				t.Errorf("query lacks %s:\n%s", want, sql)
			}
		}
		if strings.Contains(sql, "{{") {
			t.Errorf("unrendered template:\n%s", sql)
		}
	}
}

// okWriter accepts every write and fails deletes of id 404.
type okWriter struct{}

func (okWriter) CreateFence(_ context.Context, in FenceInput) (Feature, error) {
	return Feature{ID: 1}, nil
}

func (okWriter) ReplaceFence(_ context.Context, id int64, in FenceInput, _ Preconditions) (Feature, error) {
	return Feature{ID: id}, nil
}

func (okWriter) DeleteFence(_ context.Context, id int64, _ Preconditions) error {
	if id == 404 {
		return problem.Missing("id", "no fence %d", id)
	}
	return nil
}

// Every successful fence write tells OnWrite (which drops cached fence
// tiles); a failed one does not.
func TestFenceWritesNotify(t *testing.T) {
	r, writes := countedWrites(t)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	for _, c := range []struct {
		method, target, body string
		status               int
	}{
		{http.MethodPost, "/geofences", fence, http.StatusCreated},
		{http.MethodPut, "/geofences/3", fence, http.StatusOK},
		{http.MethodDelete, "/geofences/3", "", http.StatusNoContent},
		{http.MethodDelete, "/geofences/404", "", http.StatusNotFound},
	} {
		if w := serve(r, c.method, c.target, c.body, "X-API-Key", testAdminKey); w.Code != c.status {
			t.Fatalf("%s %s: %d %s", c.method, c.target, w.Code, w.Body)
		}
	}
	if *writes != 3 {
		t.Fatalf("OnWrite ran %d times, want 3 (not for the failed delete)", *writes)
	}
}

// countedWrites is a router of a handler whose writes okWriter accepts,
// and the count of the writes it made (OnWrite).
func countedWrites(t *testing.T) (http.Handler, *int) {
	t.Helper()
	writes := new(int)
	h, err := NewHandler(Options{
		Layers: testLayers(), Limits: DefaultLimits(), AdminKeys: []string{testAdminKey},
		Reader: &fakeReader{}, Writer: okWriter{}, Gate: &fakeGate{budget: 100}, Logger: slog.New(slog.DiscardHandler),
		OnWrite: func() { *writes++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	return testRouter(h), writes
}

// heldWriter holds every creation until release is closed (or its
// request ends), counting the most it held at once.
type heldWriter struct {
	okWriter
	started chan struct{}
	release chan struct{}
	mu      *sync.Mutex
	now     *int
	most    *int
}

func (w heldWriter) CreateFence(ctx context.Context, in FenceInput) (Feature, error) {
	w.mu.Lock()
	*w.now++
	*w.most = max(*w.most, *w.now)
	w.mu.Unlock()
	defer func() { w.mu.Lock(); *w.now--; w.mu.Unlock() }()
	select {
	case w.started <- struct{}{}:
	default:
	}
	select {
	case <-w.release:
		return Feature{ID: 1}, nil
	case <-ctx.Done():
		return Feature{}, ctx.Err()
	}
}

// At most MaxFenceWrites fence writes are parsed and written at once (a
// big fence body decodes into many times its size): one more waits for a
// turn, and answers 503 with Retry-After when its request ends first; a
// turn given back serves the next.
func TestFenceWritesTakeTurns(t *testing.T) {
	w := heldWriter{started: make(chan struct{}, MaxFenceWrites), release: make(chan struct{}), mu: &sync.Mutex{}, now: new(int), most: new(int)}
	h := newTestHandler(t, &fakeReader{}, &fakeGate{budget: 100}, w)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	post := func(ctx context.Context) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/geofences", strings.NewReader(fence))
		r.Header.Set("X-API-Key", testAdminKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	var held sync.WaitGroup
	for range MaxFenceWrites {
		held.Go(func() {
			if rec := post(t.Context()); rec.Code != http.StatusCreated {
				t.Errorf("a held write: %d %s", rec.Code, rec.Body)
			}
		})
		<-w.started
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if rec := post(ctx); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("a write while %d are under way, until its request ends: %d %q %s", MaxFenceWrites, rec.Code,
			rec.Header().Get("Content-Type"), rec.Body)
	}
	close(w.release)
	held.Wait()
	if *w.most != MaxFenceWrites {
		t.Errorf("the writer held %d writes at once, want %d", *w.most, MaxFenceWrites)
	}
	if rec := post(t.Context()); rec.Code != http.StatusCreated {
		t.Errorf("a write after the others ended: %d %s", rec.Code, rec.Body)
	}
}

// A fence write whose body is slow to arrive holds no turn while it
// arrives: with MaxFenceWrites uploads stalled mid-body, another write is
// served at once. Taken before the body was read, the turns went to the
// stalled uploads, and every other write waited for the server's read
// timeout to end them. A stalled upload cut off is a 400, as before.
func TestStalledUploadsHoldNoTurn(t *testing.T) {
	h := newTestHandler(t, &fakeReader{}, &fakeGate{budget: 100}, okWriter{})
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	var (
		stalled sync.WaitGroup
		pipes   []*io.PipeWriter
	)
	defer func() {
		for _, pw := range pipes {
			pw.CloseWithError(io.ErrUnexpectedEOF)
		}
		stalled.Wait()
	}()
	for range MaxFenceWrites {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/geofences", pr)
		r.Header.Set("X-API-Key", testAdminKey)
		stalled.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("an upload cut off mid-body: %d %s, want a 400 problem", rec.Code, rec.Body)
			}
		})
		if _, err := pw.Write([]byte(fence[:20])); err != nil { // returns once the handler read it
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/geofences", strings.NewReader(fence))
	r.Header.Set("X-API-Key", testAdminKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusCreated {
		t.Errorf("a write beside %d stalled uploads: %d %s, want 201", MaxFenceWrites, rec.Code, rec.Body)
	}
}

// timeoutReader yields its bytes, then the error of a read past the
// server's read timeout.
type timeoutReader struct{ r io.Reader }

func (t *timeoutReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		return n, timeoutErr{}
	}
	return n, err
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// A fence body whose reading failed is answered at once, without a turn:
// with every turn taken, a body that timed out is a 408 and one cut short a
// 400 — not a 503 after waiting for a turn its ended request could not
// get (TestEndToEndBodyNotSentInTimeIs408 got one now and then: the
// request's context ends with its connection, and the wait for a turn
// took either).
func TestUnreadFenceBodyNeedsNoTurn(t *testing.T) {
	w := heldWriter{started: make(chan struct{}, MaxFenceWrites), release: make(chan struct{}), mu: &sync.Mutex{}, now: new(int), most: new(int)}
	h := newTestHandler(t, &fakeReader{}, &fakeGate{budget: 100}, w)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	var held sync.WaitGroup
	defer held.Wait()
	defer close(w.release)
	for range MaxFenceWrites {
		held.Go(func() {
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/geofences", strings.NewReader(fence))
			r.Header.Set("X-API-Key", testAdminKey)
			h.ServeHTTP(httptest.NewRecorder(), r)
		})
		<-w.started
	}
	for _, tc := range []struct {
		name   string
		body   io.Reader
		status int
		detail string
	}{
		{"timed out", &timeoutReader{strings.NewReader(fence[:30])}, http.StatusRequestTimeout, "did not arrive in time"},
		{"cut short", io.MultiReader(strings.NewReader(fence[:30]), iotest.ErrReader(io.ErrUnexpectedEOF)), http.StatusBadRequest, "malformed JSON at byte 30: the body ends before its JSON does"},
		{"a syntax error, then cut", io.MultiReader(strings.NewReader(`{"type":]`), iotest.ErrReader(io.ErrUnexpectedEOF)), http.StatusBadRequest, "malformed JSON at byte 9"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/geofences", tc.body)
		r.Header.Set("X-API-Key", testAdminKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		cancel()
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.detail) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, rec.Code, rec.Body, tc.status, tc.detail)
		}
	}
}

// What a fence write's head settles does not wait for a turn: with every
// turn taken, a body over max_fence_bytes by its Content-Length is a 413,
// one in a content coding a 415, a malformed If-Match or a query parameter
// the write does not read a 400, at once — not a 503 when the request
// ends while it waits.
func TestFenceWriteHeadErrorsDoNotWaitForATurn(t *testing.T) {
	w := heldWriter{started: make(chan struct{}, MaxFenceWrites), release: make(chan struct{}), mu: &sync.Mutex{}, now: new(int), most: new(int)}
	h := newTestHandler(t, &fakeReader{}, &fakeGate{budget: 100}, w)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	send := func(ctx context.Context, method, target string, length int64, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(fence))
		if length > 0 {
			r.ContentLength = length
		}
		r.Header.Set("X-API-Key", testAdminKey)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	var held sync.WaitGroup
	for range MaxFenceWrites {
		held.Go(func() {
			if rec := send(t.Context(), http.MethodPost, "/geofences", 0); rec.Code != http.StatusCreated {
				t.Errorf("a held write: %d %s", rec.Code, rec.Body)
			}
		})
		<-w.started
	}
	defer func() { close(w.release); held.Wait() }()
	over := DefaultLimits().MaxFenceBytes + 1
	for _, c := range []struct {
		name   string
		query  string
		length int64
		hdr    []string
		status int
		param  string
	}{
		{"over the limit", "", over, nil, http.StatusRequestEntityTooLarge, "body"},
		{"gzip", "", 0, []string{"Content-Encoding", "gzip"}, http.StatusUnsupportedMediaType, "Content-Encoding"},
		{"malformed If-Match", "", 0, []string{"If-Match", "7"}, http.StatusBadRequest, "If-Match"},
		{"a parameter it does not read", "?dryrun=1", 0, nil, http.StatusBadRequest, "dryrun"},
	} {
		for _, m := range []struct{ method, target string }{{http.MethodPost, "/geofence/fences"}, {http.MethodPut, "/geofence/fences/7"}} {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			start := time.Now()
			rec := send(ctx, m.method, m.target+c.query, c.length, c.hdr...)
			took := time.Since(start)
			cancel()
			// A request that waited for a turn would end at the context's
			// 5 s with a 503: the status says "at once"; took only names it.
			if rec.Code != c.status {
				t.Errorf("%s %s, %s, every turn taken: %d after %s %s; want %d at once", m.method, m.target, c.name, rec.Code, took, rec.Body, c.status)
				continue
			}
			if doc := problemDoc(t, rec); doc["param"] != c.param {
				t.Errorf("%s %s, %s: problem %v, want one naming %s", m.method, m.target, c.name, doc, c.param)
			}
		}
	}
}

// A POST's malformed If-Match is a 400 naming it before its body is read,
// as on a PUT: a bad body does not hide it.
func TestCreateFenceMalformedIfMatchBeforeBody(t *testing.T) {
	r, writes := countedWrites(t)
	for _, c := range []struct{ method, target string }{{http.MethodPost, "/geofence/fences"}, {http.MethodPut, "/geofence/fences/7"}} {
		w := serve(r, c.method, c.target, `{"type":"Feature",`, "X-API-Key", testAdminKey, "If-Match", `"7`)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("%s %s: %d %s, want 400", c.method, c.target, w.Code, w.Body)
		}
		if doc := problemDoc(t, w); doc["param"] != "If-Match" {
			t.Errorf("%s %s with a malformed If-Match and body: problem %v, want one naming If-Match", c.method, c.target, doc)
		}
	}
	if *writes != 0 {
		t.Errorf("%d writes, want none", *writes)
	}
}

// A fence write with a null in a position (a JavaScript client's NaN) is a
// 400 problem naming the position, and writes nothing.
func TestFenceWriteWithNullPositionIs400(t *testing.T) {
	r, writes := countedWrites(t)
	fence := `{"type":"Feature","properties":{"name":"f"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[null,1],[0,1],[0,0]]]}}`
	for _, c := range []struct{ method, target string }{{http.MethodPost, "/geofence/fences"}, {http.MethodPut, "/geofence/fences/7"}} {
		w := serve(r, c.method, c.target, fence, "X-API-Key", testAdminKey)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("%s %s: %d %s, want 400", c.method, c.target, w.Code, w.Body)
		}
		if doc := problemDoc(t, w); doc["param"] != "geometry" || !strings.Contains(fmt.Sprint(doc["detail"]), "polygon 0 ring 0 position 2 holds null") {
			t.Errorf("%s %s: problem %v, want one naming the position", c.method, c.target, doc)
		}
	}
	if *writes != 0 {
		t.Errorf("%d writes, want none", *writes)
	}
}

// TestCheckBodyWithAContentCoding: a JSON body sent with a content coding
// (gzip, deflate…) is a 415 naming it, with Accept-Encoding saying what
// would be read, on every route that reads a JSON body: never parsed as
// if it were plain, never priced, never queried or written.
func TestCheckBodyWithAContentCoding(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`))
	_ = zw.Close()
	reader, gate := &fakeReader{}, &fakeGate{budget: 100}
	writes := 0
	r := writingRouter(t, reader, gate, &writes)
	fence := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]},"properties":{"name":"x"}}`
	for _, c := range []struct{ method, target, body, coding string }{
		{http.MethodPost, "/geofence/check", gz.String(), "gzip"},
		{http.MethodPost, "/geofence/check", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`, "gzip"},
		{http.MethodPost, "/geofence/check?layer=places", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`, "deflate"},
		{http.MethodPost, "/geofence/check", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`, "identity, br"},
		{http.MethodPost, "/geofence/fences", fence, "gzip"},
		{http.MethodPost, "/geofences", fence, "x-custom"},
		{http.MethodPut, "/geofence/fences/7", fence, "GZIP"},
	} {
		w := serve(r, c.method, c.target, c.body, "Content-Encoding", c.coding, "X-API-Key", testAdminKey)
		if w.Code != http.StatusUnsupportedMediaType {
			t.Errorf("%s %s with Content-Encoding %q: %d %s, want 415", c.method, c.target, c.coding, w.Code, w.Body)
			continue
		}
		doc := problemDoc(t, w)
		if doc["param"] != "Content-Encoding" || !strings.Contains(fmt.Sprint(doc["detail"]), "content coding") {
			t.Errorf("%s %s: problem %v, want one naming the Content-Encoding", c.method, c.target, doc)
		}
		if got := w.Header().Get("Accept-Encoding"); got != "identity" {
			t.Errorf("%s %s: Accept-Encoding %q, want identity", c.method, c.target, got)
		}
	}
	if len(gate.demands) != 0 || len(reader.calls) != 0 || writes != 0 {
		t.Errorf("coded bodies were priced, queried or written: %v %v %d", gate.demands, reader.calls, writes)
	}
	// identity is no coding: the body is read as it is.
	if w := serve(r, http.MethodPost, "/geofence/check", `{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`, "Content-Encoding", "identity"); w.Code != http.StatusOK {
		t.Errorf("Content-Encoding identity: %d %s", w.Code, w.Body)
	}
}

// TestFenceWritesHaveNoDryRun: a fence write is not priced, so it has no
// price preview; one sent with ?dry_run=1 (or true) — a caller who meant to
// try it — is a 400 that writes nothing, as is a dry_run that cannot be
// read. dry_run=0 or false is the write itself.
func TestFenceWritesHaveNoDryRun(t *testing.T) {
	r, writes := countedWrites(t)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	for _, q := range []string{"?dry_run=1", "?dry_run=true", "?dry_run=yes", "?dry_run", "?dry_run=0&dry_run=1", "?dry_run=1;x"} {
		for _, c := range []struct{ method, target, body string }{
			{http.MethodPost, "/geofences", fence},
			{http.MethodPut, "/geofences/3", fence},
			{http.MethodDelete, "/geofences/3", ""},
		} {
			w := serve(r, c.method, c.target+q, c.body, "X-API-Key", testAdminKey)
			if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s %s%s: %d %s, want a 400 problem", c.method, c.target, q, w.Code, w.Body)
			}
		}
	}
	if *writes != 0 {
		t.Fatalf("%d writes made by requests with a dry_run, want none", *writes)
	}
	for _, q := range []string{"", "?dry_run=0", "?dry_run=false"} {
		if w := serve(r, http.MethodDelete, "/geofences/3"+q, "", "X-API-Key", testAdminKey); w.Code != http.StatusNoContent {
			t.Errorf("DELETE /geofences/3%s: %d %s, want the delete (204)", q, w.Code, w.Body)
		}
	}
	if *writes != 3 {
		t.Fatalf("%d writes made without a dry run, want 3", *writes)
	}
}

// authGate is a fakeGate that also refuses the key "bad" from the
// request's head (Authenticator), counting the times it was asked.
type authGate struct {
	fakeGate
	asked int
}

func (g *authGate) Authenticate(w http.ResponseWriter, r *http.Request, kind Kind) bool {
	g.asked++
	if kind != KindCheck {
		panic("authenticated a " + string(kind))
	}
	if r.Header.Get("X-API-Key") != "bad" {
		return true
	}
	problem.Write(w, r, &problem.Error{Code: problem.Unauthorized, Detail: "unknown key"})
	return false
}

// readSpy is a body that records whether it was read.
type readSpy struct {
	io.Reader
	read bool
}

func (s *readSpy) Read(p []byte) (int, error) { s.read = true; return s.Reader.Read(p) }

// A gate that can authenticate refuses a check's bad key before its body
// is read or the check priced; a query that does not parse, a repeated or
// unknown ?layer= and a dry_run that is not a boolean are refused before
// that (bad input costs nothing), and a good key goes on as before.
func TestCheckAuthenticatesBeforeItsBody(t *testing.T) {
	t.Parallel()
	const body = `{"points":[{"id":"a","lng":13.4,"lat":52.5}]}`
	for _, tc := range []struct {
		name, target, key string
		status, asked     int
		read              bool
	}{
		{"bad key", "/geofence/check", "bad", http.StatusUnauthorized, 1, false},
		{"bad key and query", "/geofence/check?limit=%zz", "bad", http.StatusBadRequest, 0, false},
		{"bad key and layer twice", "/geofence/check?layer=places&layer=places", "bad", http.StatusBadRequest, 0, false},
		{"bad key and unknown layer", "/geofence/check?layer=nope", "bad", http.StatusNotFound, 0, false},
		{"bad key and dry_run", "/geofence/check?dry_run=maybe", "bad", http.StatusBadRequest, 0, false},
		{"good key", "/geofence/check", "good", http.StatusOK, 1, true},
		{"no key", "/geofence/check", "", http.StatusOK, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &authGate{fakeGate: fakeGate{budget: 1}}
			h := newTestHandler(t, &fakeReader{}, gate, nil)
			spy := &readSpy{Reader: strings.NewReader(body)}
			r := httptest.NewRequest(http.MethodPost, tc.target, spy)
			if tc.key != "" {
				r.Header.Set("X-API-Key", tc.key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.status)
			}
			if gate.asked != tc.asked || spy.read != tc.read {
				t.Errorf("authenticated %d times, body read %v; want %d, %v", gate.asked, spy.read, tc.asked, tc.read)
			}
			if priced := len(gate.demands) > 0; priced != (tc.status == http.StatusOK) {
				t.Errorf("priced %v with answer %d", priced, w.Code)
			}
		})
	}
}

// writingRouter routes a handler of the test layers reading from reader,
// priced by gate, whose fence writes succeed and count in writes.
func writingRouter(t *testing.T, reader Reader, gate Gate, writes *int) http.Handler {
	t.Helper()
	h, err := NewHandler(Options{
		Layers: testLayers(), Limits: DefaultLimits(), AdminKeys: []string{testAdminKey},
		Reader: reader, Writer: okWriter{}, Gate: gate, Logger: slog.New(slog.DiscardHandler),
		OnWrite: func() { *writes++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	return testRouter(h)
}

// TestHandlerRefusesParametersItDoesNotRead: a query parameter a request
// does not read is a 400 naming it, before pricing — a misspelt optional
// one (layr=, limt=) would otherwise leave its default in place, and a
// contains would answer from the fences instead of the layer asked for.
// Every parameter a request reads (its own, dry_run and ?key= on a priced
// one) still passes.
func TestHandlerRefusesParametersItDoesNotRead(t *testing.T) {
	check := `{"points":[{"id":"a","lng":1,"lat":2}]}`
	long := strings.Repeat("x", 100)
	for _, c := range []struct {
		method, target, body string
		status               int
		param                string
	}{
		{"GET", "/geofence/within?layer=places&lng=1&lat=2&radius=10&limt=5", "", 400, "limt"},
		{"GET", "/geofence/bbox?layer=places&bbox=0,0,1,1&radius=10", "", 400, "radius"},
		{"GET", "/geofence/contains?lng=1&lat=2&layr=countries", "", 400, "layr"},
		{"GET", "/geofence/contains?lng=1&lat=2&=1", "", 400, ""},
		{"GET", "/geofence/contains?lng=1&lat=2&" + long + "=1", "", 400, long[:maxShownParam] + "…"},
		{"POST", "/geofence/check?lyr=places", check, 400, "lyr"},
		{"GET", "/geofence/fences?limit=2&afer=7", "", 400, "afer"},
		{"GET", "/geofence/within?layer=places&lng=1&lat=2&radius=10&limit=5&dry_run=0&key=k", "", 200, ""},
		{"GET", "/geofence/bbox?layer=places&bbox=0,0,1,1&limit=5&dry_run=0&key=k", "", 200, ""},
		{"GET", "/geofence/contains?lng=1&lat=2&limit=5&dry_run=0&key=k", "", 200, ""},
		{"POST", "/geofence/check?dry_run=0&key=k", check, 200, ""},
		{"GET", "/geofence/fences?limit=2&after=0", "", 200, ""},
		{"GET", "/geofence/fences/7?v=1", "", 400, "v"},
		{"GET", "/geofence/fences/7", "", 200, ""},
		// an API key sent as a name is not repeated; a name is cut at a
		// character's start and shown as valid UTF-8
		{"GET", "/geofence/contains?lng=1&lat=2&gt_0123456789abcdef0123456789abcdef0123456789", "", 400, ""},
		{"GET", "/geofence/contains?lng=1&lat=2&" + strings.Repeat("x", 63) + "é=1", "", 400, strings.Repeat("x", 63) + "…"},
		{"GET", "/geofence/contains?lng=1&lat=2&%ff=1", "", 400, "\ufffd"},
		{"GET", "/geofence/contains?lng=1&lat=2&%01=1", "", 400, "\x01"},
	} {
		reader, gate := &fakeReader{}, &fakeGate{budget: 100}
		w := serve(newTestHandler(t, reader, gate, nil), c.method, c.target, c.body, "X-API-Key", testAdminKey)
		if w.Code != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.target, w.Code, w.Body, c.status)
			continue
		}
		if c.status != 400 {
			continue
		}
		doc := problemDoc(t, w)
		if doc["param"] != c.param && !(c.param == "" && doc["param"] == nil) {
			t.Errorf("%s %s: param %v, want %q", c.method, c.target, doc["param"], c.param)
		}
		// The detail shows the name as the param does, and never a key.
		if detail, _ := doc["detail"].(string); c.param != "" && !strings.Contains(detail, `"`+c.param+`"`) ||
			strings.Contains(w.Body.String(), "gt_0123") {
			t.Errorf("%s %s: detail %q, want the param %q in it and no key", c.method, c.target, detail, c.param)
		}
		if len(gate.demands) != 0 || len(reader.calls) != 0 {
			t.Errorf("%s %s: refused, yet priced (%v) or queried (%v)", c.method, c.target, gate.demands, reader.calls)
		}
	}
}

// A fence write with a misspelt dry_run (dryrun=, dry-run=) is a 400 and
// writes nothing: the caller meant to try it, and a write has no dry run.
func TestFenceWriteWithAnotherParameterWritesNothing(t *testing.T) {
	r, writes := countedWrites(t)
	fence := `{"type":"Feature","properties":{"name":"f","kind":"zone"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	for _, c := range []struct{ method, target, body, param string }{
		{http.MethodDelete, "/geofences/3?dryrun=1", "", "dryrun"},
		{http.MethodDelete, "/geofences/3?dry-run=1", "", "dry-run"},
		{http.MethodPut, "/geofences/3?dryrun=1", fence, "dryrun"},
		{http.MethodPost, "/geofences?dryrun=true", fence, "dryrun"},
	} {
		w := serve(r, c.method, c.target, c.body, "X-API-Key", testAdminKey)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"param":"`+c.param+`"`) {
			t.Errorf("%s %s: %d %s, want a 400 naming %s", c.method, c.target, w.Code, w.Body, c.param)
		}
	}
	if *writes != 0 {
		t.Fatalf("%d writes made, want none", *writes)
	}
	if w := serve(r, http.MethodDelete, "/geofences/3?dry_run=0", "", "X-API-Key", testAdminKey); w.Code != http.StatusNoContent || *writes != 1 {
		t.Errorf("DELETE with dry_run=0: %d, %d writes; want 204 and one", w.Code, *writes)
	}
}

// A table written as in SQL, its parts in double quotes, is refused when
// the configuration is read: the quotes would be sought as part of the
// name. A quote inside a name is the name's own.
func TestLayerTableSQLQuotedIsRefused(t *testing.T) {
	_, err := NewCatalog([]Layer{{Name: "zones", Table: `public."Zones"`, GeometryColumn: "geom"}})
	if err == nil || !strings.Contains(err.Error(), "without SQL quotes") {
		t.Fatalf("NewCatalog: %v, want a refusal naming SQL quotes", err)
	}
	if _, err := NewCatalog([]Layer{{Name: "zones", Table: `public.we"ird`, GeometryColumn: "geom"}}); err != nil {
		t.Fatalf("NewCatalog of a table with a quote in its name: %v", err)
	}
}
