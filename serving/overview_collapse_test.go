package serving_test

import (
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// A feature of an overview wider than a unit of the tile's grid but so
// thin that its snapped shape collapses (ST_AsMVTGeom returns NULL) is
// drawn as a point, as one smaller than a unit is: a tile that holds
// data is never empty. It was dropped.
func TestOverviewDrawsAFeatureItsGridCollapses(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sliver_")
	// At z3 a unit of the 4,096 grid is some 1.2 km: a sliver 20 km long
	// and 20 m wide, on its own in the world.
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES (1, 'sliver', ST_MakeEnvelope(1000000, 1000000, 1020000, 1000020, 3857))`)
	f.exec(t, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	cat := catalog(t, shapesLayer(name, f.schema))
	l := cat.Layer(name)
	for _, r := range prepareAll(t, owner, l, serving.Overview{}) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	tile := maptile.New(4, 3, 3)
	if src := l.Source(tile.Z); src.Builder != tiles.BuilderOverview {
		t.Fatalf("z%d reads %q, want its overview", tile.Z, src.Builder)
	}
	if got := tileNames(t, tiles.NewStore(reader), l, tile); len(got) != 1 || got[0] != "sliver" {
		t.Errorf("tile %v: features %v, want the sliver", tile, got)
	}
}
