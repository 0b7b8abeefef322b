package geofence

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/testenv"
)

// passGate admits everything (pricing is toll.Toll's, tested there).
type passGate struct{}

func (passGate) AdmitGeofence(http.ResponseWriter, *http.Request, Demand) bool { return true }

// liveAPI is the geofence API over the real stores: reads as geotoll_reader,
// writes as geotoll_fence_writer.
func liveAPI(t testing.TB, withWriter bool) http.Handler {
	t.Helper()
	o := Options{
		Layers: demoLayers(), Limits: DefaultLimits(), AdminKeys: []string{testAdminKey},
		Reader: NewStore(testenv.ReadPool(t)), Gate: passGate{}, Logger: slog.New(slog.DiscardHandler),
	}
	if withWriter {
		o.Writer = NewStore(writerPool(t))
	}
	h, err := NewHandler(o)
	if err != nil {
		t.Fatal(err)
	}
	return testRouter(h)
}

type featureCollection struct {
	Type     string `json:"type"`
	Features []struct {
		Type       string          `json:"type"`
		ID         int64           `json:"id"`
		Geometry   json.RawMessage `json:"geometry"`
		Properties map[string]any  `json:"properties"`
	} `json:"features"`
}

func collectionOf(t *testing.T, w *httptest.ResponseRecorder) featureCollection {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, ContentType)
	}
	var fc featureCollection
	if err := json.Unmarshal(w.Body.Bytes(), &fc); err != nil || fc.Type != "FeatureCollection" {
		t.Fatalf("body %.200s: %v", w.Body, err)
	}
	for _, f := range fc.Features {
		if f.Type != "Feature" || f.ID == 0 {
			t.Fatalf("feature %+v", f)
		}
		if _, err := unmarshalGeometry(f.Geometry); err != nil {
			t.Fatalf("feature %d geometry %s: %v", f.ID, f.Geometry, err)
		}
	}
	return fc
}

func TestAPIReadEndpoints(t *testing.T) {
	api := liveAPI(t, false)

	fc := collectionOf(t, serve(api, http.MethodGet, "/geofence/within?layer=places&lng=13.405&lat=52.52&radius=1000&limit=25", ""))
	if len(fc.Features) != 25 {
		t.Errorf("within: %d features, want 25 (central Berlin is dense)", len(fc.Features))
	}
	prev := 0.0
	for _, f := range fc.Features {
		d, _ := f.Properties[DistanceProperty].(float64)
		if d < prev || d > 1000 || f.Properties["name"] == nil || f.Properties["city"] != "Berlin" {
			t.Errorf("within feature %d: %v", f.ID, f.Properties)
		}
		prev = d
	}

	fc = collectionOf(t, serve(api, http.MethodGet, "/geofence/bbox?layer=districts&bbox=13.3,52.4,13.5,52.6&limit=1000", ""))
	if len(fc.Features) == 0 {
		t.Error("bbox over Berlin found no district")
	}
	for i, f := range fc.Features {
		if i > 0 && f.ID <= fc.Features[i-1].ID {
			t.Errorf("bbox features not in id order: %d after %d", f.ID, fc.Features[i-1].ID)
		}
	}

	fc = collectionOf(t, serve(api, http.MethodGet, "/geofence/bbox?layer=places&bbox=178,-19,-179,-17", ""))
	if len(fc.Features) == 0 {
		t.Error("antimeridian bbox around Suva found no place")
	}

	// A point inside some demo fence: the first vertex's neighbourhood of
	// fence 1 (Madrid), nudged inside.
	fc = collectionOf(t, serve(api, http.MethodGet, "/geofence/contains?lng=-3.76&lat=40.5", ""))
	found := false
	for _, f := range fc.Features {
		found = found || f.ID == 1
		if f.Properties["name"] == nil || f.Properties["kind"] == nil {
			t.Errorf("contains feature %d: %v", f.ID, f.Properties)
		}
	}
	if !found {
		t.Errorf("contains (-3.76, 40.5): fence 1 not among %d fences", len(fc.Features))
	}

	w := serve(api, http.MethodPost, "/geofence/check", `{"points":[{"id":"madrid","lng":-3.76,"lat":40.5},{"id":"sea","lng":-30,"lat":0}]}`)
	var res struct {
		Results []CheckResult `json:"results"`
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &res) != nil || len(res.Results) != 2 {
		t.Fatalf("check: %d %s", w.Code, w.Body)
	}
	if res.Results[0].ID != "madrid" || len(res.Results[0].Fences) == 0 || res.Results[0].Fences[0] != 1 ||
		res.Results[1].ID != "sea" || len(res.Results[1].Fences) != 0 {
		t.Errorf("check results %+v", res.Results)
	}
	if !strings.Contains(w.Body.String(), `"fences":[]`) {
		t.Errorf("a point in no fence must have an empty list, not null: %s", w.Body)
	}
}

