package tiles_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/paulmach/orb/geojson"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// TestRowPastThePoleIsDrawnWhereMercatorShowsIt: in a layer stored in
// EPSG:4326, a row with vertices past a pole (latitude 91), which
// ST_Transform refuses, fails no tile: a tile that meets it draws the
// part of it Web Mercator shows (within ±85.0511°; of a self-crossing
// row, of the row made valid) — as a layer in EPSG:3857 holding that part
// draws it — beside the other rows; a point
// past the pole is not drawn. It failed before: every tile meeting the
// row was a 503 ("does not match the database: transform: Invalid
// coordinate").
func TestRowPastThePoleIsDrawnWhereMercatorShowsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.polar (id bigint PRIMARY KEY, geom geometry(Geometry, 4326) NOT NULL, geom_3857 geometry(Geometry, 3857))`)
	// geom_3857: what a tile can show of each row, made without
	// geotoll's function (the part within Mercator's latitudes).
	f.exec(t, `INSERT INTO {s}.polar (id, geom)
		VALUES (1, ST_MakeEnvelope(10, 10, 20, 20, 4326)),
		       (2, ST_GeomFromText('POLYGON((0 80, 10 80, 10 91, 0 91, 0 80))', 4326)),
		       (3, ST_GeomFromText('LINESTRING(-30 70, -30 95)', 4326)),
		       (4, ST_MakeEnvelope(-20, -20, -10, -10, 4326)),
		       (5, ST_GeomFromText('POLYGON((30 70, 40 95, 40 70, 30 95, 30 70))', 4326))`)
	// Row 5 crosses itself: what shows of it is cut from it made valid.
	f.exec(t, `UPDATE {s}.polar SET geom_3857 = ST_Transform(ST_ClipByBox2D(CASE WHEN id = 5 THEN ST_MakeValid(geom) ELSE geom END,
		ST_MakeEnvelope(-180, -85.0511287798066, 180, 85.0511287798066, 4326)), 3857)`)
	f.exec(t, `CREATE TABLE {s}.polar_pts (id bigint PRIMARY KEY, geom geometry(Point, 4326) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.polar_pts VALUES (1, ST_Point(5, 50, 4326)), (2, ST_Point(5, 95, 4326)), (3, ST_Point(-5, 84, 4326))`)
	for _, tb := range []string{"polar", "polar_pts"} {
		f.exec(t, `CREATE INDEX ON {s}.`+tb+` USING gist (geom)`)
		f.exec(t, `GRANT SELECT ON {s}.`+tb+` TO geotoll_reader`)
	}
	shapes := func(name, geom string, srid int) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table("polar"), GeometryColumn: geom, SRID: srid, IDColumn: "id",
			GeometryKind: tiles.KindMixed, Generalize: tiles.Generalize{Off: true}}
	}
	cat := newCatalog(t, shapes("merc", "geom_3857", 3857), shapes("wgs", "geom", 4326),
		tiles.Layer{Name: "pts", Table: f.table("polar_pts"), GeometryColumn: "geom", SRID: 4326, IDColumn: "id",
			GeometryKind: tiles.KindPoint, Generalize: tiles.Generalize{Off: true}})
	store := tiles.NewStore(testenv.ReadPool(t))
	features := func(name string, tile maptile.Tile) []string {
		t.Helper()
		return drawn(t, store, resolve(t, cat, name), tile, func(f *geojson.Feature) string {
			return fmt.Sprintf("%v %s %v", f.ID, f.Geometry.GeoJSONType(), f.Geometry)
		})
	}
	for _, tile := range []maptile.Tile{
		maptile.New(0, 0, 0), maptile.New(1, 0, 1), maptile.New(0, 0, 1),
		maptile.New(4, 0, 3), maptile.New(3, 0, 3), maptile.New(130, 0, 8), maptile.New(262, 10, 9),
	} {
		merc, wgs := features("merc", tile), features("wgs", tile)
		if !slices.Equal(merc, wgs) {
			t.Errorf("tile %v: the EPSG:4326 layer draws %v, want what the EPSG:3857 one holding the shown parts draws, %v", tile, wgs, merc)
		}
	}
	if got := features("merc", maptile.New(0, 0, 0)); len(got) != 5 {
		t.Fatalf("z0 of the EPSG:3857 layer draws %d features, want 5: the fixture does not test it", len(got))
	}
	ids := drawn(t, store, resolve(t, cat, "pts"), maptile.New(0, 0, 0), featureID)
	if want := []string{"1", "3"}; !slices.Equal(ids, want) {
		t.Errorf("z0 of the point layer draws ids %v, want %v (the point past the pole left out)", ids, want)
	}
}

// drawn renders tile of layers and describes each feature it draws with
// describe, sorted.
func drawn(t *testing.T, store *tiles.Store, layers []*tiles.Layer, tile maptile.Tile, describe func(*geojson.Feature) string) []string {
	t.Helper()
	_, decoded := render(t, store, layers, tile)
	var out []string
	for _, l := range decoded {
		for _, feat := range l.Features {
			out = append(out, describe(feat))
		}
	}
	slices.Sort(out)
	return out
}

// featureID describes a feature by its id.
func featureID(f *geojson.Feature) string { return fmt.Sprint(f.ID) }
