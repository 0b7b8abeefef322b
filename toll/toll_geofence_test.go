package toll

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

func TestGeofencePrice(t *testing.T) {
	toll := testToll(nil)
	toll.LayerWeights = map[string]throttle.Weights{"districts": func() throttle.Weights {
		w := throttle.DefaultWeights()
		w.AreaWeight = 0.25
		w.PointWeight = 0.1
		return w
	}()}
	box := func(w, s, e, n float64) orb.Bound { return orb.Bound{Min: orb.Point{w, s}, Max: orb.Point{e, n}} }
	tests := []struct {
		name string
		d    geofence.Demand
		want float64
	}{
		// The classic cheap request: a fraction of a token (priced by size: no model here).
		{"within 10 m", geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 10, Limit: 100}, 0.01 + 0.012 + 0.2},
		{"within 5 km", geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 5000, Limit: 1}, 0.01 + 6 + 0.002},
		// The classic expensive one: MaxCost, so a 100-token bucket pays it once.
		{"within 50 km", geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 50000, Limit: 100}, 60},
		{"bbox 1°×1°", geofence.Demand{Kind: geofence.KindBBox, Layer: "places", Bound: box(13, 52, 14, 53), Limit: 100}, 0.01 + 0.5 + 0.2},
		// The tile layer districts' weights price its tiles, not the geofence layer of that name.
		{"bbox on districts takes the default weights", geofence.Demand{Kind: geofence.KindBBox, Layer: "districts", Bound: box(13, 52, 17, 53), Limit: 100}, 0.01 + 2 + 0.2},
		// 175..-175 arrives unwrapped as 175..185: 10°, not 350°.
		{"bbox across the antimeridian", geofence.Demand{Kind: geofence.KindBBox, Layer: "places", Bound: box(175, -20, 185, -10), Limit: 0}, 0.01 + 50},
		{"contains", geofence.Demand{Kind: geofence.KindContains, Points: 1}, 0.06},
		{"contains, default limit", geofence.Demand{Kind: geofence.KindContains, Points: 1, Limit: 100}, 0.26},
		{"contains, limit 1000", geofence.Demand{Kind: geofence.KindContains, Points: 1, Limit: 1000}, 2.06},
		{"check of 20", geofence.Demand{Kind: geofence.KindCheck, Points: 20}, 1.01},
		{"check of 1000", geofence.Demand{Kind: geofence.KindCheck, Points: 1000}, 50.01},
		// contains and check on a layer take the default weights too.
		{"check of 20 on districts", geofence.Demand{Kind: geofence.KindCheck, Layer: "districts", Points: 20}, 1.01},
		{"contains on districts", geofence.Demand{Kind: geofence.KindContains, Layer: "districts", Points: 1, Limit: 100}, 0.26},
		{"check of 20 on places (default weights)", geofence.Demand{Kind: geofence.KindCheck, Layer: "places", Points: 20}, 1.01},
		{"unknown kind", geofence.Demand{Kind: "teleport"}, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toll.GeofencePrice(tt.d); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("price = %v, want %v", got, tt.want)
			}
		})
	}
	// Monotonic in radius, and never above MaxCost.
	prev := 0.0
	for _, r := range []float64{0, 10, 100, 1000, 20000, 49000, 50000} {
		p := toll.GeofencePrice(geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: r, Limit: 100})
		if p < prev || p > toll.Default.MaxCost {
			t.Errorf("radius %v costs %v after %v", r, p, prev)
		}
		prev = p
	}
	// A thousand contains calls cost more than one batch of a thousand.
	one := toll.GeofencePrice(geofence.Demand{Kind: geofence.KindContains, Points: 1})
	batch := toll.GeofencePrice(geofence.Demand{Kind: geofence.KindCheck, Points: 1000})
	if 1000*one <= batch {
		t.Errorf("1000 contains cost %v, a batch of 1000 %v", 1000*one, batch)
	}
}

