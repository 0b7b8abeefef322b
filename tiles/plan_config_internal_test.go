package tiles

import (
	"slices"
	"testing"

	"github.com/paulmach/orb/maptile"
)

// A layer configured to serve its features as stored (generalize: {off:
// true}, README: "off: true serves features as stored"), or without
// overviews (overviews: {off: true}), must not read the cluster overviews
// an earlier `geotoll prepare` registered for it: serve restarted with the
// new configuration would otherwise keep serving clusters (point_count > 1,
// one point per cell) until prepare runs again and retires them. The plan
// checks a storage row's builder, kind, zooms and columns, not whether the
// layer's configuration still wants it.
func TestPlanIgnoresStorageTheConfigurationTurnedOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		l    Layer
	}{
		{"generalize off", Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint, Generalize: Generalize{Off: true}}},
		{"overviews off", Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint, Overviews: Overviews{Off: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := prepared(t, tc.l)
			built := prepared(t, Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint}) // as prepare ran before
			p, skipped, err := l.newPlan(KindPoint, overviewRows(built, KindPoint, 0, 7))
			if err != nil {
				t.Fatal(err)
			}
			l.state.plan.Store(p)
			if src := l.Source(maptile.Zoom(3)); src.Builder != "" {
				t.Errorf("z3 reads %s (builder %q, clustered %v), skipped %v; want the layer's table",
					src.Relation.Sanitize(), src.Builder, src.Clustered, skipped)
			}
		})
	}
}

// The same holds for the parts of storage the configuration no longer
// asks for: overview zooms now outside the layer's overview band, and the
// pieces of a layer now configured with subdivide: {off: true} (README:
// "serve a layer's rows whole"). Zooms the configuration still covers keep
// reading what was built for them.
func TestPlanIgnoresStorageOutsideTheConfiguredBands(t *testing.T) {
	t.Parallel()
	t.Run("overview band narrowed", func(t *testing.T) {
		t.Parallel()
		l := prepared(t, Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint, Overviews: Overviews{MaxZoom: 5}})
		built := prepared(t, Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint})
		p, skipped, err := l.newPlan(KindPoint, overviewRows(built, KindPoint, 0, 7))
		if err != nil {
			t.Fatal(err)
		}
		l.state.plan.Store(p)
		if src := l.Source(5); src.Builder != BuilderOverview {
			t.Errorf("z5, in the band, reads %s (builder %q), want its overview", src.Relation.Sanitize(), src.Builder)
		}
		for _, z := range []maptile.Zoom{6, 7} {
			if src := l.Source(z); src.Builder != "" {
				t.Errorf("z%d, beyond overviews maxzoom 5, reads %s (builder %q), skipped %v; want the layer's table",
					z, src.Relation.Sanitize(), src.Builder, skipped)
			}
		}
	})
	t.Run("subdivide off", func(t *testing.T) {
		t.Parallel()
		l := prepared(t, Layer{Name: "a", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPolygon, Subdivide: Subdivide{Off: true}})
		built := prepared(t, Layer{Name: "a", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPolygon})
		pieces := Storage{Layer: "a", Builder: BuilderSubdivide, Relation: "a_sub", ZoomMin: 8, ZoomMax: int(MaxZoom),
			GeometryColumn: "g", SRID: 3857, Kind: KindPolygon, Columns: built.Columns(), Params: StorageParams{Version: 1, MaxVertices: 256}}
		p, skipped, err := l.newPlan(KindPolygon, []Storage{pieces})
		if err != nil {
			t.Fatal(err)
		}
		l.state.plan.Store(p)
		if src := l.Source(maptile.Zoom(10)); src.Builder != "" {
			t.Errorf("z10 reads %s (builder %q), skipped %v; want the layer's table", src.Relation.Sanitize(), src.Builder, skipped)
		}
	})
}

