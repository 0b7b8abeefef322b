package serving_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestOverviewOfRowsPastThePole: a layer in EPSG:4326 with a row past a
// pole (latitude 91, which ST_Transform refuses) gets its overviews: the
// polygon's part Web Mercator shows is kept (up to its top edge, y =
// π·R; of a self-crossing one, of it made valid), and a point past the
// pole is left out of the clusters. The build
// failed before ("transform: Invalid coordinate"), leaving the low zooms
// to read the whole table.
func TestOverviewOfRowsPastThePole(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "pole_")
	f.exec(t, `CREATE TABLE {s}.polar (id int PRIMARY KEY, geom geometry(Polygon, 4326) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.polar VALUES
		(1, ST_MakeEnvelope(10, 10, 20, 20, 4326)),
		(2, ST_GeomFromText('POLYGON((0 80, 10 80, 10 91, 0 91, 0 80))', 4326)),
		(4, ST_MakeEnvelope(-20, -20, -10, -10, 4326)),
		(5, ST_GeomFromText('POLYGON((30 70, 40 95, 40 70, 30 95, 30 70))', 4326))`)
	f.exec(t, `CREATE TABLE {s}.polar_pts (id int PRIMARY KEY, geom geometry(Point, 4326) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.polar_pts VALUES (1, ST_Point(5, 50, 4326)), (2, ST_Point(5, 95, 4326)), (3, ST_Point(-5, 84, 4326))`)
	for _, tb := range []string{"polar", "polar_pts"} {
		f.exec(t, `CREATE INDEX ON {s}.`+tb+` USING gist (geom)`)
		f.exec(t, `GRANT SELECT ON {s}.`+tb+` TO geotoll_reader`)
	}
	pts := name + "_pts"
	testenv.ForgetStorage(t, owner, pts)
	cat := catalog(t,
		tiles.Layer{Name: name, Schema: f.schema, Table: "polar", GeometryColumn: "geom", SRID: 4326, IDColumn: "id",
			GeometryKind: tiles.KindPolygon, StatementTimeout: 30 * time.Second, Subdivide: tiles.Subdivide{MaxVertices: 64}},
		tiles.Layer{Name: pts, Schema: f.schema, Table: "polar_pts", GeometryColumn: "geom", SRID: 4326, IDColumn: "id",
			GeometryKind: tiles.KindPoint, StatementTimeout: 30 * time.Second})
	for _, l := range []string{name, pts} {
		if r := one(t, owner, cat.Layer(l), serving.Options{}); r.Status != serving.Built {
			t.Fatalf("prepare %s: %+v", l, r)
		}
	}
	z0 := func(layer string) string {
		return pgx.Identifier{tiles.ServingSchema, served(t, owner, layer, serving.RelationName(layer, "ov_z0"))}.Sanitize()
	}
	var top float64
	if err := owner.QueryRow(t.Context(), `SELECT max(ST_YMax(geom)) FROM `+z0(name)).Scan(&top); err != nil {
		t.Fatal(err)
	}
	if edge := tiles.TileWidth(0) / 2; top < edge-1 || top > edge+1 {
		t.Errorf("the z0 overview's top is at y = %.1f, want the part of the row past the pole up to Mercator's edge, %.1f", top, edge)
	}
	var points int64
	if err := owner.QueryRow(t.Context(), `SELECT sum(point_count) FROM `+z0(pts)).Scan(&points); err != nil {
		t.Fatal(err)
	}
	if points != 2 {
		t.Errorf("the z0 point overview counts %d points, want 2 (the one past the pole left out)", points)
	}
	// The tiles read them.
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(name)
	if src := l.Source(0); src.Builder != tiles.BuilderOverview {
		t.Fatalf("z0 reads %+v, want the overview", src)
	}
	r, err := tiles.NewStore(reader).Render(t.Context(), []*tiles.Layer{l}, maptile.New(0, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := mvt.Unmarshal(r.MVT)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, dl := range decoded {
		for _, feat := range dl.Features {
			ids = append(ids, fmt.Sprint(feat.ID))
		}
	}
	slices.Sort(ids)
	if want := []string{"1", "2", "4", "5"}; !slices.Equal(ids, want) {
		t.Errorf("z0 from the overview draws ids %v, want %v", ids, want)
	}
}

// TestOverviewOfARowPastTheAntimeridian: in a geographic SRID
// (EPSG:4326, 4269), a polygon from 179° to 181° of longitude is stored in
// its overviews as the 2° it covers, its part past 180° moved to
// -180°..-179°: transformed as it was, PROJ wrapped 181° to -179° and the
// polygon became a band round the world, drawn on every tile of its
// latitudes. An invalid row across 180° (holes crossing each other) is cut
// too: ST_WrapX's GEOS overlay threw on it, failing the whole build.
func TestOverviewOfARowPastTheAntimeridian(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "antim_")
	for _, srid := range []int{4326, 4269} {
		table := fmt.Sprintf("over%d", srid)
		f.exec(t, fmt.Sprintf(`CREATE TABLE {s}.%s (id int PRIMARY KEY, geom geometry(Polygon, %d) NOT NULL)`, table, srid))
		f.exec(t, fmt.Sprintf(`INSERT INTO {s}.%s VALUES
			(1, ST_GeomFromText('POLYGON((179 10, 181 10, 181 12, 179 12, 179 10))', %d)),
			(2, ST_GeomFromText('POLYGON((179 20, 182 20, 182 22, 179 22, 179 20), (180.5 20.5, 181 20.5, 181 21, 180.5 20.5), (180.6 20.6, 181.5 20.6, 181.5 21.5, 180.6 20.6))', %d))`, table, srid, srid))
		f.exec(t, `GRANT SELECT ON {s}.`+table+` TO geotoll_reader`)
		layer := fmt.Sprintf("%s_%d", name, srid)
		testenv.ForgetStorage(t, owner, layer)
		cat := catalog(t, tiles.Layer{Name: layer, Schema: f.schema, Table: table, GeometryColumn: "geom", SRID: srid, IDColumn: "id",
			GeometryKind: tiles.KindPolygon, StatementTimeout: 30 * time.Second, Subdivide: tiles.Subdivide{MaxVertices: 64}})
		if r := one(t, owner, cat.Layer(layer), serving.Options{}); r.Status != serving.Built {
			t.Fatalf("EPSG:%d: prepare: %+v", srid, r)
		}
		z7 := pgx.Identifier{tiles.ServingSchema, served(t, owner, layer, serving.RelationName(layer, "ov_z7"))}.Sanitize()
		var wide, area, want float64
		if err := owner.QueryRow(t.Context(), `SELECT max(ST_XMax(geom) - ST_XMin(geom)), sum(ST_Area(geom)),
			ST_Area(ST_Transform(ST_MakeEnvelope(179, 10, 180, 12, 4326), 3857)) * 2 + ST_Area(ST_Transform(ST_MakeEnvelope(179, 20, 180, 22, 4326), 3857)) * 3
			FROM `+z7).Scan(&wide, &area, &want); err != nil {
			t.Fatal(err)
		}
		if wide > tiles.TileWidth(0)/2 || area > 1.1*want {
			t.Errorf("EPSG:%d: the z7 overview holds a row %.0f m wide, %.4g m² in all (want under %.4g): a band round the world", srid, wide, area, 1.1*want)
		}
	}
}
