package pricing_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// tileReadSQL counts the rows of a relation in EPSG:3035 (another SRID
// with tileRead) that a tile's query reads: its filter
// (tiles.transformedEnvelope) is the box of the buffered envelope's
// corners, cut at the world's edges and transformed, widened by a margin
// for the sides that bend.
const tileReadSQL = `WITH env AS (SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS geom, $5::float8 AS buffer_m)
SELECT count(*) FROM %s AS t WHERE t.geom && (
    SELECT ST_Expand(b.g, greatest(ST_XMax(b.g) - ST_XMin(b.g), ST_YMax(b.g) - ST_YMin(b.g))
        * CASE WHEN ST_XMax(env.geom) - ST_XMin(env.geom) > 6378137.0 THEN 1
          ELSE (ST_XMax(env.geom) - ST_XMin(env.geom)) / (8 * 6378137.0) + 0.001 END)
    FROM env, LATERAL (SELECT ST_Transform(ST_MakeEnvelope(
        greatest(ST_XMin(env.geom) - env.buffer_m, -20037508.342789244), ST_YMin(env.geom) - env.buffer_m,
        least(ST_XMax(env.geom) + env.buffer_m, 20037508.342789244), ST_YMax(env.geom) + env.buffer_m, 3857), 3035) AS g) AS b)`

