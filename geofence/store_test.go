package geofence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/geojson"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// Integration tests: the real PostGIS of `make test`, migrated and seeded.
// Reads go through the restricted read role, fence writes through
// geotoll_fence_writer, as in production.

// demoLayers are the layers `geotoll serve` offers by default.
func demoLayers() []Layer {
	return []Layer{
		{Name: "places", Table: "geotoll.places", GeometryColumn: "geom", Properties: []string{"name", "kind", "city", "rank"}},
		{Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom", Properties: []string{"name", "city", "population"}},
		{Name: "geofences", Table: "geotoll.geofences", GeometryColumn: "geom", Properties: []string{"name", "kind"}},
	}
}

func demoCatalog(t testing.TB, extra ...Layer) *Catalog {
	t.Helper()
	c, err := NewCatalog(append(demoLayers(), extra...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writerPool connects as geotoll_fence_writer: GEOTOLL_TEST_WRITER_DATABASE_URL,
// or the test database URL with that user (the test cluster trusts
// loopback connections).
func writerPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return writerPoolWith(t, nil)
}

// writerPoolWith is writerPool with the session settings params (such as
// a lock_timeout longer than the role's).
func writerPoolWith(t testing.TB, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(writerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("GEOTOLL_TEST_WRITER_DATABASE_URL") == "" {
		cfg.ConnConfig.User = "geotoll_fence_writer"
		cfg.ConnConfig.Password = ""
	}
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("connect as geotoll_fence_writer: %v (migrated? run `geotoll migrate`)", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func writerURL(t testing.TB) string {
	if u := os.Getenv("GEOTOLL_TEST_WRITER_DATABASE_URL"); u != "" {
		return u
	}
	return testenv.DatabaseURL(t)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// geoTable creates a table of points at known geodesic distances from two
// centres, one on the equator and one at 70°N, plus points either side of
// the antimeridian, readable by the read role and dropped when the test
// ends. Point ids: centre index × 1000 + 100 × (1 inside, 2 outside) +
// azimuth index.
func geoTable(t *testing.T) (Layer, map[string][2]float64) {
	t.Helper()
	owner := testenv.Pool(t)
	ctx := ctxT(t)
	name := "geofence_test_" + randomSuffix()
	table := pgx.Identifier{"public", name}.Sanitize()
	centres := map[string][2]float64{"equator": {0, 0}, "north70": {20, 70}}
	stmts := []string{
		`CREATE TABLE ` + table + ` (id bigint PRIMARY KEY, label text NOT NULL, geom geometry(Point, 4326) NOT NULL)`,
		`CREATE INDEX ON ` + table + ` USING gist ((geom::geography))`,
		`CREATE INDEX ON ` + table + ` USING gist (geom)`,
	}
	for ci, c := range []string{"equator", "north70"} {
		xy := centres[c]
		for di, d := range []float64{4990, 5010} {
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (id, label, geom)
				SELECT %d + a, '%s %gm az ' || (a * 45), ST_Project(ST_MakePoint(%g, %g)::geography, %g, radians(a * 45))::geometry
				FROM generate_series(0, 7) AS a`, table, (ci+1)*1000+(di+1)*100, c, d, xy[0], xy[1], d))
		}
	}
	stmts = append(stmts,
		`INSERT INTO `+table+` VALUES (1, 'east of the antimeridian', ST_SetSRID(ST_MakePoint(179.9, 0.5), 4326)),
			(2, 'west of the antimeridian', ST_SetSRID(ST_MakePoint(-179.9, 0.5), 4326)),
			(3, 'on the antimeridian', ST_SetSRID(ST_MakePoint(180, 0.25), 4326)),
			(4, 'greenwich', ST_SetSRID(ST_MakePoint(0.5, 0.5), 4326))`,
		`ANALYZE `+table,
		`GRANT SELECT ON `+table+` TO geotoll_reader`,
	)
	for _, s := range stmts {
		if _, err := owner.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return Layer{Name: "geotest", Table: "public." + name, GeometryColumn: "geom", Properties: []string{"label"}}, centres
}

type decodedFeature struct {
	ID         int64
	Geometry   orb.Geometry
	Properties map[string]any
}

func decode(t *testing.T, fs []Feature) []decodedFeature {
	t.Helper()
	out := make([]decodedFeature, len(fs))
	for i, f := range fs {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Type       string
			ID         int64
			Geometry   json.RawMessage
			Properties map[string]any
		}
		if err := json.Unmarshal(b, &doc); err != nil || doc.Type != "Feature" {
			t.Fatalf("feature %s: %v", b, err)
		}
		g, err := unmarshalGeometry(doc.Geometry)
		if err != nil {
			t.Fatalf("geometry %s: %v", doc.Geometry, err)
		}
		out[i] = decodedFeature{ID: doc.ID, Geometry: g, Properties: doc.Properties}
	}
	return out
}

func unmarshalGeometry(raw json.RawMessage) (orb.Geometry, error) {
	g, err := geojson.UnmarshalGeometry(raw)
	if err != nil {
		return nil, err
	}
	return g.Geometry(), nil
}

func TestWithinIsGeographyCorrect(t *testing.T) {
	layer, centres := geoTable(t)
	cat := demoCatalog(t, layer)
	store := NewStore(testenv.ReadPool(t))
	owner := testenv.Pool(t)
	ctx := ctxT(t)
	for ci, c := range []string{"equator", "north70"} {
		t.Run(c, func(t *testing.T) {
			xy := centres[c]
			fs, _, err := store.Within(ctx, WithinQuery{Layer: cat.Layer("geotest"), Lng: xy[0], Lat: xy[1], Radius: 5000, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := decode(t, fs)
			// Exactly the eight points 4990 m away, in all eight directions —
			// at 70°N the ones due east and west lie 0.131° of longitude away,
			// which a radius taken as 5000/111320 degrees would miss — and
			// none of those 5010 m away.
			var ids []int64
			for _, f := range got {
				ids = append(ids, f.ID)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			var want []int64
			for a := range 8 {
				want = append(want, int64((ci+1)*1000+100+a))
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("within 5 km of %s: ids %v, want %v", c, ids, want)
			}
			// distance_m is ST_Distance on geography, and orders the answer.
			prev := -1.0
			for _, f := range got {
				d, ok := f.Properties[DistanceProperty].(float64)
				if !ok {
					t.Fatalf("feature %d has no distance_m: %v", f.ID, f.Properties)
				}
				var ref float64
				if err := owner.QueryRow(ctx, `SELECT ST_Distance(geom::geography, ST_MakePoint($1, $2)::geography) FROM `+
					ident(layer.Table)+` WHERE id = $3`, xy[0], xy[1], f.ID).Scan(&ref); err != nil {
					t.Fatal(err)
				}
				if math.Abs(d-ref) > 1e-6 || math.Abs(d-4990) > 0.01 {
					t.Errorf("feature %d: distance_m %v, ST_Distance %v, want about 4990", f.ID, d, ref)
				}
				if d < prev {
					t.Errorf("feature %d at %v m comes after one at %v m", f.ID, d, prev)
				}
				prev = d
				if _, ok := f.Properties["label"].(string); !ok {
					t.Errorf("feature %d lacks its label property: %v", f.ID, f.Properties)
				}
			}
		})
	}
}

// TestWithinMatchesSTDistanceOnSeedData compares within against a
// brute-force ST_Distance on geography over the seeded places, near the
// equator (Quito) and at 70°N (Tromsø).
func TestWithinMatchesSTDistanceOnSeedData(t *testing.T) {
	cat := demoCatalog(t)
	store := NewStore(testenv.ReadPool(t))
	owner := testenv.Pool(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		name     string
		lng, lat float64
	}{{"quito, near the equator", -78.4678, -0.1807}, {"tromsø, 69.65°N", 18.9553, 69.6492}} {
		t.Run(c.name, func(t *testing.T) {
			fs, _, err := store.Within(ctx, WithinQuery{Layer: cat.Layer("places"), Lng: c.lng, Lat: c.lat, Radius: 5000, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := owner.Query(ctx, `SELECT id, ST_Distance(geom::geography, ST_MakePoint($1, $2)::geography) AS d
				FROM geotoll.places
				WHERE geom && ST_Expand(ST_SetSRID(ST_MakePoint($1, $2), 4326), 1)
				  AND ST_Distance(geom::geography, ST_MakePoint($1, $2)::geography) <= 5000
				ORDER BY d, id`, c.lng, c.lat)
			if err != nil {
				t.Fatal(err)
			}
			type hit struct {
				id int64
				d  float64
			}
			want, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
				var h hit
				return h, r.Scan(&h.id, &h.d)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 {
				t.Fatal("the reference finds no place: the test proves nothing")
			}
			// Both are ordered by (distance, id): within keeps the nearest 1000.
			t.Logf("ST_Distance finds %d places within 5 km", len(want))
			want = want[:min(len(want), 1000)]
			got := decode(t, fs)
			if len(got) != len(want) {
				t.Fatalf("within: %d places, ST_Distance: %d", len(got), len(want))
			}
			for i := range want {
				d, _ := got[i].Properties[DistanceProperty].(float64)
				if got[i].ID != want[i].id || math.Abs(d-want[i].d) > 1e-6 {
					t.Fatalf("place %d: within says %d at %v m, ST_Distance says %d at %v m", i, got[i].ID, d, want[i].id, want[i].d)
				}
			}
		})
	}
}

// planUses runs EXPLAIN (FORMAT JSON) of sql with args and returns every
// node type and index name of the plan.
func planOf(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (nodes, indexes []string) {
	t.Helper()
	var plan []map[string]any
	if err := pool.QueryRow(ctxT(t), "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if s, ok := n["Node Type"].(string); ok {
			nodes = append(nodes, s+" on "+fmt.Sprint(n["Relation Name"]))
		}
		if s, ok := n["Index Name"].(string); ok {
			indexes = append(indexes, s)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	for _, p := range plan {
		if root, ok := p["Plan"].(map[string]any); ok {
			walk(root)
		}
	}
	return nodes, indexes
}

func TestQueriesUseTheIndexes(t *testing.T) {
	cat := demoCatalog(t)
	pool := testenv.ReadPool(t)
	places := cat.Layer("places")
	tests := []struct {
		name  string
		sql   string
		args  []any
		index string
		table string
	}{
		{"within 5 km", places.WithinSQL(), []any{13.4, 52.5, 5000.0, 100, 20000}, "places_geom_geog_gist", "places"},
		{"within 50 km", places.WithinSQL(), []any{13.4, 52.5, 50000.0, 1000, 20000}, "places_geom_geog_gist", "places"},
		{"within on districts", cat.Layer("districts").WithinSQL(), []any{13.4, 52.5, 5000.0, 100, 20000}, "districts_geom_geog_gist", "districts"},
		{"bbox", places.BBoxSQL(), []any{13.0, 52.0, 14.0, 53.0, nil, nil, 100, 20000}, "places_geom_gist", "places"},
		{"bbox across the antimeridian", places.BBoxSQL(), []any{175.0, -20.0, 180.0, -15.0, -180.0, -175.0, 100, 20000}, "places_geom_gist", "places"},
		{"bbox on districts", cat.Layer("districts").BBoxSQL(), []any{13.0, 52.0, 14.0, 53.0, nil, nil, 100, 20000}, "districts_geom_gist", "districts"},
		// A long, thin box holding few places, with a limit of 1: walking the
		// id index and filtering row after row until one is in the box read
		// tens of thousands of rows where the price counted the box's few.
		{"bbox of a sparse band, limit 1", places.BBoxSQL(), []any{20.0, 52.4, 120.0, 52.6, nil, nil, 1, 20000}, "places_geom_gist", "places"},
		{"check", checkSQL, []any{[]float64{13.4, 2.35}, []float64{52.5, 48.85}}, "geofence_pieces_geom_gist", "geofence_pieces"},
		{"contains", containsSQL, []any{13.4, 52.5, 1000, 20000}, "geofence_pieces_geom_gist", "geofence_pieces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes, indexes := planOf(t, pool, tt.sql, tt.args...)
			if !slices.Contains(indexes, tt.index) {
				t.Errorf("plan does not use %s: %v", tt.index, nodes)
			}
			if slices.Contains(nodes, "Seq Scan on "+tt.table) {
				t.Errorf("plan scans %s sequentially: %v", tt.table, nodes)
			}
		})
	}
}

func TestBBoxAcrossTheAntimeridian(t *testing.T) {
	layer, _ := geoTable(t)
	cat := demoCatalog(t, layer)
	store := NewStore(testenv.ReadPool(t))
	ctx := ctxT(t)
	ids := func(b BBox, l *Layer) []int64 {
		t.Helper()
		fs, _, err := store.BBox(ctx, BBoxQuery{Layer: l, Box: b, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	// 179..-179 is the 2° around the antimeridian, not the 358° around
	// Greenwich.
	b, err := ParseBBox("179,0,-179,1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(b, cat.Layer("geotest")); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("bbox 179,0,-179,1: ids %v, want [1 2 3] (both sides and the line itself)", got)
	}
	if got := ids(BBox{0.4, 0.4, 0.6, 0.6}, cat.Layer("geotest")); !slices.Equal(got, []int64{4}) {
		t.Errorf("bbox 0.4,0.4,0.6,0.6: ids %v, want [4]", got)
	}

	// On the demo data around Suva (178.44°E): the split box finds exactly
	// the union of its two halves, in id order.
	places := cat.Layer("places")
	cross := BBox{175, -20, -175, -15}
	east := ids(BBox{175, -20, 180, -15}, places)
	west := ids(BBox{-180, -20, -175, -15}, places)
	want := append(append([]int64{}, east...), west...)
	slices.Sort(want)
	want = slices.Compact(want)
	got := ids(cross, places)
	if len(east) == 0 || !slices.Equal(got, want) {
		t.Errorf("antimeridian box: %d places, halves give %d (east %d, west %d)", len(got), len(want), len(east), len(west))
	}
}

// fence creates a fence through the writer and deletes it when the test
// ends.
func fence(t *testing.T, w *Store, name string, rings ...orb.Ring) Feature {
	t.Helper()
	f, err := w.CreateFence(ctxT(t), FenceInput{Name: name, Kind: "test", Geometry: orb.MultiPolygon{orb.Polygon(rings)}})
	if err != nil {
		t.Fatalf("create fence %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.DeleteFence(ctx, f.ID, Preconditions{}); err != nil && !errors.Is(err, errNoFence) {
			t.Errorf("delete fence %d: %v", f.ID, err)
		}
	})
	return f
}

// square is a clockwise ring (as many clients draw them) of side 1° with
// its south-west corner at (x, y).
func square(x, y float64) orb.Ring {
	return orb.Ring{{x, y}, {x, y + 1}, {x + 1, y + 1}, {x + 1, y}, {x, y}}
}

func TestContainsAndCheckCountTheBoundaryAsInside(t *testing.T) {
	writer := NewStore(writerPool(t))
	reader := NewStore(testenv.ReadPool(t))
	ctx := ctxT(t)
	// A fence in the South Atlantic, where no demo fence lies.
	f := fence(t, writer, "boundary test "+randomSuffix(), square(-30, -40))
	cases := []struct {
		name   string
		pt     orb.Point
		inside bool
	}{
		{"inside", orb.Point{-29.5, -39.5}, true},
		{"on the south edge", orb.Point{-29.5, -40}, true},
		{"on the east edge", orb.Point{-29, -39.25}, true},
		{"on a vertex", orb.Point{-30, -40}, true},
		{"just outside", orb.Point{-28.999999, -39.5}, false},
		{"far away", orb.Point{-10, -10}, false},
	}
	var pts []Point
	for _, c := range cases {
		pts = append(pts, Point{ID: c.name, Lng: c.pt[0], Lat: c.pt[1]})
	}
	batch, err := reader.Check(ctx, CheckQuery{Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		fs, _, err := reader.Contains(ctx, ContainsQuery{Lng: c.pt[0], Lat: c.pt[1], Limit: 1000, MaxVertices: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var single []int64
		for _, g := range fs {
			single = append(single, g.ID)
		}
		if got := slices.Contains(single, f.ID); got != c.inside {
			t.Errorf("contains %s %v: %v, want %v", c.name, c.pt, got, c.inside)
		}
		if got := slices.Contains(batch[i], f.ID); got != c.inside {
			t.Errorf("check %s %v: %v, want %v", c.name, c.pt, got, c.inside)
		}
		if !slices.Equal(batch[i], append([]int64{}, single...)) && !(len(batch[i]) == 0 && len(single) == 0) {
			t.Errorf("%s: check says %v, contains says %v", c.name, batch[i], single)
		}
	}
}

// countingTracer records every statement pgx sends.
type countingTracer struct {
	mu      sync.Mutex
	queries []string // Query, QueryRow, Exec
	batched []string // statements inside batches
	batches int
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries = append(c.queries, d.SQL)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	return ctx
}
func (c *countingTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batched = append(c.batched, d.SQL)
}
func (c *countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *countingTracer) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries, c.batched, c.batches = nil, nil, 0
}

func tracedReadPool(t testing.TB, tr *countingTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// thousandPoints returns 1000 points: seeded places (many inside demo
// fences, which sit around the same cities) and a spread of others.
func thousandPoints(t testing.TB) []Point {
	t.Helper()
	rows, err := testenv.Pool(t).Query(context.Background(),
		`SELECT ST_X(geom), ST_Y(geom) FROM geotoll.places ORDER BY id LIMIT 900`)
	if err != nil {
		t.Fatal(err)
	}
	var pts []Point
	var x, y float64
	if _, err := pgx.ForEachRow(rows, []any{&x, &y}, func() error {
		pts = append(pts, Point{ID: fmt.Sprintf("v%d", len(pts)), Lng: x, Lat: y})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(pts) < 1000; i++ {
		pts = append(pts, Point{ID: fmt.Sprintf("v%d", len(pts)), Lng: -180 + float64(i)*3.6, Lat: -60 + float64(i%100)*1.2})
	}
	return pts
}

func TestCheckAThousandPointsInOneQuery(t *testing.T) {
	tr := &countingTracer{}
	store := NewStore(tracedReadPool(t, tr))
	ctx := ctxT(t)
	pts := thousandPoints(t)

	tr.reset()
	got, err := store.Check(ctx, CheckQuery{Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	// One batch, one round trip: BEGIN, the settings, the check itself
	// (once), the database's clock of the read (for settlement), COMMIT;
	// nothing outside it.
	checks := 0
	for _, q := range tr.batched {
		lq := strings.ToLower(q)
		switch {
		case q == checkSQL:
			checks++
		case strings.HasPrefix(lq, "begin"), lq == "commit", strings.HasPrefix(lq, "select set_config("),
			strings.HasPrefix(lq, "select (extract(epoch from clock_timestamp() - now())"):
		default:
			t.Errorf("unexpected statement %q in the batch", q)
		}
	}
	if tr.batches != 1 || checks != 1 || len(tr.queries) != 0 {
		t.Errorf("check of %d points sent %d batches (%q) and %q", len(pts), tr.batches, tr.batched, tr.queries)
	}
	if len(got) != len(pts) {
		t.Fatalf("%d answers for %d points", len(got), len(pts))
	}

	// The one query agrees with a thousand single contains calls.
	inside := 0
	for i, p := range pts {
		fs, _, err := store.Contains(ctx, ContainsQuery{Lng: p.Lng, Lat: p.Lat, Limit: 1000, MaxVertices: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		single := []int64{}
		for _, f := range fs {
			single = append(single, f.ID)
		}
		if !slices.Equal(got[i], single) {
			t.Fatalf("point %d %+v: check %v, contains %v", i, p, got[i], single)
		}
		if len(single) > 0 {
			inside++
		}
	}
	if inside < 50 {
		t.Errorf("only %d of 1000 points fall in a fence: the test proves little", inside)
	}
	t.Logf("%d of %d points inside at least one fence", inside, len(pts))
}

func TestFenceAdminRoundTrip(t *testing.T) {
	writer := NewStore(writerPool(t))
	reader := NewStore(testenv.ReadPool(t))
	ctx := ctxT(t)
	name := "admin test " + randomSuffix()
	f := fence(t, writer, name, square(-35, -45))

	// Stored counter-clockwise (RFC 7946), though sent clockwise.
	got, err := reader.Fence(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := decode(t, []Feature{got})[0]
	mp, ok := d.Geometry.(orb.MultiPolygon)
	if !ok || len(mp) != 1 || len(mp[0]) != 1 {
		t.Fatalf("stored geometry %T %v", d.Geometry, d.Geometry)
	}
	if o := mp[0][0].Orientation(); o != orb.CCW {
		t.Errorf("exterior ring orientation %v, want counter-clockwise", o)
	}
	if d.Properties["name"] != name || d.Properties["kind"] != "test" || d.Properties["created_at"] == nil {
		t.Errorf("properties %v", d.Properties)
	}

	// Replace: new name and geometry, with a hole (clockwise after normalising).
	outer := orb.Ring{{-35, -45}, {-33, -45}, {-33, -43}, {-35, -43}, {-35, -45}}
	hole := orb.Ring{{-34.5, -44.5}, {-34.5, -43.5}, {-33.5, -43.5}, {-33.5, -44.5}, {-34.5, -44.5}}
	rep, err := writer.ReplaceFence(ctx, f.ID, FenceInput{Name: name + " v2", Kind: "test", Geometry: orb.MultiPolygon{{outer, hole}}}, Preconditions{})
	if err != nil {
		t.Fatal(err)
	}
	rd := decode(t, []Feature{rep})[0]
	rmp := rd.Geometry.(orb.MultiPolygon)
	if rd.Properties["name"] != name+" v2" || len(rmp[0]) != 2 || rmp[0][0].Orientation() != orb.CCW || rmp[0][1].Orientation() != orb.CW {
		t.Errorf("replaced fence %v %v", rd.Properties, rmp)
	}
	// The hole is outside the fence; its edge is the fence's boundary.
	for _, c := range []struct {
		pt     orb.Point
		inside bool
	}{{orb.Point{-34, -44}, false}, {orb.Point{-34.5, -44}, true}, {orb.Point{-34.75, -44}, true}} {
		fs, _, err := reader.Contains(ctx, ContainsQuery{Lng: c.pt[0], Lat: c.pt[1], Limit: 10, MaxVertices: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if in := len(fs) == 1 && fs[0].ID == f.ID; in != c.inside {
			t.Errorf("contains %v = %v, want %v", c.pt, in, c.inside)
		}
	}

	page, _, err := reader.Fences(ctx, FencesQuery{After: f.ID - 1, Limit: 1, MaxVertices: 1 << 20})
	if err != nil || len(page) != 1 || page[0].ID != f.ID {
		t.Errorf("Fences(after %d, 1) = %v, %v", f.ID-1, page, err)
	}

	if err := writer.DeleteFence(ctx, f.ID, Preconditions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Fence(ctx, f.ID); !errors.Is(err, errNoFence) {
		t.Errorf("Fence after delete: %v", err)
	}
	wantProblem(t, writer.DeleteFence(ctx, f.ID, Preconditions{}), problem.NotFound, "id")
	_, err = writer.ReplaceFence(ctx, f.ID, FenceInput{Name: "x", Kind: "y", Geometry: orb.MultiPolygon{{square(0, 0)}}}, Preconditions{})
	wantProblem(t, err, problem.NotFound, "id")
}

func TestInvalidPolygonIs422WithPostGISReason(t *testing.T) {
	writer := NewStore(writerPool(t))
	ctx := ctxT(t)
	bowtie := orb.Ring{{-30, -40}, {-29, -39}, {-29, -40}, {-30, -39}, {-30, -40}}
	_, err := writer.CreateFence(ctx, FenceInput{Name: "bowtie", Kind: "test", Geometry: orb.MultiPolygon{{bowtie}}})
	wantProblem(t, err, problem.OutOfRange, "geometry")
	p := problem.From(err)
	if p.Extra["reason"] != "Self-intersection" || !strings.Contains(p.Detail, "Self-intersection") {
		t.Errorf("problem %+v, want PostGIS's reason Self-intersection", p)
	}
	if loc, ok := p.Extra["location"].([]float64); !ok || math.Abs(loc[0]+29.5) > 1e-9 || math.Abs(loc[1]+39.5) > 1e-9 {
		t.Errorf("location %v, want [-29.5, -39.5]", p.Extra["location"])
	}
	// Overlapping parts of a MultiPolygon are invalid too.
	_, err = writer.CreateFence(ctx, FenceInput{Name: "overlap", Kind: "test",
		Geometry: orb.MultiPolygon{{square(-30, -40)}, {square(-29.5, -39.5)}}})
	wantProblem(t, err, problem.OutOfRange, "geometry")
}

func TestRolesAreConfined(t *testing.T) {
	ctx := ctxT(t)
	writer := writerPool(t)
	for _, sql := range []string{
		`SELECT count(*) FROM geotoll.places`,
		`INSERT INTO geotoll.districts (id, name, city, population, geom) VALUES (-1, 'x', 'x', 0, ST_GeomFromText('POLYGON((0 0,0 1,1 1,0 0))', 4326))`,
		`CREATE TABLE geotoll.intruder (id int)`,
		`TRUNCATE geotoll.geofences`,
	} {
		_, err := writer.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("geotoll_fence_writer: %s: %v, want permission denied", sql, err)
		}
	}
	var timeout string
	if err := writer.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout == "0" {
		t.Errorf("geotoll_fence_writer statement_timeout = %q (%v), want a role-level ceiling", timeout, err)
	}
	// The read role cannot write fences.
	_, err := testenv.ReadPool(t).Exec(ctx, `DELETE FROM geotoll.geofences WHERE id = -1`)
	if err == nil {
		t.Error("geotoll_reader deleted from geofences")
	}
}

func TestStatementTimeoutIs503(t *testing.T) {
	slow := Layer{Name: "slow", Table: "geotoll.places", GeometryColumn: "geom", StatementTimeout: time.Millisecond}
	c, err := NewCatalog([]Layer{slow})
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(testenv.ReadPool(t))
	store.RetryAfter = 4
	_, _, err = store.Within(ctxT(t), WithinQuery{Layer: c.Layer("slow"), Lng: 13.4, Lat: 52.5, Radius: 50000, Limit: 1000})
	wantProblem(t, err, problem.Timeout, "")
	if p := problem.From(err); p.RetryAfter != 4 || problem.Status(p.Code) != 503 {
		t.Errorf("timeout problem %+v", p)
	}
}

// TestCancelledRequestCancelsTheQuery: a request whose context ends while
// its query runs stops the query in PostgreSQL, not merely abandons it. The
// layer is a view that sleeps 0.5 s per row for 20 s, cut at 10 s by the
// layer's statement_timeout: only a cancel ends it within 5 s.
func TestCancelledRequestCancelsTheQuery(t *testing.T) {
	t.Parallel()
	owner, setup := testenv.Pool(t), ctxT(t)
	schema := "geofence_test_" + randomSuffix() // also the store's application_name
	q := pgx.Identifier{schema}.Sanitize()
	for _, stmt := range []string{
		`CREATE SCHEMA ` + q,
		`CREATE TABLE ` + q + `.src (id bigint PRIMARY KEY, geom geometry(Point, 4326) NOT NULL)`,
		`INSERT INTO ` + q + `.src SELECT g, ST_SetSRID(ST_MakePoint(g * 0.001, 0), 4326) FROM generate_series(1, 40) g`,
		// The lateral subquery refers to s, so it runs (and sleeps) once per row.
		`CREATE VIEW ` + q + `.slow AS SELECT s.id, s.geom FROM ` + q + `.src s, LATERAL (SELECT pg_sleep(0.5) WHERE s.id IS NOT NULL) z`,
		`GRANT USAGE ON SCHEMA ` + q + ` TO geotoll_reader`,
		`GRANT SELECT ON ` + q + `.slow TO geotoll_reader`,
	} {
		if _, err := owner.Exec(setup, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, `DROP SCHEMA `+q+` CASCADE`); err != nil {
			t.Errorf("drop %s: %v", schema, err)
		}
	})
	running := func() int {
		var n int
		err := owner.QueryRow(setup, `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND application_name = $1`, schema).Scan(&n)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		return n
	}
	waitRunning := func(what string, want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); running() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 5 s, %d backends run the slow query; want %d (%s)", running(), want, what)
			}
		}
	}

	cat := demoCatalog(t, Layer{Name: "slow", Table: schema + ".slow", GeometryColumn: "geom", StatementTimeout: 10 * time.Second})
	// The store's own pool names its sessions, so pg_stat_activity tells its
	// query from any other test's.
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	pool, err := pgxpool.NewWithConfig(setup, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := NewStore(pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, _, err := store.Within(ctx, WithinQuery{Layer: cat.Layer("slow"), Lng: 0, Lat: 0, Radius: 50000, Limit: 10})
		errc <- err
	}()
	waitRunning("the query started", 1)
	time.Sleep(200 * time.Millisecond) // well into the query
	cancel()
	select {
	case err := <-errc:
		wantProblem(t, err, problem.Unavailable, "")
	case <-time.After(5 * time.Second):
		t.Fatal("Within did not return within 5 s of its context being cancelled")
	}
	waitRunning("the query cancelled in PostgreSQL", 0)
}

// A box of no width or no height is the line or point it is: ST_MakeEnvelope
// made it a flat, invalid polygon, and ST_Intersects missed features on it
// (a fence holding the point 13.4,52.5 was not in that point's bbox).
func TestBBoxOfNoWidthOrHeightIsALineOrAPoint(t *testing.T) {
	cat := demoCatalog(t)
	pool := testenv.ReadPool(t)
	store := NewStore(pool)
	ctx := ctxT(t)
	for _, tc := range []struct {
		box BBox
		wkt string
	}{
		{BBox{13.4, 52.5, 13.4, 52.5}, "POINT(13.4 52.5)"},
		{BBox{13.3, 52.5, 13.4, 52.5}, "LINESTRING(13.3 52.5, 13.4 52.5)"},
		{BBox{13.4, 52.4, 13.4, 52.6}, "LINESTRING(13.4 52.4, 13.4 52.6)"},
	} {
		for _, layer := range []string{"geofences", "districts"} {
			var want []int64
			err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM `+cat.Layer(layer).Table+`
				WHERE ST_Intersects(geom, ST_GeomFromText($1, 4326))`, tc.wkt).Scan(&want)
			if err != nil {
				t.Fatal(err)
			}
			fs, _, err := store.BBox(ctx, BBoxQuery{Layer: cat.Layer(layer), Box: tc.box, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := []int64{}
			for _, f := range fs {
				got = append(got, f.ID)
			}
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("%s bbox %v: ids %v, want those meeting %s: %v", layer, tc.box, got, tc.wkt, want)
			}
		}
	}
}

// A radius of 0 finds what touches the point where longitudes meet: at
// ±180° and at a pole the index's test of a radius of 0 missed it, which
// ST_DWithin on the row itself finds (the table is large enough for the
// planner to take the index).
func TestWithinRadiusZeroWhereLongitudesMeet(t *testing.T) {
	layer, _ := geoTable(t)
	owner := testenv.Pool(t)
	ctx := ctxT(t)
	for _, s := range []string{
		`INSERT INTO ` + ident(layer.Table) + ` SELECT 100000 + g, 'filler', ST_SetSRID(ST_MakePoint(g % 100 / 10.0, g / 1000.0), 4326) FROM generate_series(0, 19999) g`,
		`INSERT INTO ` + ident(layer.Table) + ` VALUES (5, 'north pole', ST_SetSRID(ST_MakePoint(20, 90), 4326))`,
		`ANALYZE ` + ident(layer.Table),
	} {
		if _, err := owner.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	cat := demoCatalog(t, layer)
	store := NewStore(testenv.ReadPool(t))
	for _, tc := range []struct {
		lng, lat float64
		want     int64
	}{{-180, 0.25, 3}, {180, 0.25, 3}, {179, 90, 5}, {-20, 90, 5}} {
		fs, _, err := store.Within(ctx, WithinQuery{Layer: cat.Layer("geotest"), Lng: tc.lng, Lat: tc.lat, Radius: 0, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, f := range decode(t, fs) {
			ids = append(ids, f.ID)
		}
		if !slices.Equal(ids, []int64{tc.want}) {
			t.Errorf("within 0 m of %g,%g: ids %v, want [%d]", tc.lng, tc.lat, ids, tc.want)
		}
	}
}
