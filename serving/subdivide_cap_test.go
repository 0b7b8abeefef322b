package serving_test

import (
	"slices"
	"testing"
	"time"

	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// The feature cap counts the features a tile draws, from the pieces as
// from the table: with max_features 1, the first row in order_by whose box
// meets the tile but whose shape leaves nothing on it (a thin diagonal
// strip passing by the tile's corner) takes no place, and the next row is
// drawn.
func TestPiecesCapCountsTheFeaturesDrawn(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subcap_")
	f.exec(t, `CREATE TABLE {s}.capt (id bigint PRIMARY KEY, rank int, geom geometry(Polygon, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.capt VALUES
		(1, 1, ST_GeomFromText('POLYGON((-200000 100000, -199000 100000, 100000 -199000, 100000 -200000, -200000 100000))', 3857)),
		(2, 2, ST_MakeEnvelope(10000, 10000, 20000, 20000, 3857))`)
	f.exec(t, `CREATE INDEX ON {s}.capt USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.capt TO geotoll_reader`)
	l := tiles.Layer{Name: name, Schema: f.schema, Table: "capt", GeometryColumn: "geom", SRID: 3857, IDColumn: "id",
		GeometryKind: tiles.KindPolygon, OrderBy: []string{"rank"}, MaxFeatures: 1,
		StatementTimeout: 30 * time.Second, Subdivide: tiles.Subdivide{MaxVertices: 64}}
	table, pieces := catalog(t, l), catalog(t, l)
	reader := servePieces(t, owner, pieces, name)
	if b := pieces.Layer(name).Source(10).Builder; b != tiles.BuilderSubdivide {
		t.Fatalf("the pieces' catalog reads %q at z10", b)
	}
	if b := table.Layer(name).Source(10).Builder; b == tiles.BuilderSubdivide {
		t.Fatalf("the table's catalog reads %q at z10", b)
	}
	store := tiles.NewStore(reader)
	tile := maptile.New(512, 511, 10)
	ids := func(c *tiles.Catalog) []any {
		t.Helper()
		r, err := store.Render(t.Context(), []*tiles.Layer{c.Layer(name)}, tile)
		if err != nil {
			t.Fatal(err)
		}
		d, err := mvt.Unmarshal(r.MVT)
		if err != nil {
			t.Fatal(err)
		}
		var out []any
		for _, ml := range d {
			for _, f := range ml.Features {
				out = append(out, f.ID)
			}
		}
		return out
	}
	got, want := ids(pieces), ids(table)
	if len(want) != 1 || !slices.Equal(got, want) {
		t.Errorf("the pieces draw ids %v, the table %v; want both [2]", got, want)
	}
}
