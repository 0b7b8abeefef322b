package serving

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

func TestRelationName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	longer := strings.Repeat("a", 63) + "b"
	for _, tc := range []struct {
		layer, want string
	}{
		{"places", "places_ov_z3"},
		{"Places-2", "Places-2_ov_z3"},
		{strings.Repeat("x", 36), strings.Repeat("x", 36) + "_ov_z3"},
	} {
		if got := RelationName(tc.layer, "ov_z3"); got != tc.want {
			t.Errorf("RelationName(%q) = %q, want %q", tc.layer, got, tc.want)
		}
	}
	a, b := RelationName(long, "ov_z22"), RelationName(longer, "ov_z22")
	if a == b {
		t.Errorf("two long layers share the relation %q", a)
	}
	for _, n := range []string{a, b} {
		// The longest name derived from it: the index of a table of the
		// last generation a transaction id can name.
		if l := len(n + generation(math.MaxInt64) + "_gist"); l > 63 {
			t.Errorf("%q gives names of %d bytes, over PostgreSQL's 63", n, l)
		}
	}
}

func TestStableName(t *testing.T) {
	t.Parallel()
	for _, stable := range []string{"places_ov_z3", "a_sub", RelationName(strings.Repeat("v", 64), "ov_z22"), "x_v_sub"} {
		for _, txid := range []int64{1, 745, math.MaxInt64} {
			if got := StableName(stable + generation(txid)); got != stable {
				t.Errorf("StableName(%q) = %q, want %q", stable+generation(txid), got, stable)
			}
		}
	}
	for _, legacy := range []string{"places_ov_z3", "roads_v2_ov_z3", "x_v_sub", "a_vB_sub"} { // built before generations
		if got := StableName(legacy); got != legacy {
			t.Errorf("StableName(%q) = %q, want it unchanged", legacy, got)
		}
	}
	if generation(745) == generation(746) {
		t.Error("two transactions share a generation")
	}
}

func layerOf(t *testing.T, l tiles.Layer) *tiles.Layer {
	t.Helper()
	c, err := tiles.NewCatalog([]tiles.Layer{l})
	if err != nil {
		t.Fatal(err)
	}
	return c.Layer(l.Name)
}

func TestOverviewTargets(t *testing.T) {
	t.Parallel()
	points := tiles.Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: tiles.KindPoint, Properties: []string{"name"}, OrderBy: []string{"rank desc"}}
	for _, tc := range []struct {
		name   string
		layer  tiles.Layer
		kind   tiles.Kind
		zooms  []int // targets, in build order
		polyOK bool
	}{
		{name: "default band of points", layer: points, kind: tiles.KindPoint, zooms: []int{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		{name: "clipped by minzoom", layer: with(points, func(l *tiles.Layer) { l.MinZoom = 4 }), kind: tiles.KindPoint, zooms: []int{12, 11, 10, 9, 8, 7, 6, 5, 4}},
		{name: "clipped by generalize maxzoom", layer: with(points, func(l *tiles.Layer) { l.Generalize.MaxZoom = 5 }), kind: tiles.KindPoint, zooms: []int{5, 4, 3, 2, 1, 0}},
		{name: "own band", layer: with(points, func(l *tiles.Layer) { l.Overviews.MinZoom, l.Overviews.MaxZoom = 3, 9 }), kind: tiles.KindPoint, zooms: []int{9, 8, 7, 6, 5, 4, 3}},
		{name: "overviews off", layer: with(points, func(l *tiles.Layer) { l.Overviews.Off = true }), kind: tiles.KindPoint},
		{name: "generalisation off", layer: with(points, func(l *tiles.Layer) { l.Generalize.Off = true }), kind: tiles.KindPoint},
		{name: "default band of polygons", layer: with(points, func(l *tiles.Layer) { l.GeometryKind = tiles.KindPolygon }), kind: tiles.KindPolygon, zooms: []int{7, 6, 5, 4, 3, 2, 1, 0}, polyOK: true},
		{name: "band from minzoom", layer: with(points, func(l *tiles.Layer) { l.Overviews.MinZoom = 11 }), kind: tiles.KindPoint, zooms: []int{12, 11}},
		{name: "unknown kind", layer: points, kind: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := layerOf(t, tc.layer)
			got := Overview{}.Targets(l, tc.kind)
			if len(got) != len(tc.zooms) {
				t.Fatalf("%d targets, want zooms %v: %+v", len(got), tc.zooms, got)
			}
			for i, tg := range got {
				z := tc.zooms[i]
				if tg.ZoomMin != z || tg.ZoomMax != z || tg.Relation != RelationName("p", "ov_z"+strconv.Itoa(z)) ||
					tg.Kind != tc.kind || tg.SRID != 3857 || tg.GeometryColumn != "geom" || tg.Params.Zoom != z {
					t.Errorf("target %d: %+v, want zoom %d", i, tg, z)
				}
				g := l.Generalize.At(maptile.Zoom(z), l.Extent)
				if tg.Params.CellMetres != g.CellMetres || tg.Params.CellsPerTile != g.CellsPerTile {
					t.Errorf("target z%d: cells %+v, want %v per tile of %v m", z, tg.Params, g.CellsPerTile, g.CellMetres)
				}
				if hasLengths := tg.Params.ToleranceMetres > 0 && tg.Params.MinSizeMetres > 0; hasLengths != tc.polyOK {
					t.Errorf("target z%d: tolerance and min size %+v", z, tg.Params)
				}
				// The registry lists the overview's columns, c0, c1…, and
				// the layer's each holds in the same order.
				if want := []string{"c0", "c1", "c2"}; strings.Join(tg.Columns, ",") != strings.Join(want, ",") {
					t.Errorf("columns %v, want %v", tg.Columns, want)
				}
				if want := []string{"id", "name", "rank"}; strings.Join(tg.Params.SourceColumns, ",") != strings.Join(want, ",") {
					t.Errorf("source columns %v, want %v", tg.Params.SourceColumns, want)
				}
			}
		})
	}
}

