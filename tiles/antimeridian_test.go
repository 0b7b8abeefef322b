package tiles_test

import (
	"slices"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// TestStoreTileTransformedLayerAtTheWorldsEdges: a layer stored in EPSG:4326
// draws the same features as the same rows stored in EPSG:3857 in the tiles
// of the world's western and eastern columns too. Their envelope widened by
// the buffer overhangs ±180°, where the transform to EPSG:4326 wraps a
// longitude to the other side; the filter of such a tile must still read
// the rows of the tile.
func TestStoreTileTransformedLayerAtTheWorldsEdges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.pts (id bigint PRIMARY KEY, geom geometry(Point, 4326) NOT NULL, geom_3857 geometry(Point, 3857) NOT NULL)`)
	// Rows in both hemispheres, the north and the south, near the
	// antimeridian and far from it.
	f.exec(t, `INSERT INTO {s}.pts
		SELECT row_number() OVER (), p, ST_Transform(p, 3857)
		FROM unnest(ARRAY[-179.5, -170, -120, -60, -10, 10, 60, 120, 170, 179.5]::float8[]) AS lon,
		     unnest(ARRAY[-40, 40]::float8[]) AS lat,
		     LATERAL (SELECT ST_SetSRID(ST_MakePoint(lon, lat), 4326) AS p) AS g`)
	f.exec(t, `CREATE INDEX ON {s}.pts USING gist (geom)`)
	f.exec(t, `CREATE INDEX ON {s}.pts USING gist (geom_3857)`)
	f.exec(t, `GRANT SELECT ON {s}.pts TO geotoll_reader`)
	layer := func(name, geom string, srid int) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table("pts"), GeometryColumn: geom, SRID: srid,
			GeometryKind: tiles.KindPoint, Generalize: tiles.Generalize{Off: true}}
	}
	cat := newCatalog(t, layer("merc", "geom_3857", 3857), layer("wgs", "geom", 4326))
	store := tiles.NewStore(testenv.ReadPool(t))
	ids := func(name string, tile maptile.Tile) []string {
		t.Helper()
		return drawn(t, store, resolve(t, cat, name), tile, featureID)
	}
	for _, tile := range []maptile.Tile{
		maptile.New(0, 0, 0),
		maptile.New(0, 0, 1), maptile.New(1, 0, 1), maptile.New(0, 1, 1), maptile.New(1, 1, 1),
		maptile.New(0, 1, 2), maptile.New(3, 1, 2),
		maptile.New(0, 3, 3), maptile.New(7, 3, 3),
	} {
		merc, wgs := ids("merc", tile), ids("wgs", tile)
		if len(merc) == 0 {
			t.Fatalf("tile %v: the EPSG:3857 layer draws nothing: the fixture does not test it", tile)
		}
		if !slices.Equal(merc, wgs) {
			t.Errorf("tile %v: the EPSG:3857 layer draws ids %v, the EPSG:4326 layer %v", tile, merc, wgs)
		}
	}
}
