package tiles_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// TestStoreTilePointsBesideANonFiniteRow: a point layer in EPSG:3857 read
// from its table, with rows whose coordinate is NaN, infinite or far past
// the world (1e300), draws its other points, clustered or not; no tile
// meets those rows. Every tile of such a layer read from its table failed
// before, however far from them (a 500: "bigint out of range"), as
// PostgreSQL may compute a row's cell, floor(NaN)::bigint, before the
// filter on the tile's envelope has left the row out.
func TestStoreTilePointsBesideANonFiniteRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(8802, 5373, 14)
	centre := tiles.Envelope(tile).Center()
	cx, cy := centre[0], centre[1]
	f.exec(t, `CREATE TABLE {s}.pts (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.pts VALUES
		(1, ST_SetSRID(ST_MakePoint('NaN'::float8, 0), 3857)),
		(2, ST_SetSRID(ST_MakePoint(0, 'Infinity'::float8), 3857)),
		(3, ST_SetSRID(ST_MakePoint(1e300, 0), 3857)),
		(4, ST_SetSRID(ST_MakePoint($1, $2), 3857))`, cx, cy)
	f.exec(t, `GRANT SELECT ON {s}.pts TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "pts", Table: f.table("pts"), GeometryColumn: "geom", SRID: 3857, IDColumn: "id",
		GeometryKind: tiles.KindPoint, Overviews: tiles.Overviews{Off: true}})
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)
	// z14 draws the rows as stored, z7 and z0 cluster them.
	for _, tl := range []maptile.Tile{tile, maptile.At(tile.Center(), 7), maptile.New(0, 0, 0)} {
		_, decoded := renderTile(t, store, resolve(t, cat, "pts"), tl)
		var ids []string
		for _, l := range decoded {
			for _, feat := range l.Features {
				ids = append(ids, fmt.Sprint(feat.ID))
			}
		}
		if !slices.Equal(ids, []string{"4"}) {
			t.Errorf("z%d: ids %v, want [4]", tl.Z, ids)
		}
	}
}