func TestAPIFenceAdmin(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	name := "api test " + randomSuffix()
	body := func(name, coords string) string {
		return `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[` + coords + `]},"properties":{"name":"` + name + `","kind":"depot"}}`
	}
	// Clockwise square in the South Atlantic.
	w := serve(api, http.MethodPost, "/geofences", body(name, `[[-25,-45],[-25,-44],[-24,-44],[-24,-45],[-25,-45]]`), admin...)
	if w.Code != http.StatusCreated || w.Header().Get("Content-Type") != ContentType {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var created struct {
		ID         int64
		Geometry   json.RawMessage
		Properties map[string]any
	}
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil {
		t.Fatal(err)
	}
	loc := FencesPath + "/" + strconv.FormatInt(created.ID, 10) // the fence admin's own path, even when asked at /geofences
	t.Cleanup(func() { serve(api, http.MethodDelete, loc, "", admin...) })
	if w.Header().Get("Location") != loc || created.Properties["name"] != name || created.Properties["kind"] != "depot" {
		t.Errorf("created %s at %q", w.Body, w.Header().Get("Location"))
	}
	if !strings.Contains(string(created.Geometry), `"MultiPolygon"`) ||
		!strings.Contains(string(created.Geometry), `[[[[-25,-45],[-24,-45],[-24,-44],[-25,-44],[-25,-45]]]]`) {
		t.Errorf("stored geometry %s, want the square as a counter-clockwise MultiPolygon", created.Geometry)
	}

	// The new fence answers contains at once, boundary included.
	fc := collectionOf(t, serve(api, http.MethodGet, "/geofence/contains?lng=-24.5&lat=-45", ""))
	if len(fc.Features) != 1 || fc.Features[0].ID != created.ID {
		t.Errorf("contains on the new fence's edge: %+v", fc.Features)
	}

	// An invalid polygon: 422 with PostGIS's reason.
	w = serve(api, http.MethodPut, loc, body(name, `[[-25,-45],[-24,-44],[-24,-45],[-25,-44],[-25,-45]]`), admin...)
	doc := problemDoc(t, w)
	if w.Code != http.StatusUnprocessableEntity || doc["reason"] != "Self-intersection" || doc["param"] != "geometry" {
		t.Errorf("invalid polygon: %d %v", w.Code, doc)
	}
	w = serve(api, http.MethodPost, "/geofences", body(name, `[[-25,-45],[-24,-44],[-24,-45],[-25,-44],[-25,-45]]`), admin...)
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "Self-intersection") {
		t.Errorf("create invalid polygon: %d %s", w.Code, w.Body)
	}

	w = serve(api, http.MethodPut, loc, body(name+" v2", `[[-25,-45],[-23,-45],[-23,-43],[-25,-43],[-25,-45]]`), admin...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), name+" v2") {
		t.Errorf("replace: %d %s", w.Code, w.Body)
	}
	w = serve(api, http.MethodGet, loc, "", admin...)
	if w.Code != 200 || !strings.Contains(w.Body.String(), name+" v2") {
		t.Errorf("get: %d %s", w.Code, w.Body)
	}
	w = serve(api, http.MethodGet, fmt.Sprintf("/geofences?after=%d&limit=1", created.ID-1), "", admin...)
	if fc := collectionOf(t, w); len(fc.Features) != 1 || fc.Features[0].ID != created.ID {
		t.Errorf("list: %s", w.Body)
	}
	if w := serve(api, http.MethodDelete, loc, "", admin...); w.Code != http.StatusNoContent {
		t.Errorf("delete: %d %s", w.Code, w.Body)
	}
	if w := serve(api, http.MethodGet, loc, "", admin...); w.Code != http.StatusNotFound {
		t.Errorf("get after delete: %d", w.Code)
	}
	if w := serve(api, http.MethodDelete, loc, "", admin...); w.Code != http.StatusNotFound {
		t.Errorf("delete again: %d", w.Code)
	}
	maxV := DefaultLimits().MaxVertices
	big := body(name, "["+strings.Repeat("[0,0],", maxV)+"[0,0]]")
	if w := serve(api, http.MethodPost, "/geofences", big, admin...); w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "more than") {
		t.Errorf("fence of %d positions: %d %.200s, want 422", maxV+1, w.Code, w.Body)
	}
	huge := body(name, "["+strings.Repeat("[0.000000000001,0.000000000001],", int(DefaultLimits().MaxFenceBytes/32))+"[0,0]]")
	if w := serve(api, http.MethodPost, "/geofences", huge, admin...); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("body over max_fence_bytes: %d, want 413", w.Code)
	}
}

