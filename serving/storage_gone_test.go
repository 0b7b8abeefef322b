package serving_test

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestTileOfStorageDroppedUnderTheServerReadsTheTable: prepare drops the
// storage it retired once its retention has passed, which a server that
// could not re-read the registry meanwhile still reads. The tile that
// finds the relation gone fails (503); the layer reads its table from
// then on, not the missing relation until the next registry read, and the
// store says its plan changed (so that its tiles' prices follow), once.
func TestTileOfStorageDroppedUnderTheServerReadsTheTable(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "gone_")
	secrets(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	l := cat.Layer(name)
	for _, r := range prepareAll(t, owner, l, serving.Subdivide{}) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	tile := maptile.At(orb.Point{0.2, 0.05}, 12)
	src := l.Source(tile.Z)
	if src.Builder != tiles.BuilderSubdivide {
		t.Fatalf("z%d reads %q, want the pieces", tile.Z, src.Builder)
	}
	store := tiles.NewStore(reader)
	var changed []string
	store.PlanChanged = func(layer string) { changed = append(changed, layer) }
	want := tileNames(t, store, l, tile)
	f.exec(t, `DROP TABLE `+src.Relation.Sanitize())

	if _, err := store.Render(t.Context(), []*tiles.Layer{l}, tile); err == nil {
		t.Fatal("a tile of a dropped relation rendered")
	}
	if src := l.Source(tile.Z); src.Builder != "" {
		t.Errorf("after the relation was found gone: z%d reads %q (%s), want the table", tile.Z, src.Builder, src.Relation.Sanitize())
	}
	if got := tileNames(t, store, l, tile); !slices.Equal(got, want) {
		t.Errorf("read from the table: %v, want %v", got, want)
	}
	if got, want := l.Source(tile.Z).Relation, (pgx.Identifier{f.schema, "shapes"}); !slices.Equal(got, want) {
		t.Errorf("reads %v, want %v", got, want)
	}
	if !slices.Equal(changed, []string{name}) {
		t.Errorf("plan changes reported: %q, want %q once", changed, name)
	}
}