func with(l tiles.Layer, mod func(*tiles.Layer)) tiles.Layer {
	mod(&l)
	return l
}

func TestCurrent(t *testing.T) {
	t.Parallel()
	l := layerOf(t, tiles.Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: tiles.KindPoint})
	targets := Overview{}.Targets(l, tiles.KindPoint)
	rowsOf := func(sig string, mod func(*tiles.Storage)) []tiles.Storage {
		var out []tiles.Storage
		for _, tg := range targets {
			r := tiles.Storage{Builder: "overview", Relation: tg.Relation, ZoomMin: tg.ZoomMin, ZoomMax: tg.ZoomMax,
				Kind: tg.Kind, Columns: tg.Columns, Params: tg.Params, SourceSignature: sig,
				SourceTable: `"s"."t"`, SourceGeometryColumn: "g"}
			if mod != nil {
				mod(&r)
			}
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rows []tiles.Storage
		sig  string
		want bool
	}{
		{name: "same", rows: rowsOf("10:99", nil), sig: "10:99", want: true},
		{name: "source changed", rows: rowsOf("10:99", nil), sig: "11:99"},
		{name: "no signature (a view)", rows: rowsOf("", nil), sig: ""},
		{name: "never built", sig: "10:99"},
		{name: "a relation missing", rows: rowsOf("10:99", nil)[1:], sig: "10:99"},
		{name: "another kind", rows: rowsOf("10:99", func(r *tiles.Storage) { r.Kind = tiles.KindPolygon }), sig: "10:99"},
		{name: "other columns", rows: rowsOf("10:99", func(r *tiles.Storage) { r.Columns = []string{"id", "name"} }), sig: "10:99"},
		{name: "other source columns", rows: rowsOf("10:99", func(r *tiles.Storage) { r.Params.SourceColumns = []string{"id", "name"} }), sig: "10:99"},
		{name: "the layer's names in columns", rows: rowsOf("10:99", func(r *tiles.Storage) {
			r.Columns, r.Params.SourceColumns = r.Params.SourceColumns, nil
		}), sig: "10:99"},
		{name: "other cells", rows: rowsOf("10:99", func(r *tiles.Storage) { r.Params.CellsPerTile *= 2 }), sig: "10:99"},
		{name: "older builder", rows: rowsOf("10:99", func(r *tiles.Storage) { r.Params.Version-- }), sig: "10:99"},
		{name: "other zooms", rows: rowsOf("10:99", func(r *tiles.Storage) { r.ZoomMax++ }), sig: "10:99"},
		{name: "another table", rows: rowsOf("10:99", func(r *tiles.Storage) { r.SourceTable = `"s"."old"` }), sig: "10:99"},
		{name: "another geometry column", rows: rowsOf("10:99", func(r *tiles.Storage) { r.SourceGeometryColumn = "g2" }), sig: "10:99"},
		{name: "recorded without its schema", rows: rowsOf("10:99", func(r *tiles.Storage) { r.SourceTable = `"t"` }), sig: "10:99"},
	} {
		if got := current(tc.rows, `"s"."t"`, l, targets, tc.sig); got != tc.want {
			t.Errorf("%s: current = %v, want %v", tc.name, got, tc.want)
		}
	}
}
