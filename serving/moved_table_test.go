package serving_test

import (
	"slices"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// A layer whose configuration now names another table (a filtered view or
// copy of the old one, with the same columns) must not be served from the
// storage `geotoll prepare` built from the old table: that storage holds
// rows the new table does not (rows the operator meant to stop serving).
// The registry records each relation's source_table, and the geofence
// layers match pieces by it; tiles match by layer name alone, so until the
// next prepare the layer's zooms above the overview band (and its
// overview band) read the old table's rows.
func TestStorageOfAnotherTableIsNotRead(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "moved_")
	shapes(t, f)
	old := catalog(t, shapesLayer(name, f.schema))
	if r := one(t, owner, old.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	// The same layer, now configured on a copy that keeps only the square.
	f.exec(t, `CREATE TABLE {s}.shapes_public AS SELECT * FROM {s}.shapes WHERE id = 3`)
	f.exec(t, `CREATE INDEX ON {s}.shapes_public USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_public TO geotoll_reader`)
	moved := shapesLayer(name, f.schema)
	moved.Table = "shapes_public"
	cat := catalog(t, moved)
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(name)
	if src := l.Source(12); src.Builder != "" {
		t.Errorf("layer %s on table %s: z12 reads %s (builder %q), built from its old table %s.shapes",
			name, l.TableIdent().Sanitize(), src.Relation.Sanitize(), src.Builder, f.schema)
	}
	// A z10 tile inside the disc (id 1), which the new table does not hold.
	tile := maptile.At(orb.Point{0.5, 0.2}, 10)
	r, err := tiles.NewStore(reader).Render(t.Context(), []*tiles.Layer{l}, tile)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.MVT) != 0 {
		t.Errorf("tile %v of a table without rows there has %d bytes: the old table's disc", tile, len(r.MVT))
	}
}

// The runner rebuilds the storage of a layer moved onto another table even
// when the two tables have the same change detector (row count and newest
// transaction id: here a copy of the same rows, moved elsewhere, both
// written by one transaction): the storage of the old table is not what
// the layer reads now, and tiles do not read it (they would read the
// layer's table until a prepare that never comes).
func TestPrepareRebuildsStorageOfAnotherTable(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "moved_")
	shapes(t, f)
	f.exec(t, `CREATE TABLE {s}.shapes_moved AS
		SELECT id, name, ST_Translate(geom, 1000000, 0)::geometry(Geometry, 3857) AS geom FROM {s}.shapes`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_moved TO geotoll_reader`)
	f.exec(t, `BEGIN; UPDATE {s}.shapes SET name = name; UPDATE {s}.shapes_moved SET name = name; COMMIT`)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	if r := one(t, owner, catalog(t, shapesLayer(name, f.schema)).Layer(name), o); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	moved := shapesLayer(name, f.schema)
	moved.Table = "shapes_moved"
	cat := catalog(t, moved)
	if r := one(t, owner, cat.Layer(name), o); r.Status != serving.Built {
		t.Errorf("prepare of the layer moved onto %s.shapes_moved: %s (%v), want built: its pieces are of %s.shapes", f.schema, r.Status, r.Err, f.schema)
	}
	if _, err := cat.Refresh(t.Context(), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != tiles.BuilderSubdivide {
		t.Errorf("after prepare, z12 of the moved layer reads %s (builder %q), want its pieces", src.Relation.Sanitize(), src.Builder)
	}
}

// A followed layer whose table cannot be read at a refresh keeps its plan,
// unchecked, and Refresh names it in Kept (with the warning), so that the
// server does not take the warnings it did not look for as cleared.
func TestRefreshNamesTheFollowedLayersItCouldNotCheck(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "kept_")
	shapes(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	if r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	if !cat.Follow(name) {
		t.Fatalf("Follow(%q): the catalog has no such layer", name)
	}
	reader := testenv.ReadPool(t)
	for _, c := range []struct {
		grant string
		kept  bool
	}{
		{"", false},
		{`REVOKE SELECT ON {s}.shapes FROM geotoll_reader`, true},
		{`GRANT SELECT ON {s}.shapes TO geotoll_reader`, false},
	} {
		if c.grant != "" {
			f.exec(t, c.grant)
		}
		res, err := cat.Refresh(t.Context(), reader)
		if err != nil {
			t.Fatalf("after %q: %v", c.grant, err)
		}
		if kept := slices.Contains(res.Kept, name); kept != c.kept || kept && len(res.Warnings) == 0 {
			t.Errorf("after %q: kept %q with %d warnings; want %s kept: %v (with a warning)", c.grant, res.Kept, len(res.Warnings), name, c.kept)
		}
	}
}
