package geofence

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
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

// readAPI is the geofence API's handler over the real read store, its
// demands priced by gate: reads alone.
func readAPI(t *testing.T, gate Gate) *Handler {
	t.Helper()
	h, err := NewHandler(Options{Layers: demoLayers(), Limits: DefaultLimits(), Reader: NewStore(testenv.ReadPool(t)), Gate: gate, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
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

// idsOf GETs target from h and answers its collection's feature ids, in
// order, and whether it says it was truncated.
func idsOf(t *testing.T, h *Handler, target string) (ids []int64, truncated bool) {
	t.Helper()
	w := httptest.NewRecorder()
	testRouter(h).ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	fc := collectionOf(t, w)
	var members struct {
		Truncated bool `json:"truncated"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &members); err != nil {
		t.Fatal(err)
	}
	for _, f := range fc.Features {
		ids = append(ids, f.ID)
	}
	return ids, members.Truncated
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
	h := readAPI(t, gate)
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

// /geofence/within and /geofence/bbox are bounded in positions as contains
// is: twelve fences of 4,000 positions lie within the radius and the box,
// but an answer carries at most max_response_vertices positions (20,000):
// the nearest (within) or the first by id (bbox) that fit, and says it
// was cut. A fence larger than the whole cap (25,000 positions, the
// nearest and the first by id) is left out alone, not taking the answer
// with it. They answered all 73,000 positions, every geometry rendered
// whole whatever its size.
func TestWithinAndBBoxResponsesAreBounded(t *testing.T) {
	writer := NewStore(writerPool(t))
	const lng, lat = -40.0, -54.0 // South Atlantic: no demo fence
	fence(t, writer, "bounded within giant "+randomSuffix(), circle(lng-0.005, lat, 25000))
	var ids []int64
	for i := range 12 {
		// The later a fence is written, the nearer it lies to the point
		// west of them: distance order is the reverse of id order.
		f := fence(t, writer, fmt.Sprintf("bounded within %d %s", i, randomSuffix()), circle(lng+0.01*float64(11-i), lat, 4000))
		ids = append(ids, f.ID)
	}
	nearest := slices.Clone(ids[7:])
	slices.Reverse(nearest)
	h := readAPI(t, &recordingGate{})
	for _, tc := range []struct {
		query string
		want  []int64
	}{
		{fmt.Sprintf("within?layer=geofences&lng=%g&lat=%g&radius=50000", lng-0.6, lat), nearest},
		{fmt.Sprintf("bbox?layer=geofences&bbox=%g,%g,%g,%g", lng-1, lat-1, lng+1, lat+1), ids[:5]},
	} {
		got, truncated := idsOf(t, h, "/geofence/"+tc.query)
		if !slices.Equal(got, tc.want) || !truncated {
			t.Errorf("%s: features %v, truncated %v; want %v (20,000 positions, the giant left out), truncated", tc.query, got, truncated, tc.want)
		}
	}
}

// A fence too large for a contains answer is left out alone: a small fence
// after it, in id order, that fits the answer is answered (the answer says
// it was cut), where the positions counted used to include the fence left
// out, and every fence after it was dropped too. Nor does it take a place
// among the limit's: with limit=1 the answer was empty.
func TestContainsAnswersAFenceThatFitsAfterOneThatDoesNot(t *testing.T) {
	writer := NewStore(writerPool(t))
	const lng, lat = -30.0, -52.0 // South Atlantic: no demo fence
	big := fence(t, writer, "contains big "+randomSuffix(), circle(lng, lat, 25000))
	small := fence(t, writer, "contains small "+randomSuffix(), circle(lng, lat, 5))
	second := fence(t, writer, "contains second "+randomSuffix(), circle(lng, lat, 6))
	h := readAPI(t, &recordingGate{})
	for _, tc := range []struct {
		limit string
		want  []int64
	}{
		{"", []int64{small.ID, second.ID}},
		{"&limit=1", []int64{small.ID}},
		{"&limit=2", []int64{small.ID, second.ID}},
	} {
		ids, truncated := idsOf(t, h, fmt.Sprintf("/geofence/contains?lng=%g&lat=%g%s", lng, lat, tc.limit))
		if !slices.Equal(ids, tc.want) || !truncated {
			t.Errorf("%q: fences %v, truncated %v; want %v (the big %d left out), truncated", tc.limit, ids, truncated, tc.want, big.ID)
		}
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

// TestFenceClosedByANegativeZeroIsStored: JSON's -0 and 0 are one number,
// so a ring that starts at [0, 0] and ends at [-0.0, 0] is closed — and
// the parser says so — but PostGIS compares a ring's ends bit for bit
// ("Polygon must have closed rings", XX000): such a fence must be stored,
// not answered with a 500.
func TestFenceClosedByANegativeZeroIsStored(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	for name, ring := range map[string]string{
		"closing lng":  `[[-0.0,-85],[1,-85],[1,-84],[0,-85]]`,
		"opening lat":  `[[2,-0.0],[3,0],[3,1],[2,0]]`,
		"written -0e5": `[[0e0,-80],[1,-80],[1,-79],[-0e5,-80]]`,
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[` + ring + `]},"properties":{"name":"negative zero ` + randomSuffix() + `"}}`
			w := serve(api, http.MethodPost, FencesPath, body, admin...)
			if w.Code != http.StatusCreated {
				t.Fatalf("POST: %d %s, want 201", w.Code, w.Body)
			}
			serve(api, http.MethodDelete, w.Header().Get("Location"), "", admin...)
		})
	}
}

// TestAPIFenceCreateHonoursConditions: POST /geofence/fences is a fence
// write like PUT and DELETE, so a malformed If-Match or If-None-Match is a
// 400 naming it, and a condition the collection cannot meet — it has no
// ETag, so If-Match holds only as "*" and If-None-Match "*" never does
// (RFC 9110 §13.1.1, §13.1.2) — is a 412; either way nothing is written.
func TestAPIFenceCreateHonoursConditions(t *testing.T) {
	api := liveAPI(t, true)
	owner := testenv.Pool(t)
	for _, c := range []struct {
		name, header, value string
		status              int
	}{
		{"malformed If-Match", "If-Match", "nope", http.StatusBadRequest},
		{"malformed If-None-Match", "If-None-Match", "*, \"7\"", http.StatusBadRequest},
		{"If-Match a tag", "If-Match", `"7"`, http.StatusPreconditionFailed},
		{"If-None-Match any", "If-None-Match", "*", http.StatusPreconditionFailed},
		{"If-Match any", "If-Match", "*", http.StatusCreated},
		{"If-None-Match a tag", "If-None-Match", `"7"`, http.StatusCreated},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "create condition " + randomSuffix()
			w := serve(api, http.MethodPost, FencesPath, squareBody(name, -30, -60), "X-API-Key", testAdminKey, c.header, c.value)
			if w.Code == http.StatusCreated {
				t.Cleanup(func() { serve(api, http.MethodDelete, w.Header().Get("Location"), "", "X-API-Key", testAdminKey) })
			}
			if w.Code != c.status {
				t.Fatalf("POST with %s: %s: %d %s, want %d", c.header, c.value, w.Code, w.Body, c.status)
			}
			if c.status != http.StatusCreated {
				if doc := problemDoc(t, w); doc["param"] != c.header {
					t.Errorf("problem %v does not name %s", doc, c.header)
				}
				var n int
				if err := owner.QueryRow(ctxT(t), `SELECT count(*) FROM geotoll.geofences WHERE name = $1`, name).Scan(&n); err != nil || n != 0 {
					t.Errorf("a refused create wrote %d fences (%v)", n, err)
				}
			}
		})
	}
}

