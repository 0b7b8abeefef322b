package density_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// TestShelfLendsModelsOfUnchangedRelations: a refresher whose relation is
// unchanged since a model of it was shelved takes that model (the same
// one, not read again); a write to the table makes the next refresh read
// it; a view, which has no change detector, is read every time; and
// models built with other limits are not lent.
func TestShelfLendsModelsOfUnchangedRelations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rel, owner := scratchTable(t, "shelf", "Point", density.Point)
	insertPoints(ctx, t, owner, rel, 13.3, 52.4, 500)
	shelf := density.NewShelf()
	read := testenv.ReadPool(t)
	refresh := func(rel density.Relation, opts density.Options) *density.Model {
		t.Helper()
		opts.Shelf = shelf
		r, err := density.NewRefresher(read, rel, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if st := r.Status(); !st.Ready {
			t.Fatalf("status after a refresh: %+v", st)
		}
		return r.Model()
	}

	first := refresh(rel, density.Options{})
	if again := refresh(rel, density.Options{}); again != first {
		t.Error("an unchanged table's model was read again")
	}
	if other := refresh(rel, density.Options{MaxLevel: 12}); other == first {
		t.Error("a model built with max level 16 was lent to a refresher of max level 12")
	}
	insertPoints(ctx, t, owner, rel, 13.3, 52.4, 1)
	changed := refresh(rel, density.Options{})
	if changed == first || changed.Summary().Rows != 501 {
		t.Errorf("after an insert: the same model %v, %d rows; want a new one of 501", changed == first, int(changed.Summary().Rows))
	}

	view := density.Relation{Table: pgx.Identifier{rel.Table[0], rel.Table[1] + "_v"}, GeometryColumn: "geom", SRID: rel.SRID, Kind: density.Point}
	for _, stmt := range []string{
		"CREATE VIEW " + view.Table.Sanitize() + " AS SELECT * FROM " + rel.Table.Sanitize(),
		"GRANT SELECT ON " + view.Table.Sanitize() + " TO geotoll_reader",
	} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = owner.Exec(context.Background(), "DROP VIEW IF EXISTS "+view.Table.Sanitize()) })
	if a, b := refresh(view, density.Options{}), refresh(view, density.Options{}); a == b {
		t.Error("a view's model was lent: a view has no change detector")
	}
}