// A layer in a projected SRID (here the demo places in EPSG:3035, as a
// national or continental grid holds them) is priced from a model like
// any other: its build reads each feature's box transformed to lon/lat,
// and its tiles are estimated as a 4326 relation's are — about the rows
// the tile's query reads, and about what a model of the same places in
// EPSG:4326 says. Left out, such a layer was priced by its tiles' size
// for ever.
func TestProjectedSRIDLayerIsPricedFromAModel(t *testing.T) {
	schema := testenv.Schema(t, "srid3035_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.places AS SELECT id, ST_Transform(geom, 3035)::geometry(Point, 3035) AS geom FROM geotoll.places`,
			`CREATE INDEX ON ` + s + `.places USING gist (geom)`,
			`ANALYZE ` + s + `.places`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.places TO geotoll_reader`,
		}
	})
	e, models, cat := estimatorOf(t,
		tiles.Layer{Name: "laea", Table: schema + ".places", GeometryColumn: "geom", SRID: 3035, GeometryKind: tiles.KindPoint},
		tiles.Layer{Name: "lonlat", Table: "geotoll.places", GeometryColumn: "geom", SRID: 4326, GeometryKind: tiles.KindPoint})
	laea, lonlat := cat.Layer("laea"), cat.Layer("lonlat")
	pool := testenv.ReadPool(t)
	rel := density.Relation{Table: pgx.Identifier{schema, "places"}, GeometryColumn: "geom", SRID: 3035, Kind: density.Point}
	var built bool
	for _, st := range models.Status() {
		if st.Relation == rel.String() {
			built = st.Ready && st.Rows > 200000
			t.Logf("model of %s: %d rows, %d cells, level %d", st.Relation, int(st.Rows), st.Cells, st.Level)
		}
	}
	if !built {
		t.Fatalf("no model of %s built: %+v", rel, models.Status())
	}
	for _, tc := range []struct {
		at orb.Point
		z  maptile.Zoom
	}{
		{orb.Point{13.4, 52.52}, 6}, {orb.Point{13.4, 52.52}, 8}, {orb.Point{13.4, 52.52}, 10},
		{orb.Point{13.4, 52.52}, 12}, {orb.Point{13.4, 52.52}, 14},
		{orb.Point{2.35, 48.86}, 9}, {orb.Point{2.35, 48.86}, 11}, {orb.Point{2.35, 48.86}, 13},
		{orb.Point{-3.7, 40.42}, 10}, {orb.Point{-0.12, 51.5}, 12}, {orb.Point{12.5, 41.9}, 11},
		{orb.Point{-74, 40.7}, 11}, {orb.Point{151.2, -33.87}, 12}, // far from Europe, where the projection bends
		{orb.Point{-30, -40}, 10}, // the South Atlantic: no place
	} {
		tile := maptile.At(tc.at, tc.z)
		est, ok := e.Tile(laea, tile)
		if !ok {
			t.Errorf("%v: no estimate, the tile is priced by its size", tile)
			continue
		}
		same, ok := e.Tile(lonlat, tile)
		if !ok {
			t.Fatalf("%v: no estimate of the places in EPSG:4326", tile)
		}
		read := tileRead(t, pool, laea, schema+".places", 3035, tile)
		t.Logf("z%d at %v: estimate %.1f features (%.1f in EPSG:4326); the query reads %.0f rows", tile.Z, tc.at, est.Features, same.Features, read)
		if d := est.Features - same.Features; d > 0.05*same.Features+1 || -d > 0.05*same.Features+1 {
			t.Errorf("z%d at %v: %.1f features in EPSG:3035, %.1f of the same places in EPSG:4326", tile.Z, tc.at, est.Features, same.Features)
		}
		if est.Features < read/2-2 || est.Features > 2*read+2 {
			t.Errorf("z%d at %v: %.1f features estimated, the query reads %.0f rows", tile.Z, tc.at, est.Features, read)
		}
	}
}

// tileRead counts the rows of table, in srid, that tile's query on layer
// l reads (tileReadSQL).
func tileRead(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, l *tiles.Layer, table string, srid int, tile maptile.Tile) float64 {
	t.Helper()
	q := strings.Replace(strings.Replace(tileReadSQL, "%s", table, 1), "3035)", strconv.Itoa(srid)+")", 1)
	env := tiles.Envelope(tile)
	var read float64
	if err := pool.QueryRow(t.Context(), q, env.Min[0], env.Min[1], env.Max[0], env.Max[1], l.BufferMetres(tile)).Scan(&read); err != nil {
		t.Fatal(err)
	}
	return read
}

// estimateAndRead is what e estimates of tile on layer l, whose table
// (in srid) it fails the test not to model, and the rows tile's query
// reads (tileRead).
func estimateAndRead(t *testing.T, e *pricing.Estimator, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, l *tiles.Layer, table string, srid int, tile maptile.Tile) (density.Estimate, float64) {
	t.Helper()
	est, ok := e.Tile(l, tile)
	if !ok {
		t.Fatalf("%v: no estimate", tile)
	}
	read := tileRead(t, pool, l, table, srid, tile)
	t.Logf("z%d: estimate %+v; the query reads %.0f rows", tile.Z, est, read)
	return est, read
}

// sridLayer is a one-layer estimator of table (in srid), its models built.
func sridLayer(t *testing.T, table string, srid int, kind tiles.Kind) (*pricing.Estimator, *pricing.Models, *tiles.Layer) {
	t.Helper()
	e, models, cat := estimatorOf(t, tiles.Layer{Name: "l", Table: table, GeometryColumn: "geom", SRID: srid, GeometryKind: kind})
	return e, models, cat.Layer("l")
}

// estimatorOf is an estimator of layers, their models built.
func estimatorOf(t *testing.T, layers ...tiles.Layer) (*pricing.Estimator, *pricing.Models, *tiles.Catalog) {
	t.Helper()
	cat, err := tiles.NewCatalog(layers)
	if err != nil {
		t.Fatal(err)
	}
	models := pricing.NewModels(testenv.ReadPool(t), density.Options{})
	e, err := pricing.NewEstimator(models, cat.Layers(), pricing.TileRelation, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := models.Build(ctx); err != nil {
		t.Fatal(err)
	}
	return e, models, cat
}

// A polygon around the South Pole in a polar projection (EPSG:3031, a
// 2,000 km buffer of 8,001 vertices, which reaches 72°S) is read by every
// tile south of it, and its model says so: its box in lon/lat holds the
// pole and every longitude. The box of its four corners, transformed, was
// a thin band at 64°S, and tiles at 78–82°S estimated nothing while their
// query read the 8,001 vertices. A tile north of the polygon reads, and
// estimates, nothing.
func TestPolarPolygonCoversThePole(t *testing.T) {
	schema := testenv.Schema(t, "sridpole_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.ice (id bigint PRIMARY KEY, geom geometry(Polygon, 3031) NOT NULL)`,
			`INSERT INTO ` + s + `.ice VALUES (1, ST_Buffer(ST_SetSRID(ST_MakePoint(0, 0), 3031), 2000000, 2000))`,
			`CREATE INDEX ON ` + s + `.ice USING gist (geom)`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.ice TO geotoll_reader`,
		}
	})
	e, _, l := sridLayer(t, schema+".ice", 3031, tiles.KindPolygon)
	pool := testenv.ReadPool(t)
	for _, tc := range []struct {
		at orb.Point
		z  maptile.Zoom
	}{
		{orb.Point{0, -80}, 4}, {orb.Point{60, -78}, 6}, {orb.Point{-120, -82}, 8},
		{orb.Point{179.9, -84}, 10}, {orb.Point{-30, -75}, 12},
		{orb.Point{0, -55}, 6}, {orb.Point{100, -40}, 8}, // north of the polygon
	} {
		tile := maptile.At(tc.at, tc.z)
		est, read := estimateAndRead(t, e, pool, l, schema+".ice", 3031, tile)
		if read > 0 && (est.Features < 0.5*read || est.Vertices < 4000*read) {
			t.Errorf("z%d at %v: %+v estimated, the query reads the polygon's 8,001 vertices", tile.Z, tc.at, est)
		}
		if read == 0 && est.Features > 0 {
			t.Errorf("z%d at %v: %+v estimated, the query reads nothing", tile.Z, tc.at, est)
		}
	}
}

// A feature across the antimeridian (a 40 km square of the Aleutians in
// EPSG:3338, Alaska Albers) is read by the tiles on both sides of it and
// nowhere else: its box in lon/lat is cut in two at ±180°, not the box
// from 179.8°W to 179.8°E that every tile of its latitude met. The model
// still holds one feature.
func TestAntimeridianFeatureStaysWhereItIs(t *testing.T) {
	schema := testenv.Schema(t, "sridam_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.isle (id bigint PRIMARY KEY, geom geometry(Polygon, 3338) NOT NULL)`,
			`INSERT INTO ` + s + `.isle SELECT 1, ST_Expand(ST_Transform(ST_SetSRID(ST_MakePoint(180, 52), 4326), 3338), 20000)::geometry(Polygon, 3338)`,
			`CREATE INDEX ON ` + s + `.isle USING gist (geom)`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.isle TO geotoll_reader`,
		}
	})
	e, models, l := sridLayer(t, schema+".isle", 3338, tiles.KindPolygon)
	if st := models.Status(); len(st) != 1 || !st[0].Ready || st[0].Rows != 1 {
		t.Errorf("status %+v: want a model of one feature", st)
	}
	pool := testenv.ReadPool(t)
	for _, tc := range []struct {
		at orb.Point
		z  maptile.Zoom
	}{
		{orb.Point{179.9, 52}, 8}, {orb.Point{-179.9, 52}, 8}, {orb.Point{179.9, 52}, 4}, {orb.Point{-179.9, 52}, 5},
		{orb.Point{0, 52}, 8}, {orb.Point{10, 52}, 6}, {orb.Point{-100, 52}, 8}, {orb.Point{100, 52}, 10}, // far away, at its latitude
	} {
		tile := maptile.At(tc.at, tc.z)
		est, read := estimateAndRead(t, e, pool, l, schema+".isle", 3338, tile)
		if read > 0 && est.Features < 0.5*read {
			t.Errorf("z%d at %v: %.2f features estimated, the query reads %.0f", tile.Z, tc.at, est.Features, read)
		}
		if read == 0 && est.Features > 0 {
			t.Errorf("z%d at %v: %.2f features estimated, the query reads nothing", tile.Z, tc.at, est.Features)
		}
	}
}

// A box PostGIS cannot transform to lon/lat (a point outside the
// projection's domain: (10^20, 10^20) in EPSG:3035, (10^8, 0) in
// EPSG:32633) is skipped, and said: the model is built from the other
// rows, and Models.Status counts the row it left out. One such row failed
// every build, retried every RetryInterval for ever on every replica, and
// the layer was priced by size meanwhile. An SRID PostGIS does not know
// is still a failed build, reported as one.
func TestUntransformableBoxIsSkipped(t *testing.T) {
	schema := testenv.Schema(t, "sridbad_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.far (id bigint PRIMARY KEY, geom geometry(Point, 3035) NOT NULL)`,
			`INSERT INTO ` + s + `.far VALUES (1, ST_SetSRID(ST_MakePoint(4321000, 3210000), 3035)), (2, ST_SetSRID(ST_MakePoint(1e20, 1e20), 3035)),
				(3, ST_SetSRID(ST_MakePoint(4321100, 3210100), 3035))`,
			`CREATE TABLE ` + s + `.utm (id bigint PRIMARY KEY, geom geometry(LineString, 32633) NOT NULL)`,
			`INSERT INTO ` + s + `.utm VALUES (1, ST_SetSRID(ST_MakeLine(ST_MakePoint(1e8, 0), ST_MakePoint(1e8 + 10, 10)), 32633)),
				(2, ST_MakeLine(ST_Transform(ST_SetSRID(ST_MakePoint(15, 45), 4326), 32633), ST_Transform(ST_SetSRID(ST_MakePoint(15.01, 45.01), 4326), 32633)))`,
			`CREATE TABLE ` + s + `.unknown (id bigint PRIMARY KEY, geom geometry(Point, 990001) NOT NULL)`,
			`INSERT INTO ` + s + `.unknown VALUES (1, ST_SetSRID(ST_MakePoint(1, 2), 990001))`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.far, ` + s + `.utm, ` + s + `.unknown TO geotoll_reader`,
		}
	})
	e, models, cat := estimatorOf(t,
		tiles.Layer{Name: "far", Table: schema + ".far", GeometryColumn: "geom", SRID: 3035, GeometryKind: tiles.KindPoint},
		tiles.Layer{Name: "utm", Table: schema + ".utm", GeometryColumn: "geom", SRID: 32633, GeometryKind: tiles.KindLine})
	status := map[string]density.Status{}
	for _, st := range models.Status() {
		status[st.Relation] = st
		t.Logf("%s: ready %v, %v rows, %v skipped, %d failures %q", st.Relation, st.Ready, st.Rows, st.Skipped, st.Failures, st.LastError)
	}
	for table, rows := range map[string]float64{"far": 2, "utm": 1} {
		rel := density.Relation{Table: pgx.Identifier{schema, table}, GeometryColumn: "geom"}.String()
		if st := status[rel]; !st.Ready || st.Failures != 0 || st.Rows != rows || st.Skipped != 1 {
			t.Errorf("%s: status %+v: want a model of its %v other rows, and the one skipped", table, st, rows)
		}
	}
	for layer, at := range map[string]orb.Point{"far": {10, 52}, "utm": {15.005, 45.005}} {
		est, ok := e.Tile(cat.Layer(layer), maptile.At(at, 12))
		if !ok || est.Features < 0.5 {
			t.Errorf("%s: the tile of its rows estimates %+v (%v)", layer, est, ok)
		}
	}

	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "unknown", Table: schema + ".unknown", GeometryColumn: "geom", SRID: 990001, GeometryKind: tiles.KindPoint}})
	if err != nil {
		t.Fatal(err)
	}
	models = pricing.NewModels(testenv.ReadPool(t), density.Options{})
	if e, err = pricing.NewEstimator(models, cat.Layers(), pricing.TileRelation, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := models.Build(t.Context()); err == nil {
		t.Error("the build of a relation in an SRID PostGIS does not know succeeded")
	}
	if st := models.Status(); len(st) != 1 || st[0].Ready || st[0].Failures != 1 || !strings.Contains(st[0].LastError, "990001") {
		t.Errorf("unknown SRID: status %+v: want the relation not ready, one failed build and its error", st)
	}
	if _, ok := e.Tile(cat.Layer("unknown"), maptile.At(orb.Point{10, 52}, 10)); ok {
		t.Error("an estimate without a model")
	}
}
