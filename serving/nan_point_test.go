package serving_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestPointOverviewLeavesOutANaNPoint: a point layer with a row whose
// coordinate is NaN (which PostGIS stores, and which no tile meets) gets
// its overviews, the NaN row left out of the clusters, in EPSG:4326 and in
// EPSG:3857 alike. The build failed before ("bigint out of range": the
// row's cell, floor(NaN), cast to bigint), leaving the layer's low zooms
// to read the whole table.
func TestPointOverviewLeavesOutANaNPoint(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "nanpt_")
	for _, srid := range []int{4326, 3857} {
		table, sr := fmt.Sprintf("pts_%d", srid), fmt.Sprint(srid)
		f.exec(t, `CREATE TABLE {s}.`+table+` (id int PRIMARY KEY, geom geometry(Point, `+sr+`) NOT NULL)`)
		f.exec(t, `INSERT INTO {s}.`+table+` VALUES
			(1, ST_SetSRID(ST_MakePoint(10, 10), `+sr+`)),
			(2, ST_SetSRID(ST_MakePoint('NaN'::float8, 10), `+sr+`)),
			(3, ST_SetSRID(ST_MakePoint(10, 'NaN'::float8), `+sr+`)),
			(4, ST_SetSRID(ST_MakePoint(11, 11), `+sr+`))`)
		f.exec(t, `GRANT SELECT ON {s}.`+table+` TO geotoll_reader`)
		layer := name + "_" + table
		testenv.ForgetStorage(t, owner, layer)
		cat := catalog(t, tiles.Layer{Name: layer, Schema: f.schema, Table: table, GeometryColumn: "geom", SRID: srid, IDColumn: "id",
			GeometryKind: tiles.KindPoint, StatementTimeout: 30 * time.Second})
		if r := one(t, owner, cat.Layer(layer), serving.Options{}); r.Status != serving.Built {
			t.Fatalf("EPSG:%d: prepare: %+v", srid, r)
		}
		z0 := pgx.Identifier{tiles.ServingSchema, served(t, owner, layer, serving.RelationName(layer, "ov_z0"))}.Sanitize()
		var points int64
		if err := owner.QueryRow(t.Context(), `SELECT sum(point_count) FROM `+z0).Scan(&points); err != nil {
			t.Fatal(err)
		}
		if points != 2 {
			t.Errorf("EPSG:%d: the z0 overview counts %d points, want 2 (the NaN rows left out)", srid, points)
		}
	}
}
