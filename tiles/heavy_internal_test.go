package tiles

import (
	"testing"
	"time"
)

// TestHeavyFix: a heavy layer's Fix says what would give it pieces:
// geotoll prepare when it builds them, turning subdivide on when it is
// off, nothing for a layer without ids; a layer whose rows fit is not
// heavy.
func TestHeavyFix(t *testing.T) {
	t.Parallel()
	base := Layer{
		Name: "l", Table: "t", GeometryColumn: "geom", SRID: 3857, IDColumn: "id", GeometryKind: KindPolygon,
		StatementTimeout: time.Second, Subdivide: Subdivide{MaxVertices: 64},
	}
	for _, c := range []struct {
		name  string
		edit  func(*Layer)
		n     int64
		heavy bool
		fix   string
	}{
		{"prepare builds pieces", func(*Layer) {}, 4097, true, HeavyFix},
		{"subdivide off", func(l *Layer) { l.Subdivide.Off = true }, 4097, true, HeavyFixSubdivideOff},
		{"without ids", func(l *Layer) { l.WithoutID, l.IDColumn = true, "" }, 4097, true, ""},
		{"lines without ids, subdivide off", func(l *Layer) { l.GeometryKind, l.WithoutID, l.IDColumn, l.Subdivide.Off = KindLine, true, "", true }, 4097, true, ""},
		{"rows fit", func(*Layer) {}, 64, false, ""},
	} {
		l := base
		c.edit(&l)
		p := prepared(t, l)
		p.state.maxVertices.Store(c.n)
		h := p.Heavy()
		if (h != nil) != c.heavy || (h != nil && (h.Fix != c.fix || h.MaxVertices != c.n || h.Limit != 64)) {
			t.Errorf("%s: Heavy() = %+v, want heavy %v with fix %q", c.name, h, c.heavy, c.fix)
		}
	}
}
