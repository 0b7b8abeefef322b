package serving_test

import (
	"slices"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestPiecesRefuseIDsThatMergeRows: a tile joins pieces back into
// features by id, so a table whose id column holds NULL, or repeats an
// id, gets no pieces: prepare skips it with the reason, retires the
// pieces built before it held such rows, and its tiles read the table,
// one feature per row, as before prepare. A NOT NULL column under a
// unique key is answered from the catalog; once the ids identify the rows
// again, the next run builds pieces.
func TestPiecesRefuseIDsThatMergeRows(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subids_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(1, 'a', ST_MakeEnvelope(0, 0, 10000, 10000, 3857)),
		(2, 'b', ST_MakeEnvelope(20000, 0, 30000, 10000, 3857)),
		(3, 'c', ST_MakeEnvelope(40000, 0, 50000, 10000, 3857)),
		(NULL, 'nowhere', NULL)`) // a row without geometry is never drawn: its id does not count
	f.exec(t, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	cat := catalog(t, layer)
	raw := catalog(t, layer).Layer(name)
	reader := testenv.ReadPool(t)
	store := tiles.NewStore(reader)
	tile := maptile.At(orb.Point{0.2, 0.05}, 10) // a and b (c lies east of it)
	names := func(l *tiles.Layer) []string { return tileNames(t, store, l, tile) }
	pieces := func() serving.Result {
		t.Helper()
		r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}})
		if _, err := cat.Refresh(t.Context(), reader); err != nil {
			t.Fatal(err)
		}
		return r
	}
	reads := func() string { return cat.Layer(name).Source(tile.Z).Builder }

	// Unique ids: pieces, drawn as the table is.
	if r := pieces(); r.Status != serving.Built || reads() != tiles.BuilderSubdivide {
		t.Fatalf("unique ids: %+v, the tile reads %q", r, reads())
	}
	if got, want := names(cat.Layer(name)), names(raw); !slices.Equal(got, want) || len(want) != 2 {
		t.Fatalf("unique ids: %v from the pieces, %v from the table", got, want)
	}

	for _, tc := range []struct {
		what, write, reason string
		want                []string
	}{
		{"NULL ids", `UPDATE {s}.shapes SET id = NULL WHERE id IN (1, 2)`, serving.NullIDs, []string{"a", "b"}},
		{"a repeated id", `UPDATE {s}.shapes SET id = 3 WHERE name IN ('a', 'b')`, serving.RepeatedIDs, []string{"a", "b"}},
	} {
		f.exec(t, `UPDATE {s}.shapes SET id = 1 WHERE name = 'a'; UPDATE {s}.shapes SET id = 2 WHERE name = 'b'`)
		if r := pieces(); r.Status != serving.Built {
			t.Fatalf("%s: unique again: %+v", tc.what, r)
		}
		f.exec(t, tc.write)
		r := pieces()
		if r.Status != serving.Removed || r.Reason != tc.reason || r.Err != nil {
			t.Errorf("%s: %+v, want the pieces removed, reason %q", tc.what, r, tc.reason)
		}
		if reads() != "" {
			t.Errorf("%s: the tile reads %q, want the table", tc.what, reads())
		}
		if got, want := names(cat.Layer(name)), names(raw); !slices.Equal(got, want) || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v served, %v from the table, want %v", tc.what, got, want, tc.want)
		}
		// With no pieces left, the next run skips the layer, for the same reason.
		if r := pieces(); r.Status != serving.Skipped || r.Reason != tc.reason {
			t.Errorf("%s, again: %+v, want skipped, reason %q", tc.what, r, tc.reason)
		}
	}

	// A primary key: the catalog answers, and pieces are built again.
	f.exec(t, `UPDATE {s}.shapes SET id = 1 WHERE name = 'a'; UPDATE {s}.shapes SET id = 2 WHERE name = 'b'`)
	f.exec(t, `DELETE FROM {s}.shapes WHERE geom IS NULL`)
	f.exec(t, `ALTER TABLE {s}.shapes ADD PRIMARY KEY (id)`)
	if r := pieces(); r.Status != serving.Built || reads() != tiles.BuilderSubdivide {
		t.Fatalf("primary key: %+v, the tile reads %q", r, reads())
	}
	if got, want := names(cat.Layer(name)), names(raw); !slices.Equal(got, want) || len(want) != 2 {
		t.Errorf("primary key: %v from the pieces, %v from the table", got, want)
	}
}

// TestPiecesNullIDsServedAsTheTable: two rows whose id is NULL, on a tile
// above the overview band, are one feature each, as the table draws them.
func TestPiecesNullIDsServedAsTheTable(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subnull_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(NULL, 'a', ST_MakeEnvelope(0, 0, 10000, 10000, 3857)),
		(NULL, 'b', ST_MakeEnvelope(20000, 0, 30000, 10000, 3857)),
		(3, 'c', ST_MakeEnvelope(40000, 0, 50000, 10000, 3857))`)
	f.exec(t, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	cat := catalog(t, layer)
	raw := catalog(t, layer).Layer(name)
	r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}})
	if r.Status != serving.Skipped || r.Reason != serving.NullIDs {
		t.Errorf("prepare: %+v, want skipped, reason %q", r, serving.NullIDs)
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)
	tile := maptile.At(orb.Point{0.2, 0.05}, 10)
	got, want := tileNames(t, store, cat.Layer(name), tile), tileNames(t, store, raw, tile)
	if !slices.Equal(got, want) || len(want) != 2 {
		t.Errorf("%v: %v served, %v from the table, want a and b", tile, got, want)
	}
}

// tileNames renders tile of l alone and returns its features' names, sorted.
func tileNames(t *testing.T, store *tiles.Store, l *tiles.Layer, tile maptile.Tile) []string {
	t.Helper()
	r, err := store.Render(t.Context(), []*tiles.Layer{l}, tile)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := mvt.Unmarshal(r.MVT)
	if err != nil || len(ls) != 1 {
		t.Fatalf("MVT: %v, %d layers", err, len(ls))
	}
	var out []string
	for _, ft := range ls[0].Features {
		name, _ := ft.Properties["name"].(string)
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
