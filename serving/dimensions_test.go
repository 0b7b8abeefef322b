package serving_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestPrepareDropsZAndM: serve draws a layer whose geometries have Z or M
// as their x and y (tiles.KindOfType), and so does its storage: prepare
// builds the overviews and pieces of such layers in two dimensions, in
// the SRID of the table or EPSG:3857.
func TestPrepareDropsZAndM(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "zm_")
	f.exec(t, `CREATE TABLE {s}.polys_z (id int PRIMARY KEY, name text, geom geometry(PolygonZ, 4326))`)
	f.exec(t, `INSERT INTO {s}.polys_z
		SELECT i, 'p' || i, ST_Force3DZ(ST_MakeEnvelope(i, 0, i + 0.5, 0.5, 4326), 100 + i) FROM generate_series(0, 9) AS i`)
	f.exec(t, `CREATE TABLE {s}.points_z (id int PRIMARY KEY, name text, geom geometry(PointZ, 3857))`)
	f.exec(t, `INSERT INTO {s}.points_z
		SELECT i, 'q' || i, ST_SetSRID(ST_MakePoint(i * 100000, i * 50000, i), 3857) FROM generate_series(0, 9) AS i`)
	f.exec(t, `CREATE TABLE {s}.lines_m (id int PRIMARY KEY, name text, geom geometry(LineStringM, 4326))`)
	f.exec(t, `INSERT INTO {s}.lines_m
		SELECT i, 'l' || i, ST_SetSRID(ST_MakeLine(ST_MakePointM(i, 0, 1), ST_MakePointM(i + 0.5, 1, 2)), 4326) FROM generate_series(0, 9) AS i`)
	f.exec(t, `GRANT SELECT ON {s}.polys_z, {s}.points_z, {s}.lines_m TO geotoll_reader`)

	for _, tc := range []struct {
		table string
		srid  int
		kind  tiles.Kind
	}{
		{"polys_z", 4326, tiles.KindPolygon},
		{"points_z", 3857, tiles.KindPoint},
		{"lines_m", 4326, tiles.KindLine},
	} {
		layer := name + "_" + tc.table
		testenv.ForgetStorage(t, owner, layer)
		l := catalog(t, tiles.Layer{Name: layer, Schema: f.schema, Table: tc.table, GeometryColumn: "geom", SRID: tc.srid,
			IDColumn: "id", Properties: []string{"name"}, Subdivide: tiles.Subdivide{MaxVertices: 64}}).Layer(layer)
		builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
		results := prepareAll(t, owner, l, builders...)
		for _, r := range results {
			want := serving.Built
			if r.Builder == tiles.BuilderSubdivide && tc.kind == tiles.KindPoint {
				want = serving.Skipped // points have no pieces
			}
			if r.Status != want || r.Err != nil {
				t.Errorf("%s: %+v, want %s", tc.table, r, want)
			}
		}
		rels := registry(t, owner, layer)
		if len(rels) == 0 {
			t.Errorf("%s: nothing recorded", tc.table)
		}
		for rel := range rels {
			var rows, flat int64
			var geomCol string
			if err := owner.QueryRow(t.Context(), `SELECT geometry_column FROM geotoll_serving.storage WHERE relation = $1`, rel).Scan(&geomCol); err != nil {
				t.Fatal(err)
			}
			g := pgx.Identifier{geomCol}.Sanitize()
			if err := owner.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE ST_Zmflag(`+g+`) = 0) FROM `+
				pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()).Scan(&rows, &flat); err != nil {
				t.Fatal(err)
			}
			if rows == 0 || flat != rows {
				t.Errorf("%s: %s holds %d rows, %d of them in two dimensions", tc.table, rel, rows, flat)
			}
		}
	}
}