// squareBody is a fence write's body: a square of side 1° at (x, y).
func squareBody(name string, x, y float64) string {
	return fmt.Sprintf(`{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[%g,%g],[%g,%g],[%g,%g],[%g,%g],[%g,%g]]]},"properties":{"name":%q}}`,
		x, y, x+1, y, x+1, y+1, x, y+1, x, y, name)
}

// createFence posts a fence through api and deletes it when the test
// ends; it returns the fence's path and the ETag of the answer.
func createFence(t *testing.T, api http.Handler, name string, x, y float64) (path, etag string) {
	t.Helper()
	admin := []string{"X-API-Key", testAdminKey}
	w := serve(api, http.MethodPost, FencesPath, squareBody(name, x, y), admin...)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	path = w.Header().Get("Location")
	t.Cleanup(func() { serve(api, http.MethodDelete, path, "", admin...) })
	return path, w.Header().Get("ETag")
}

// revisionOf is the revision a fence answer's properties carry.
func revisionOf(t *testing.T, w *httptest.ResponseRecorder) any {
	t.Helper()
	var f struct{ Properties map[string]any }
	if err := json.Unmarshal(w.Body.Bytes(), &f); err != nil {
		t.Fatalf("fence %.200s: %v", w.Body, err)
	}
	return f.Properties["revision"]
}