// Overviews built under other generalisation settings than the layer's
// now — another cluster_px (cells per tile), tolerance_px or min_size_px,
// or another order_by (which chose each cell's feature) — hold other
// features than its configuration asks for: the layer reads its table at
// those zooms, not them, until `geotoll prepare` (which compares the same
// settings) builds them again. Overviews built under the same settings are
// read.
func TestPlanIgnoresStorageOfOtherGeneralization(t *testing.T) {
	t.Parallel()
	points := Layer{Name: "p", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPoint, Properties: []string{"rank"}, OrderBy: []string{"rank"}}
	polygons := Layer{Name: "a", Table: "s.t", GeometryColumn: "g", GeometryKind: KindPolygon}
	for _, tc := range []struct {
		name        string
		built, now  Layer
		wantStorage bool
	}{
		{"same settings", points, points, true},
		{"same polygon settings", polygons, polygons, true},
		{"cluster_px", points, withLayer(points, func(l *Layer) { l.Generalize.ClusterPixels = 4 }), false},
		{"order_by", points, withLayer(points, func(l *Layer) { l.OrderBy = []string{"rank desc"} }), false},
		// The same order written otherwise: the same features.
		{"order_by spelt otherwise", points, withLayer(points, func(l *Layer) { l.OrderBy = []string{" rank  ASC "} }), true},
		{"order_by keyword case", withLayer(points, func(l *Layer) { l.OrderBy = []string{"rank desc"} }),
			withLayer(points, func(l *Layer) { l.OrderBy = []string{"rank DESC"} }), true},
		{"order_by with the id it implies", points, withLayer(points, func(l *Layer) { l.OrderBy = []string{"rank", "id"} }), true},
		{"order_by column case", points, withLayer(points, func(l *Layer) { l.OrderBy = []string{"Rank"} }), false},
		{"polygon cluster_px", polygons, withLayer(polygons, func(l *Layer) { l.Generalize.ClusterPixels = 16 }), false},
		{"tolerance_px", polygons, withLayer(polygons, func(l *Layer) { l.Generalize.TolerancePixels = 2 }), false},
		{"min_size_px", polygons, withLayer(polygons, func(l *Layer) { l.Generalize.MinSizePixels = 4 }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kind := tc.now.GeometryKind
			built := prepared(t, tc.built) // as prepare ran before
			l := prepared(t, tc.now)
			p, skipped, err := l.newPlan(kind, overviewRows(built, kind, 0, 7))
			if err != nil {
				t.Fatal(err)
			}
			l.state.plan.Store(p)
			src := l.Source(maptile.Zoom(3))
			if got := src.Builder == BuilderOverview; got != tc.wantStorage {
				t.Errorf("z3 reads %s (builder %q), skipped %v; want the overview: %v", src.Relation.Sanitize(), src.Builder, skipped, tc.wantStorage)
			}
			if !tc.wantStorage && len(skipped) != 8 {
				t.Errorf("%d overviews skipped (%v), want all 8, each with a warning", len(skipped), skipped)
			}
		})
	}
}

func withLayer(l Layer, mod func(*Layer)) Layer {
	mod(&l)
	return l
}

func TestCanonicalOrderBy(t *testing.T) {
	t.Parallel()
	l := Layer{IDColumn: "fid"}
	for _, tc := range []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"fid"}, nil},
		{[]string{"fid ASC"}, nil},
		{[]string{"rank"}, []string{"rank"}},
		{[]string{" rank  asc "}, []string{"rank"}},
		{[]string{"rank DESC", "fid"}, []string{"rank desc"}},
		{[]string{"rank", "fid", "name"}, []string{"rank"}},
		{[]string{"fid desc", "rank"}, []string{"fid desc"}},
		{[]string{"Rank", "name desc"}, []string{"Rank", "name desc"}},
		{[]string{"rank", " "}, []string{"rank", " "}}, // does not parse: as it is
		// A column whose name ends as a keyword keeps its keyword, so that
		// the form reads back as the same key.
		{[]string{"x desc asc"}, []string{"x desc asc"}},
		{[]string{"x asc asc"}, []string{"x asc asc"}},
		{[]string{"x DESC desc"}, []string{"x DESC desc"}},
	} {
		got := l.CanonicalOrderBy(tc.in)
		if !slices.Equal(got, tc.want) {
			t.Errorf("CanonicalOrderBy(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := l.CanonicalOrderBy(got); !slices.Equal(again, got) {
			t.Errorf("CanonicalOrderBy(%q) = %q, not its own form (%q)", got, again, got)
		}
	}
	// Two orders that differ never share a form.
	if a, b := l.CanonicalOrderBy([]string{"x desc asc"}), l.CanonicalOrderBy([]string{"x desc"}); slices.Equal(a, b) {
		t.Errorf("column %q ascending and column %q descending share the form %q", "x desc", "x", a)
	}
	noID := Layer{IDColumn: "fid", WithoutID: true}
	if got := noID.CanonicalOrderBy([]string{"fid", "rank"}); !slices.Equal(got, []string{"fid", "rank"}) {
		t.Errorf("without ids: %q, want both keys", got)
	}
}
