package tiles

import (
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