// recordingGate admits everything and records the demands it priced.
type recordingGate struct{ demands []Demand }

func (g *recordingGate) AdmitGeofence(_ http.ResponseWriter, _ *http.Request, d Demand) bool {
	g.demands = append(g.demands, d)
	return true
}

// circle is a ring of n positions around (x, y), radius 0.5°.
func circle(x, y float64, n int) orb.Ring {
	r := make(orb.Ring, 0, n)
	for i := range n - 1 {
		a := 2 * math.Pi * float64(i) / float64(n-1)
		r = append(r, orb.Point{x + 0.5*math.Cos(a), y + 0.5*math.Sin(a)})
	}
	return append(r, r[0])
}

// /geofence/contains is bounded in bytes, not only in rows: twelve fences
// of 4,000 positions contain the point, but one answer carries at most
// max_response_vertices positions (20,000 by default) and says it was cut;
// ?limit caps the fences (and says so too) and is what the request is
// priced by.
func TestContainsResponseIsBounded(t *testing.T) {
	writer := NewStore(writerPool(t))
	const lng, lat = -20.0, -50.0 // South Atlantic: no demo fence
	for i := range 12 {
		fence(t, writer, fmt.Sprintf("bounded contains %d %s", i, randomSuffix()), circle(lng, lat, 4000))
	}
	gate := &recordingGate{}
	h, err := NewHandler(Options{Layers: demoLayers(), Limits: DefaultLimits(), Reader: NewStore(testenv.ReadPool(t)), Gate: gate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := testRouter(h)
	get := func(query string) (featureCollection, map[string]any) {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/geofence/contains?"+query, nil))
		fc := collectionOf(t, w)
		var members map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &members); err != nil {
			t.Fatal(err)
		}
		return fc, members
	}
	positions := func(fc featureCollection) int {
		n := 0
		for _, f := range fc.Features {
			g, err := unmarshalGeometry(f.Geometry)
			if err != nil {
				t.Fatal(err)
			}
			mp := g.(orb.MultiPolygon)
			for _, p := range mp {
				for _, ring := range p {
					n += len(ring)
				}
			}
		}
		return n
	}
	fc, members := get(fmt.Sprintf("lng=%g&lat=%g", lng, lat))
	if n := positions(fc); n > 20000 || len(fc.Features) != 5 || members["truncated"] != true {
		t.Fatalf("12 fences of 4,000 positions: %d fences, %d positions, truncated %v; want 5 (20,000 positions), truncated", len(fc.Features), n, members["truncated"])
	}
	if d := gate.demands[len(gate.demands)-1]; d.Kind != KindContains || d.Limit != DefaultLimits().DefaultLimit {
		t.Fatalf("contains priced as %+v, want its default limit", d)
	}
	fc, members = get(fmt.Sprintf("lng=%g&lat=%g&limit=2", lng, lat))
	if len(fc.Features) != 2 || members["truncated"] != true || gate.demands[len(gate.demands)-1].Limit != 2 {
		t.Fatalf("limit=2: %d fences, truncated %v, demand %+v", len(fc.Features), members["truncated"], gate.demands[len(gate.demands)-1])
	}
}

// TestFenceWithAntipodalEdgeIsNotAServerError: PostGIS cannot make a
// geography of an edge between antipodal points (its great circle is not
// defined: "Antipodal (180 degrees long) edge detected!", XX000), and the
// fence table's geography index needs one. Such a fence is a 422 naming
// the edge, not a 500; fences whose edges only come near it — or span
// 180° of longitude between two positions that are one point, or are not
// antipodal — are PostGIS's to store, and stored.
func TestFenceWithAntipodalEdgeIsNotAServerError(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	owner := testenv.Pool(t)
	body := func(coords string) string {
		return `{"type":"Feature","geometry":{"type":"MultiPolygon","coordinates":` + coords + `},"properties":{"name":"antipodal test ` + randomSuffix() + `"}}`
	}
	// castable reports whether PostGIS can make a geography of the
	// MultiPolygon, so that each case is what it says it is.
	castable := func(coords string) bool {
		t.Helper()
		_, err := owner.Exec(ctxT(t), `SELECT ST_GeomFromGeoJSON('{"type":"MultiPolygon","coordinates":'||$1::text||'}')::geography`, coords)
		if err != nil && !strings.Contains(err.Error(), "Antipodal") {
			t.Fatalf("geography of %s: %v", coords, err)
		}
		return err == nil
	}
	for name, coords := range map[string]string{
		"along the equator":  `[[[[-90,0],[90,0],[90,10],[-90,10],[-90,0]]]]`,
		"from the meridian":  `[[[[0,0],[180,0],[180,10],[0,10],[0,0]]]]`,
		"pole to pole":       `[[[[0,-90],[1,-90],[1,90],[0,90],[0,-90]]]]`,
		"tilted":             `[[[[10,20],[-170,-20],[-160,-20],[10,20]]]]`,
		"in a hole":          `[[[[-100,-10],[100,-10],[100,20],[-100,20],[-100,-10]],[[-90,0],[90,0],[90,10],[-90,10],[-90,0]]]]`,
		"in a second part":   `[[[[-30,-50],[-29,-50],[-29,-49],[-30,-50]]],[[[-90,-60],[90,60],[91,60],[-90,-60]]]]`,
		"within PostGIS's ε": `[[[[-90,0],[90,0.000000000001],[90,10],[-90,10],[-90,0]]]]`,
	} {
		t.Run(name, func(t *testing.T) {
			if castable(coords) {
				t.Fatalf("PostGIS makes a geography of %s: the case shows nothing", coords)
			}
			w := serve(api, http.MethodPost, "/geofences", body(coords), admin...)
			if w.Code == http.StatusCreated {
				var f struct{ ID int64 }
				_ = json.Unmarshal(w.Body.Bytes(), &f)
				serve(api, http.MethodDelete, FencesPath+"/"+strconv.FormatInt(f.ID, 10), "", admin...)
			}
			doc := problemDoc(t, w)
			if w.Code != http.StatusUnprocessableEntity || doc["param"] != "geometry" || !strings.Contains(fmt.Sprint(doc["detail"]), "antipodal") {
				t.Errorf("POST: %d %v, want a 422 naming the antipodal edge", w.Code, doc)
			}
		})
	}
	// Near it, but a geography PostGIS makes: stored. Far south, where no
	// other test looks for fences, and deleted at once.
	for name, coords := range map[string]string{
		"just short of antipodal": `[[[[-89.9,-80],[90,80],[90.5,80],[-89.9,-80]]]]`,
		"over 180° of longitude":  `[[[[-100,-85],[100,-85],[100,-80],[-100,-80],[-100,-85]]]]`,
		"-180 to 180, one point":  `[[[[-180,-85],[180,-85],[180,-84],[-180,-84],[-180,-85]]]]`,
		"outside PostGIS's ε":     `[[[[-90,-80],[90,80.000001],[90.5,80],[-90,-80]]]]`,
	} {
		t.Run(name, func(t *testing.T) {
			if !castable(coords) {
				t.Fatalf("PostGIS makes no geography of %s: the case shows nothing", coords)
			}
			w := serve(api, http.MethodPost, "/geofences", body(coords), admin...)
			if w.Code != http.StatusCreated {
				t.Fatalf("POST: %d %s, want 201", w.Code, w.Body)
			}
			var f struct{ ID int64 }
			if err := json.Unmarshal(w.Body.Bytes(), &f); err != nil {
				t.Fatal(err)
			}
			if w := serve(api, http.MethodDelete, FencesPath+"/"+strconv.FormatInt(f.ID, 10), "", admin...); w.Code != http.StatusNoContent {
				t.Errorf("DELETE: %d %s", w.Code, w.Body)
			}
		})
	}
}