// A fence's answers carry a strong ETag, "<revision>", that changes on
// every write; PUT and DELETE write only when If-Match names the current
// one (strong comparison: a weak tag never does) and If-None-Match does
// not, else 412 and nothing is written; GET answers 304 to an
// If-None-Match that names it (weak comparison) and 412 to an If-Match
// that does not. A malformed condition is a 400 that writes nothing; a
// fence that does not exist is a 404 whatever the conditions.
func TestAPIFenceConditionalRequests(t *testing.T) {
	api := liveAPI(t, true)
	admin := func(kv ...string) []string { return append([]string{"X-API-Key", testAdminKey}, kv...) }
	name := "etag test " + randomSuffix()
	loc, created := createFence(t, api, name, -20, -55)
	if !strings.HasPrefix(created, `"`) || !strings.HasSuffix(created, `"`) || len(created) < 3 {
		t.Fatalf("create: ETag %q, want a strong entity tag", created)
	}
	got := serve(api, http.MethodGet, loc, "", admin()...)
	if got.Code != http.StatusOK || got.Header().Get("ETag") != created {
		t.Fatalf("GET: %d ETag %q, want 200 with the creation's %q", got.Code, got.Header().Get("ETag"), created)
	}
	if rev := revisionOf(t, got); fmt.Sprintf(`"%v"`, rev) != created {
		t.Errorf("GET: properties.revision %v, ETag %s: want the revision quoted", rev, created)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(loc, FencesPath+"/"), 10, 64)
	fc := collectionOf(t, serve(api, http.MethodGet, fmt.Sprintf("%s?after=%d&limit=1", FencesPath, id-1), "", admin()...))
	if len(fc.Features) != 1 || fmt.Sprintf(`"%v"`, fc.Features[0].Properties["revision"]) != created {
		t.Errorf("list: %+v, want the fence with revision %s", fc.Features, created)
	}

	for _, c := range []struct {
		name, header, value string
		status              int
	}{
		{"the tag", "If-None-Match", created, http.StatusNotModified},
		{"the tag, weak", "If-None-Match", "W/" + created, http.StatusNotModified},
		{"a list holding it", "If-None-Match", `"nope", ` + created, http.StatusNotModified},
		{"any", "If-None-Match", "*", http.StatusNotModified},
		{"another tag", "If-None-Match", `"nope"`, http.StatusOK},
		{"If-Match the tag", "If-Match", created, http.StatusOK},
		{"If-Match another tag", "If-Match", `"nope"`, http.StatusPreconditionFailed},
		{"If-Match the tag, weak", "If-Match", "W/" + created, http.StatusPreconditionFailed},
		{"malformed", "If-None-Match", "nope", http.StatusBadRequest},
	} {
		w := serve(api, http.MethodGet, loc, "", admin(c.header, c.value)...)
		if w.Code != c.status {
			t.Errorf("GET with %s: %s (%s): %d %s, want %d", c.header, c.value, c.name, w.Code, w.Body, c.status)
			continue
		}
		switch c.status {
		case http.StatusNotModified:
			if w.Body.Len() != 0 || w.Header().Get("ETag") != created {
				t.Errorf("GET %s: 304 with %d bytes, ETag %q; want no body and %q", c.name, w.Body.Len(), w.Header().Get("ETag"), created)
			}
		case http.StatusPreconditionFailed:
			if doc := problemDoc(t, w); doc["type"] != "urn:geotoll:problem:precondition-failed" || doc["param"] != "If-Match" {
				t.Errorf("GET %s: %v", c.name, doc)
			}
		}
	}

	// Writes that must not happen: each leaves the fence as it was.
	for _, c := range []struct {
		name, method string
		hdr          []string
		status       int
		param        string
	}{
		{"PUT, another tag", http.MethodPut, []string{"If-Match", `"nope"`}, http.StatusPreconditionFailed, "If-Match"},
		{"PUT, the tag, weak", http.MethodPut, []string{"If-Match", "W/" + created}, http.StatusPreconditionFailed, "If-Match"},
		{"PUT, only if none", http.MethodPut, []string{"If-None-Match", "*"}, http.StatusPreconditionFailed, "If-None-Match"},
		{"PUT, unless the tag", http.MethodPut, []string{"If-None-Match", created}, http.StatusPreconditionFailed, "If-None-Match"},
		{"PUT, malformed", http.MethodPut, []string{"If-Match", "nope"}, http.StatusBadRequest, "If-Match"},
		{"PUT, any among tags", http.MethodPut, []string{"If-Match", "*, " + created}, http.StatusBadRequest, "If-Match"},
		{"DELETE, another tag", http.MethodDelete, []string{"If-Match", `"nope"`}, http.StatusPreconditionFailed, "If-Match"},
		{"DELETE, unless any", http.MethodDelete, []string{"If-None-Match", "*"}, http.StatusPreconditionFailed, "If-None-Match"},
		{"DELETE, malformed", http.MethodDelete, []string{"If-Match", `"unterminated`}, http.StatusBadRequest, "If-Match"},
	} {
		body := ""
		if c.method == http.MethodPut {
			body = squareBody(name+" lost", -20, -55)
		}
		w := serve(api, c.method, loc, body, admin(c.hdr...)...)
		if doc := problemDoc(t, w); w.Code != c.status || doc["param"] != c.param {
			t.Errorf("%s: %d %v, want %d naming %s", c.name, w.Code, doc, c.status, c.param)
		}
		now := serve(api, http.MethodGet, loc, "", admin()...)
		if now.Code != http.StatusOK || now.Header().Get("ETag") != created || strings.Contains(now.Body.String(), "lost") {
			t.Fatalf("%s wrote: now %d ETag %q %s", c.name, now.Code, now.Header().Get("ETag"), now.Body)
		}
	}

	// Writes that must: each answers a new ETag, the one GET then gives.
	etag := created
	for _, c := range []struct {
		name string
		hdr  func(etag string) []string
	}{
		{"the tag", func(etag string) []string { return []string{"If-Match", etag} }},
		{"a list holding it", func(etag string) []string { return []string{"If-Match", `"nope" , W/"x",` + etag} }},
		{"any", func(string) []string { return []string{"If-Match", "*"} }},
		{"unless another tag", func(string) []string { return []string{"If-None-Match", `"nope"`} }},
		{"no condition", func(string) []string { return nil }},
	} {
		w := serve(api, http.MethodPut, loc, squareBody(name+" "+c.name, -20, -55), admin(c.hdr(etag)...)...)
		if w.Code != http.StatusOK {
			t.Fatalf("PUT, %s: %d %s", c.name, w.Code, w.Body)
		}
		next := w.Header().Get("ETag")
		if next == "" || next == etag || fmt.Sprintf(`"%v"`, revisionOf(t, w)) != next {
			t.Errorf("PUT, %s: ETag %q after %q, revision %v: want a new one, the revision quoted", c.name, next, etag, revisionOf(t, w))
		}
		if g := serve(api, http.MethodGet, loc, "", admin()...); g.Header().Get("ETag") != next || !strings.Contains(g.Body.String(), c.name) {
			t.Errorf("GET after PUT, %s: ETag %q, want %q; %s", c.name, g.Header().Get("ETag"), next, g.Body)
		}
		etag = next
	}
	if w := serve(api, http.MethodDelete, loc, "", admin("If-Match", created)...); w.Code != http.StatusPreconditionFailed {
		t.Errorf("DELETE with the first ETag: %d %s, want 412", w.Code, w.Body)
	}
	if w := serve(api, http.MethodDelete, loc, "", admin("If-Match", etag)...); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE with the current ETag: %d %s", w.Code, w.Body)
	}
	for _, c := range [][]string{{"If-Match", etag}, {"If-Match", "*"}, {"If-None-Match", "*"}} {
		if w := serve(api, http.MethodPut, loc, squareBody(name, -20, -55), admin(c...)...); w.Code != http.StatusNotFound {
			t.Errorf("PUT with %s: %s on a deleted fence: %d %s, want 404 (PUT does not create)", c[0], c[1], w.Code, w.Body)
		}
		if w := serve(api, http.MethodDelete, loc, "", admin(c...)...); w.Code != http.StatusNotFound {
			t.Errorf("DELETE with %s: %s on a deleted fence: %d %s, want 404", c[0], c[1], w.Code, w.Body)
		}
	}
}

