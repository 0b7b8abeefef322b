package pricing_test

import (
	"context"
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

// tileReadSQL counts the rows of a relation in EPSG:3035 that a tile's
// query reads: its filter (tiles.transformedEnvelope) is the box of the
// buffered envelope's corners, cut at the world's edges and transformed,
// widened by a margin for the sides that bend.
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
	cat, err := tiles.NewCatalog([]tiles.Layer{
		{Name: "laea", Table: schema + ".places", GeometryColumn: "geom", SRID: 3035, GeometryKind: tiles.KindPoint},
		{Name: "lonlat", Table: "geotoll.places", GeometryColumn: "geom", SRID: 4326, GeometryKind: tiles.KindPoint},
	})
	if err != nil {
		t.Fatal(err)
	}
	laea, lonlat := cat.Layer("laea"), cat.Layer("lonlat")
	pool := testenv.ReadPool(t)
	models := pricing.NewModels(pool, density.Options{})
	e, err := pricing.NewEstimator(models, cat.Layers(), pricing.TileRelation, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := models.Build(ctx); err != nil {
		t.Fatal(err)
	}
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
		env := tiles.Envelope(tile)
		var read float64
		if err := pool.QueryRow(t.Context(), strings.Replace(tileReadSQL, "%s", schema+".places", 1),
			env.Min[0], env.Min[1], env.Max[0], env.Max[1], laea.BufferMetres(tile)).Scan(&read); err != nil {
			t.Fatal(err)
		}
		t.Logf("z%d at %v: estimate %.1f features (%.1f in EPSG:4326); the query reads %.0f rows", tile.Z, tc.at, est.Features, same.Features, read)
		if d := est.Features - same.Features; d > 0.05*same.Features+1 || -d > 0.05*same.Features+1 {
			t.Errorf("z%d at %v: %.1f features in EPSG:3035, %.1f of the same places in EPSG:4326", tile.Z, tc.at, est.Features, same.Features)
		}
		if est.Features < read/2-2 || est.Features > 2*read+2 {
			t.Errorf("z%d at %v: %.1f features estimated, the query reads %.0f rows", tile.Z, tc.at, est.Features, read)
		}
	}
}

// A relation whose boxes PostGIS cannot transform to lon/lat (here a
// point outside EPSG:3035's domain) has no model, and says so as any
// failed build does: in Models.Status, with the error and the count of
// failed builds that readiness and the metrics report. It is never left
// out of the models unsaid.
func TestUntransformableRelationIsAFailedBuild(t *testing.T) {
	schema := testenv.Schema(t, "sridbad_", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.far (id bigint PRIMARY KEY, geom geometry(Point, 3035) NOT NULL)`,
			`INSERT INTO ` + s + `.far VALUES (1, ST_SetSRID(ST_MakePoint(4321000, 3210000), 3035)), (2, ST_SetSRID(ST_MakePoint(1e20, 1e20), 3035))`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ` + s + `.far TO geotoll_reader`,
		}
	})
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "far", Table: schema + ".far", GeometryColumn: "geom", SRID: 3035, GeometryKind: tiles.KindPoint}})
	if err != nil {
		t.Fatal(err)
	}
	models := pricing.NewModels(testenv.ReadPool(t), density.Options{})
	e, err := pricing.NewEstimator(models, cat.Layers(), pricing.TileRelation, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := models.Build(t.Context()); err == nil {
		t.Fatal("the build of a relation outside its projection's domain succeeded")
	}
	st := models.Status()
	if len(st) != 1 || st[0].Ready || st[0].Failures != 1 || !strings.Contains(st[0].LastError, "transform") {
		t.Fatalf("status %+v: want the relation not ready, one failed build and its error", st)
	}
	if _, ok := e.Tile(cat.Layer("far"), maptile.At(orb.Point{10, 52}, 10)); ok {
		t.Error("an estimate without a model")
	}
}