// The verification session, at the gate: with one key, twenty 10 m checks
// pass; with a fresh key, a 50 km check passes once and the second is
// refused with Retry-After.
func TestAdmitGeofenceVerification(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	admit := func(key string, d geofence.Demand) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/geofence/within", nil)
		r.RemoteAddr = "192.0.2.9:4000"
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		if ok := toll.AdmitGeofence(w, r, d); ok != (w.Code == http.StatusOK && w.Body.Len() == 0) {
			t.Fatalf("AdmitGeofence = %v but wrote %d %s", ok, w.Code, w.Body)
		}
		return w
	}
	cheap := geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 10, Limit: 100}
	for i := range 20 {
		w := admit("a", cheap)
		if w.Code != http.StatusOK || w.Header().Get("X-Request-Cost") != "0.222" {
			t.Fatalf("cheap request %d: %d cost %q", i+1, w.Code, w.Header().Get("X-Request-Cost"))
		}
	}
	heavy := geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 50000, Limit: 100}
	if w := admit("b", heavy); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "40" {
		t.Fatalf("first 50 km: %d remaining %q", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	w := admit("b", heavy)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second 50 km: %d", w.Code)
	}
	// 20 tokens short at 20 tokens/s: exactly one second.
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra != 1 {
		t.Errorf("Retry-After %q, want 1", w.Header().Get("Retry-After"))
	}
	var doc map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc["cost"] != 60.0 {
		t.Errorf("429 body %s", w.Body)
	}
	c.t = c.t.Add(time.Second)
	if w := admit("b", heavy); w.Code != http.StatusOK {
		t.Errorf("after Retry-After: %d", w.Code)
	}
}

// pricedObserver records what the toll observed.
type pricedObserver struct{ prices []Price }

func (o *pricedObserver) Priced(_ string, p Price, _ Outcome) { o.prices = append(o.prices, p) }
func (o *pricedObserver) Settled(string, Price, float64)      {}

// A geofence request is observed with its route and layer and without a
// tile zoom (-1): the metrics label its zoom "", never a zoom it has not.
func TestAdmitGeofenceObservedWithoutZoom(t *testing.T) {
	obs := &pricedObserver{}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Observer = obs
	r := httptest.NewRequest(http.MethodGet, "/geofence/within", nil)
	r.RemoteAddr = "192.0.2.10:4000"
	r.Header.Set("X-API-Key", "a")
	if !toll.AdmitGeofence(httptest.NewRecorder(), r, geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 10, Limit: 100}) {
		t.Fatal("not admitted")
	}
	if len(obs.prices) != 1 || obs.prices[0].Zoom != -1 || obs.prices[0].Route != "within" || obs.prices[0].Layer != "places" {
		t.Errorf("observed %+v, want one price of route within, layer places, zoom -1", obs.prices)
	}
}

// fixedEstimator estimates every request at the same features and
// vertices.
type fixedEstimator struct{ est density.Estimate }

func (f fixedEstimator) Tile(*tiles.Layer, maptile.Tile) (density.Estimate, bool) { return f.est, true }
func (f fixedEstimator) Geofence(geofence.Demand) (density.Estimate, bool)        { return f.est, true }

// Contains and check on a layer are priced with that layer's containment
// work model (calibrate fits one per polygon layer); on the fences, and on
// a layer without one, with the fences' model.
func TestContainmentOnALayerIsPricedWithItsOwnWorkModel(t *testing.T) {
	at := []orb.Point{{13.4, 52.5}}
	est := density.Estimate{Features: 3, Vertices: 400}
	fences := throttle.WorkModel{QueryMS: 0.1, FeatureMS: 0.003}
	districts := throttle.WorkModel{QueryMS: 0.1, FeatureMS: 0.2, VertexMS: 0.001}
	toll := testToll(nil)
	toll.Estimator = fixedEstimator{est}
	toll.FenceWork = fences
	toll.ContainmentWork = map[string]throttle.WorkModel{"districts": districts, "": {QueryMS: 99}}
	w := toll.Default
	price := func(m throttle.WorkModel) float64 {
		w.Work = m
		return w.Read(est.Features, est.Vertices, toll.msPerToken())
	}
	for _, tt := range []struct {
		d    geofence.Demand
		want float64
	}{
		{geofence.Demand{Kind: geofence.KindContains, Layer: "districts", Limit: 100, Points: 1, At: at}, price(districts)},
		{geofence.Demand{Kind: geofence.KindCheck, Layer: "districts", Points: 20, At: at}, price(districts)},
		{geofence.Demand{Kind: geofence.KindCheck, Layer: "parks", Points: 20, At: at}, price(fences)},
		{geofence.Demand{Kind: geofence.KindCheck, Points: 20, At: at}, price(fences)},
		{geofence.Demand{Kind: geofence.KindContains, Limit: 100, Points: 1, At: at}, price(fences)},
	} {
		if got := toll.GeofencePrice(tt.d); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s on %q costs %v, want %v", tt.d.Kind, tt.d.Layer, got, tt.want)
		}
	}
	if price(districts) == price(fences) {
		t.Fatal("the two models price the estimate alike: the test tells nothing")
	}
}