// waitingForSQL counts the sessions held by the session $1 (pid): waiting
// for a lock it holds, or for one held by a session waiting for it (the
// second of two writers of a row waits for the first).
const waitingForSQL = `SELECT count(*) FROM pg_stat_activity AS a
WHERE $1::int = ANY(pg_blocking_pids(a.pid))
   OR EXISTS (SELECT FROM unnest(pg_blocking_pids(a.pid)) AS b(pid) WHERE $1::int = ANY(pg_blocking_pids(b.pid)))`

// Two replacements of a fence sent at once with the same If-Match: the
// check and the write are one step in the database, so exactly one
// succeeds and the other is a 412. Both are held at the fence's row (a
// transaction of the test locks it) until both are under way, so neither
// can finish before the other has read what it checks.
func TestAPIFenceConcurrentReplacesWithOneIfMatch(t *testing.T) {
	// A lock_timeout longer than the role's, so that the writes wait for
	// the test's lock however slow the machine.
	h, err := NewHandler(Options{
		Layers: demoLayers(), Limits: DefaultLimits(), AdminKeys: []string{testAdminKey},
		Reader: NewStore(testenv.ReadPool(t)), Writer: NewStore(writerPoolWith(t, map[string]string{"lock_timeout": "60s"})),
		Gate: passGate{}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	api := testRouter(h)
	name := "etag race " + randomSuffix()
	loc, etag := createFence(t, api, name, -22, -55)
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, FencesPath+"/"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	ctx := ctxT(t)
	owner := testenv.Pool(t)
	holder, err := owner.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	var pid int32
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid() FROM geotoll.geofences WHERE id = $1 FOR UPDATE", id).Scan(&pid); err != nil {
		t.Fatal(err)
	}

	codes := make(chan *httptest.ResponseRecorder, 2)
	for i := range 2 {
		go func() {
			codes <- serve(api, http.MethodPut, loc, squareBody(fmt.Sprintf("%s writer %d", name, i), -22, -55), "X-API-Key", testAdminKey, "If-Match", etag)
		}()
	}
	// Wait until both writes are held by the test's lock (or one answered
	// without waiting, which the checks below report).
	var early []*httptest.ResponseRecorder
	for waiting := 0; waiting < 2-len(early); {
		select {
		case w := <-codes:
			early = append(early, w)
			continue
		case <-ctx.Done():
			t.Fatalf("the writes did not both reach the fence's row: %v", ctx.Err())
		default:
		}
		if err := owner.QueryRow(ctx, waitingForSQL, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	answers := early
	for len(answers) < 2 {
		answers = append(answers, <-codes)
	}
	var ok, failed int
	for _, w := range answers {
		switch w.Code {
		case http.StatusOK:
			ok++
		case http.StatusPreconditionFailed:
			failed++
		default:
			t.Errorf("a write answered %d %s", w.Code, w.Body)
		}
	}
	if ok != 1 || failed != 1 {
		t.Fatalf("%d writes succeeded and %d failed their If-Match %s, want one of each", ok, failed, etag)
	}
}

// A fence is answered as stored, to the last digit that tells its
// coordinates apart: written back with PUT as it was read, it is the same
// fence. Rounded to nine decimals, a small fence came back with its
// vertices merged, and that answer written back was a 422; rounded to 15,
// so did one whose vertices were 1 ulp apart (2 and 2.0000000000000004),
// or whose coordinates needed their 17th digit.
func TestFenceReadBackWritesTheSameFence(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	for _, ring := range [][][2]float64{
		{{1, 1}, {1.000000000001, 1}, {1.000000000001, 1.000000000001}, {1, 1}},
		{{2, 1}, {2.0000000000000004, 1}, {2.0000000000000004, 1.0000000000000002}, {2, 1}},
		{{0.000001234567890123456, 1.2345678901234567e-9}, {123.45678901234567, 1.2345678901234567e-9}, {123.45678901234567, 45.678901234567891}, {0.000001234567890123456, 1.2345678901234567e-9}},
	} {
		coords, _ := json.Marshal([][][2]float64{ring})
		body := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":` + string(coords) + `},` +
			`"properties":{"name":"fine ` + randomSuffix() + `"}}`
		w := serve(api, http.MethodPost, FencesPath, body, admin...)
		if w.Code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s, want 201", coords, w.Code, w.Body)
		}
		at := w.Header().Get("Location")
		defer serve(api, http.MethodDelete, at, "", admin...)
		got := serve(api, http.MethodGet, at, "", admin...)
		var f struct {
			Geometry struct {
				Coordinates [][][][2]float64 `json:"coordinates"` // stored as a MultiPolygon
			} `json:"geometry"`
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(got.Body.Bytes(), &f); err != nil || len(f.Geometry.Coordinates) != 1 || len(f.Geometry.Coordinates[0]) != 1 {
			t.Fatalf("GET: %d %s (%v)", got.Code, got.Body, err)
		}
		if read := f.Geometry.Coordinates[0][0]; !slices.Equal(read, ring) {
			t.Errorf("GET: ring %v, want the vertices as written, %v", read, ring)
		}
		back, _ := json.Marshal(map[string]any{"type": "Feature", "geometry": map[string]any{"type": "MultiPolygon", "coordinates": f.Geometry.Coordinates},
			"properties": map[string]any{"name": f.Properties["name"]}})
		if w := serve(api, http.MethodPut, at, string(back), admin...); w.Code != http.StatusOK {
			t.Errorf("PUT of the fence %s as read: %d %s, want 200", coords, w.Code, w.Body)
		}
	}
}
