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