// A tile layer's weights price its tiles only: a geofence query on a layer
// of the same name (the demo's places and districts are both) is priced
// as it would be without them — by size or by estimate, at the door and
// at its base — and never capped by the tile layer's max_cost.
func TestTileWeightsDoNotPriceGeofence(t *testing.T) {
	at := []orb.Point{{13.4, 52.5}}
	demands := []geofence.Demand{
		{Kind: geofence.KindWithin, Layer: "places", RadiusM: 50000, Limit: 100, Points: 1, At: at},
		{Kind: geofence.KindWithin, Layer: "places", RadiusM: 10, Limit: 1, Points: 1, At: at},
		{Kind: geofence.KindBBox, Layer: "districts", Bound: orb.Bound{Min: orb.Point{13, 52}, Max: orb.Point{14, 53}}, Limit: 100, Points: 1},
		{Kind: geofence.KindContains, Layer: "districts", Limit: 100, Points: 1, At: at},
		{Kind: geofence.KindCheck, Layer: "districts", Points: 1000, At: at},
		{Kind: geofence.KindContains, Limit: 100, Points: 1, At: at},
		{Kind: geofence.KindCheck, Points: 20, At: at},
	}
	tileWeights := throttle.Weights{Base: 0.5, AreaWeight: 9, RadiusWeight: 9, FeatureWeight: 1, PointWeight: 1, MaxCost: 5,
		Work: throttle.WorkModel{QueryMS: 40, FeatureMS: 1, VertexMS: 1}}
	for _, est := range []Estimator{nil, fixedEstimator{density.Estimate{Features: 3, Vertices: 40000}}} {
		plain, tiled := testToll(nil), testToll(nil)
		plain.Estimator, tiled.Estimator = est, est
		tiled.LayerWeights = map[string]throttle.Weights{"places": tileWeights, "districts": tileWeights}
		if got := tiled.TilePrice(tileDemand(2, "places")); got != tileWeights.MaxCost {
			t.Fatalf("estimator %v: a places tile costs %v, want its layer's max_cost %v", est, got, tileWeights.MaxCost)
		}
		for _, d := range demands {
			want, got := plain.GeofencePrice(d), tiled.GeofencePrice(d)
			if got != want {
				t.Errorf("estimator %v: %s on %q costs %v beside tile weights of that name, %v without", est, d.Kind, d.Layer, got, want)
			}
		}
	}
}

// A tile layer in shadow mode shadows its tiles only: a geofence query on
// the geofence layer of the same name is refused for an empty bucket, and
// its dry run says so.
func TestShadowTileLayerDoesNotShadowGeofence(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	toll.ShadowLayers = map[string]bool{"places": true}
	heavy := geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 50000, Limit: 100, Points: 1} // 60 tokens
	admitFence := func(target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "192.0.2.11:4000"
		r.Header.Set("X-API-Key", "b")
		w := httptest.NewRecorder()
		toll.AdmitGeofence(w, r, heavy)
		return w
	}
	if w := admitFence("/geofence/within"); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "40" {
		t.Fatalf("first 50 km: %d remaining %q", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	w := admitFence("/geofence/within?dry_run=1")
	var doc map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || doc["would_allow"] != false {
		t.Errorf("dry run of a second 50 km with 40 tokens left: %d %s, want would_allow false", w.Code, w.Body)
	}
	if w := admitFence("/geofence/within"); w.Code != http.StatusTooManyRequests || w.Header().Get("X-RateLimit-Shadow") != "" {
		t.Fatalf("second 50 km: %d shadow %q — the tile layer's shadow lifted the geofence layer's limit",
			w.Code, w.Header().Get("X-RateLimit-Shadow"))
	}
	// The tile layer itself is still in shadow mode.
	if w, ok := admit(t, toll, "b", tileDemand(2, "places")); !ok || w.Header().Get("X-RateLimit-Shadow") != "would-refuse" {
		t.Fatalf("places tile with 40 tokens left: ok=%v %d shadow %q", ok, w.Code, w.Header().Get("X-RateLimit-Shadow"))
	}
}
