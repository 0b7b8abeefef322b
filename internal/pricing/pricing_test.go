package pricing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// counter is a pgx tracer that counts the queries a pool sends.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedReadPool is the read role's pool with a query counter.
func tracedReadPool(t testing.TB) (*pgxpool.Pool, *counter) {
	t.Helper()
	cfg := testenv.PoolConfig(t, testenv.ReadDatabaseURL(t))
	c := &counter{}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, c
}

var places = density.Relation{Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Point}

// demoEstimator models the demo places layer (tiles) and fences, built now.
func demoEstimator(t testing.TB, pool *pgxpool.Pool) (*pricing.Estimator, *tiles.Layer) {
	t.Helper()
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	layer := cat.Layer("places")
	models := pricing.NewModels(pool, density.Options{})
	fences := density.Relation{Table: pgx.Identifier{"geotoll", "geofences"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Polygon}
	e, err := pricing.NewEstimator(models, []*tiles.Layer{layer},
		func(*tiles.Layer, maptile.Zoom) (density.Relation, bool) { return places, true },
		map[string]density.Relation{"places": {Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}},
		&fences)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go models.Run(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready := 0
		for _, st := range models.Status() {
			if st.Ready {
				ready++
			}
		}
		if ready == 3 {
			return e, layer
		}
		if time.Now().After(deadline) {
			t.Fatalf("models not built in 2 minutes: %+v", models.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pricing makes no database call: after the models are built, pricing
// hundreds of tiles and geofence queries sends the pool nothing.
func TestPricingMakesNoDatabaseCall(t *testing.T) {
	pool, queries := tracedReadPool(t)
	e, layer := demoEstimator(t, pool)
	gate := &toll.Toll{Default: throttle.DefaultWeights(), Estimator: e}
	gate.Default.Work = throttle.WorkModel{QueryMS: 1, FeatureMS: 0.01}
	before := queries.n.Load()
	for z := range maptile.Zoom(17) {
		for _, p := range []orb.Point{{13.4, 52.5}, {-30, -40}, {151.2, -33.9}} {
			tile := maptile.At(p, z)
			if _, ok := e.Tile(layer, tile); !ok {
				t.Fatalf("no estimate for %v with the model built", tile)
			}
			gate.TilePrice(tiles.Demand{Layers: []*tiles.Layer{layer}, Tile: tile})
		}
	}
	for _, d := range []geofence.Demand{
		{Kind: geofence.KindWithin, Layer: "places", RadiusM: 5000, At: []orb.Point{{13.4, 52.5}}},
		{Kind: geofence.KindBBox, Layer: "places", Bound: orb.Bound{Min: orb.Point{13, 52}, Max: orb.Point{14, 53}}},
		{Kind: geofence.KindContains, At: []orb.Point{{13.4, 52.5}}},
		{Kind: geofence.KindCheck, At: []orb.Point{{13.4, 52.5}, {2.35, 48.85}}},
	} {
		if _, ok := e.Geofence(d); !ok {
			t.Fatalf("no estimate for %+v with the models built", d)
		}
		gate.GeofencePrice(d)
	}
	if n := queries.n.Load() - before; n != 0 {
		t.Fatalf("pricing sent %d queries to the database", n)
	}
}

// Prices follow what a tile reads: an empty-ocean z2 tile costs about the
// query alone, and the densest z10 tile around a demo city far more than
// the median one.
func TestPricesFollowDensity(t *testing.T) {
	pool, _ := tracedReadPool(t)
	e, layer := demoEstimator(t, pool)
	gate := &toll.Toll{Default: throttle.DefaultWeights(), Estimator: e}
	price := func(tile maptile.Tile) float64 {
		return gate.TilePrice(tiles.Demand{Layers: []*tiles.Layer{layer}, Tile: tile})
	}
	ocean := maptile.At(orb.Point{-140, -40}, 2) // the South Pacific: no demo point
	if p := price(ocean); p > 2 {
		t.Errorf("an empty-ocean z2 tile costs %v tokens, want ≤ 2", p)
	}
	var z10 []float64
	for x := uint32(540); x < 580; x++ {
		for y := uint32(320); y < 350; y++ {
			z10 = append(z10, price(maptile.New(x, y, 10)))
		}
	}
	dense := price(maptile.At(orb.Point{13.4, 52.5}, 10)) // Berlin's centre
	median := quantile(z10, 0.5)
	if dense < 10*median {
		t.Errorf("the densest z10 tile costs %v, the median of %d z10 tiles %v: want at least 10×", dense, len(z10), median)
	}
}

func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s { // insertion sort: a test's few hundred values
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkTilePrice is the toll's whole price of a tile from the model:
// the relation of its zoom, the envelope and buffer, the model, the weights.
func BenchmarkTilePrice(b *testing.B) {
	pool, _ := tracedReadPool(b)
	e, layer := demoEstimator(b, pool)
	gate := &toll.Toll{Default: throttle.DefaultWeights(), Estimator: e}
	ts := []maptile.Tile{maptile.At(orb.Point{13.4, 52.5}, 14), maptile.At(orb.Point{13.4, 52.5}, 10),
		maptile.At(orb.Point{-30, -40}, 2), maptile.At(orb.Point{2.35, 48.85}, 6)}
	d := tiles.Demand{Layers: []*tiles.Layer{layer}}
	b.ReportAllocs()
	var sink float64
	for i := 0; b.Loop(); i++ {
		d.Tile = ts[i%len(ts)]
		sink += gate.TilePrice(d)
	}
	if sink == 0 {
		b.Fatal("no price")
	}
}

// A model is a picture of the data when it was built: rows inserted into an
// empty area are priced as nothing until the next refresh — and meanwhile
// settlement charges what their query really took — then priced as what
// they are.
func TestRefreshPicksUpNewRowsAndSettlementChargesMeanwhile(t *testing.T) {
	owner := testenv.Pool(t)
	ctx := t.Context()
	schema := pgx.Identifier{"pricing_test_" + strconv.FormatInt(time.Now().UnixNano(), 36)}.Sanitize()
	for _, q := range []string{
		`CREATE SCHEMA ` + schema,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO geotoll_reader`,
		`CREATE TABLE ` + schema + `.spots (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`,
		`CREATE INDEX ON ` + schema + `.spots USING gist (geom)`,
		`GRANT SELECT ON ` + schema + `.spots TO geotoll_reader`,
		// A few points far from the empty area, so the model has data.
		`INSERT INTO ` + schema + `.spots SELECT g, ST_Transform(ST_SetSRID(ST_MakePoint(10 + g * 0.001, 50), 4326), 3857) FROM generate_series(1, 100) g`,
	} {
		if _, err := owner.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = owner.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	pool, _ := tracedReadPool(t)
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "spots", Schema: schema[1 : len(schema)-1], Table: "spots", GeometryColumn: "geom", MaxFeatures: 200000}})
	if err != nil {
		t.Fatal(err)
	}
	layer := cat.Layer("spots")
	rel := density.Relation{Table: pgx.Identifier{schema[1 : len(schema)-1], "spots"}, GeometryColumn: "geom", SRID: 3857, Kind: density.Point}
	models := pricing.NewModels(pool, density.Options{Interval: time.Hour})
	e, err := pricing.NewEstimator(models, []*tiles.Layer{layer}, func(*tiles.Layer, maptile.Zoom) (density.Relation, bool) { return rel, true }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := models.Track(rel)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	empty := maptile.At(orb.Point{-60, -20}, 8) // no spot there yet
	if est, _ := e.Tile(layer, empty); est.Features > 0.5 {
		t.Fatalf("the empty tile estimates %v features", est.Features)
	}
	if _, err := owner.Exec(ctx, `INSERT INTO `+schema+`.spots
		SELECT 1000 + g, ST_Transform(ST_SetSRID(ST_MakePoint(-60 + (g % 300) * 0.002, -20 + (g / 300) * 0.002), 4326), 3857)
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	// The model still says empty: the door charges the query alone…
	gate := &toll.Toll{Store: throttle.NewMemoryStore(throttle.MemoryOptions{}), Prefix: "t",
		Tiers:   map[string]toll.Tier{toll.AnonymousTier: {Name: toll.AnonymousTier, Limit: throttle.Limit{Rate: 0.001, Capacity: 1000}}},
		Default: throttle.Weights{Base: 0.25, MaxCost: 500, Work: throttle.WorkModel{QueryMS: 0.5, FeatureMS: 0.01}}, Estimator: e, FailedAuth: throttle.Limit{Rate: 1, Capacity: 10},
		// About settlement, not the statement budget (a loaded machine may
		// take 250 ms), nor the settle floor (a fast one may take under 5 ms).
		TimeoutFloor: time.Minute, SettleFloor: time.Microsecond}

	h := toll.Finish(&tiles.Handler{Catalog: cat, Store: tiles.NewStore(pool), Gate: gate})
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/tiles/spots/8/"+strconv.Itoa(int(empty.X))+"/"+strconv.Itoa(int(empty.Y))+".mvt", nil)
	req = mux.SetURLVars(req, map[string]string{tiles.VarLayer: "spots", tiles.VarZ: "8",
		tiles.VarX: strconv.Itoa(int(empty.X)), tiles.VarY: strconv.Itoa(int(empty.Y)) + ".mvt"})
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("the tile: %d %s", w.Code, w.Body)
	}
	estimate, _ := strconv.ParseFloat(w.Header().Get("X-Request-Cost-Estimate"), 64)
	settled, _ := strconv.ParseFloat(w.Header().Get("X-Request-Cost"), 64)
	if estimate > 1 || settled <= estimate {
		t.Fatalf("before the refresh: estimate %v, settled %v — want the query's price at the door, and more once it ran", estimate, settled)
	}
	// …and the next refresh sees the rows.
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if est, _ := e.Tile(layer, empty); est.Features < 15000 {
		t.Fatalf("after the refresh the tile estimates %v features, want about 20000", est.Features)
	}
}

// contains and check on a layer are estimated on that layer's model, not
// the fences'; an unknown layer has no estimate (priced by size).
func TestLayerContainsIsEstimatedOnTheLayer(t *testing.T) {
	pool, _ := tracedReadPool(t)
	e, _ := demoEstimator(t, pool)
	at := []orb.Point{{13.4, 52.5}}
	onLayer, ok1 := e.Geofence(geofence.Demand{Kind: geofence.KindContains, Layer: "places", At: at})
	checked, ok2 := e.Geofence(geofence.Demand{Kind: geofence.KindCheck, Layer: "places", At: at})
	onFences, ok3 := e.Geofence(geofence.Demand{Kind: geofence.KindContains, At: at})
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("no estimate: %v %v %v", ok1, ok2, ok3)
	}
	if onLayer != checked || onLayer == onFences {
		t.Errorf("contains on places %+v, check on places %+v, contains on the fences %+v: want the first two alike, not the third", onLayer, checked, onFences)
	}
	if _, ok := e.Geofence(geofence.Demand{Kind: geofence.KindCheck, Layer: "nope", At: at}); ok {
		t.Error("an unknown layer has an estimate")
	}
}

// TestRebuiltRelationInheritsItsModel: when a layer's zoom reads a rebuild
// of the relation it read (the same stable name under a new generation),
// its tiles are estimated by the old relation's model until the new one's
// is built, never by size; another relation (an overview in place of the
// table, another kind) inherits nothing.
func TestRebuiltRelationInheritsItsModel(t *testing.T) {
	t.Parallel()
	pool, _ := tracedReadPool(t)
	tile := maptile.At(orb.Point{13.4, 52.52}, 12)
	first, layer := demoEstimator(t, pool) // built: its models are ready (an estimator is never changed by the one that replaces it)
	for _, tc := range []struct {
		name     string
		next     density.Relation
		inherits bool
	}{
		{"a rebuild", density.Relation{Table: pgx.Identifier{"geotoll", "places_v1z"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Point}, true},
		{"another relation", density.Relation{Table: pgx.Identifier{"geotoll", "places_ov_z12_v1z"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Point}, false},
		{"another kind", density.Relation{Table: pgx.Identifier{"geotoll", "places_v1z"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Polygon}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lazy pricing.Lazy
			lazy.Set(first)
			want, ok := lazy.Tile(layer, tile)
			if !ok || want.Features == 0 {
				t.Fatalf("the built model estimates %+v, %v", want, ok)
			}
			models := pricing.NewModels(pool, density.Options{})
			second, err := pricing.NewEstimator(models, []*tiles.Layer{layer},
				func(*tiles.Layer, maptile.Zoom) (density.Relation, bool) { return tc.next, true }, nil, nil) // never built: not run
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := second.Tile(layer, tile); ok {
				t.Fatal("an estimator over an unbuilt relation estimates on its own")
			}
			lazy.Set(second)
			got, ok := lazy.Tile(layer, tile)
			switch {
			case tc.inherits && (!ok || got != want):
				t.Errorf("after the switch: %+v, %v; want the predecessor's estimate %+v", got, ok, want)
			case !tc.inherits && ok:
				t.Errorf("after the switch: %+v from a model it should not inherit", got)
			}
			if st := models.Status(); len(st) != 1 || st[0].Relation != tc.next.String() || st[0].Inherited != tc.inherits {
				t.Errorf("status %+v: want relation %s, inherited %v", st, tc.next, tc.inherits)
			}
		})
	}
}

// A check (or a contains on a layer) that tests pieces reads at most two
// pieces' vertices per feature it finds (a point on a seam tests both),
// not the whole polygons the model holds: its estimate is capped there,
// and only there.
func TestPiecesCapTheVerticesOfACheck(t *testing.T) {
	pool, _ := tracedReadPool(t)
	e, _ := demoEstimator(t, pool)
	var lng, lat float64
	if err := pool.QueryRow(context.Background(), `SELECT ST_X(p), ST_Y(p) FROM (
	    SELECT ST_PointOnSurface(geom) AS p FROM geotoll.geofences ORDER BY ST_NPoints(geom) DESC, id LIMIT 1) AS f`).Scan(&lng, &lat); err != nil {
		t.Fatal(err)
	}
	at := []orb.Point{{lng, lat}, {lng, lat}}
	whole, ok1 := e.Geofence(geofence.Demand{Kind: geofence.KindCheck, At: at})
	pieces, ok2 := e.Geofence(geofence.Demand{Kind: geofence.KindCheck, At: at, PieceVertices: 4})
	if !ok1 || !ok2 {
		t.Fatalf("no estimate: %v %v", ok1, ok2)
	}
	if whole.Features <= float64(len(at)) || whole.Vertices <= 8*whole.Features {
		t.Fatalf("the largest fence's point estimates %+v: too few vertices for the test to tell", whole)
	}
	found := whole.Features - float64(len(at)) // less each point's own probe
	if pieces.Features != whole.Features || pieces.Vertices != 8*found {
		t.Errorf("pieces of 4 vertices: %+v, want %v features found, of two such pieces each (whole polygons: %+v)", pieces, found, whole)
	}
	if big, _ := e.Geofence(geofence.Demand{Kind: geofence.KindCheck, At: at, PieceVertices: 1 << 30}); big != whole {
		t.Errorf("pieces larger than the polygons: %+v, want the whole polygons' %+v", big, whole)
	}
}

// A batch check pays for every point it probes, on the demo fences too: a
// batch of points over the ocean, in no fence's box, is priced in
// proportion to its points — not at the query alone (the base price)
// whatever their number — and a batch of points in a city, which finds
// fences, costs more than as many ocean points.
func TestBatchOfPointsInNoFencePaysPerPoint(t *testing.T) {
	pool, _ := tracedReadPool(t)
	e, _ := demoEstimator(t, pool)
	gate := &toll.Toll{Default: throttle.DefaultWeights(), Estimator: e}
	batch := func(n int, lon, lat float64) geofence.Demand {
		at := make([]orb.Point, n)
		for i := range at {
			at[i] = orb.Point{lon + 0.0001*float64(i%100), lat + 0.0001*float64(i/100)}
		}
		return geofence.Demand{Kind: geofence.KindCheck, Points: n, At: at, PieceVertices: geofence.FencePieceVertices}
	}
	price := map[int]float64{}
	for _, n := range []int{100, 1000, 10000} {
		d := batch(n, -140, -40) // the South Pacific
		est, ok := e.Geofence(d)
		if !ok {
			t.Fatal("no estimate with the models built")
		}
		price[n] = gate.GeofencePrice(d)
		t.Logf("%5d ocean points: %+v, %.4f tokens", n, est, price[n])
	}
	for _, n := range []int{1000, 10000} {
		if r := price[n] / price[n/10]; r < 4 {
			t.Errorf("%d ocean points cost %v tokens, %d cost %v: want the price to follow the points (×%.1f)", n, price[n], n/10, price[n/10], r)
		}
	}
	// 1,000 probes take 1.2–1.6 ms, 0.12–0.16 tokens: the default fence
	// model, 1 µs a feature, prices them at 0.11.
	if p := price[1000]; p < 0.08 {
		t.Errorf("1,000 ocean points cost %v tokens, want about 0.1 (their probes)", p)
	}
	if city := gate.GeofencePrice(batch(1000, 13.4, 52.52)); city <= price[1000] {
		t.Errorf("1,000 points in Berlin cost %v, as many ocean points %v: want more", city, price[1000])
	}
}

// within reads a line's or polygon's vertices on the spheroid, twice: on
// a polygon layer its estimate counts GeographyVertices for each vertex
// the circle's model reads, and its features as they are; bbox on the same
// layer, and within on a point layer, count vertices once. Counted once,
// a within beside a fence of 300,000 vertices was priced at 3 tokens, cut
// at the deadline those paid for (its work took some 280 ms), and charged
// 28 — every time it was asked again.
func TestWithinOnPolygonsCountsGeographyVertices(t *testing.T) {
	pool, _ := tracedReadPool(t)
	models := pricing.NewModels(pool, density.Options{})
	fences := density.Relation{Table: pgx.Identifier{"geotoll", "geofences"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Polygon}
	points := density.Relation{Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}
	e, err := pricing.NewEstimator(models, nil, nil, map[string]density.Relation{"fences": fences, "places": points}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := models.Build(ctx); err != nil {
		t.Fatal(err)
	}
	var at orb.Point
	if err := pool.QueryRow(ctx, `SELECT ST_X(p), ST_Y(p) FROM (SELECT ST_PointOnSurface(geom) AS p FROM geotoll.geofences ORDER BY id LIMIT 1) AS s`).Scan(&at[0], &at[1]); err != nil {
		t.Fatal(err)
	}
	model := func(rel density.Relation) *density.Model {
		r, err := models.Track(rel) // the estimator's own refresher
		if err != nil {
			t.Fatal(err)
		}
		return r.Model()
	}
	const radius = 5000
	box := orb.Bound{Min: orb.Point{at[0] - 0.5, at[1] - 0.5}, Max: orb.Point{at[0] + 0.5, at[1] + 0.5}}
	for _, tc := range []struct {
		layer  string
		rel    density.Relation
		factor float64
	}{
		{"fences", fences, pricing.GeographyVertices},
		{"places", points, 1},
	} {
		raw := model(tc.rel).Circle(at, radius)
		if tc.layer == "fences" && raw.Vertices == 0 {
			t.Fatalf("the model reads no fence vertex around %v", at)
		}
		within, ok := e.Geofence(geofence.Demand{Kind: geofence.KindWithin, Layer: tc.layer, At: []orb.Point{at}, RadiusM: radius, Limit: 100})
		if !ok || within.Features != raw.Features || within.Vertices != tc.factor*raw.Vertices {
			t.Errorf("within on %s: %+v (%v), want %g features and %g × %g vertices", tc.layer, within, ok, raw.Features, tc.factor, raw.Vertices)
		}
		bbox, ok := e.Geofence(geofence.Demand{Kind: geofence.KindBBox, Layer: tc.layer, Bound: box, Limit: 100})
		if want := model(tc.rel).BBox(box); !ok || bbox != want {
			t.Errorf("bbox on %s: %+v (%v), want %+v", tc.layer, bbox, ok, want)
		}
	}
}
