package density

import (
	"math"

	"github.com/paulmach/orb"
)

// Feature is one feature of a model built in memory (NewModel).
type Feature struct {
	// Bound is the feature's bounding box in the SRID the relation is
	// modelled in: EPSG:3857 metres for an EPSG:3857 relation, else lon/lat
	// degrees (west ≤ east), as a build transforms the boxes of a relation
	// in another SRID (Relation.Transformed).
	Bound orb.Bound
	// Vertices is ST_NPoints of the geometry; below 1 counts 1.
	Vertices int
}

// bytesPerVertex is what a vertex takes in a stored geometry (two float8):
// NewModel's stand-in for pg_column_size when it sorts heavy from light.
const bytesPerVertex = 16

// NewModel builds a model of features held in memory, grouped into cells as
// Build groups a relation's rows (a feature of at least HeavyBytes/16
// vertices is heavy). It reads nothing and samples nothing: it is for tests
// of code that prices with a model, and for data that does not live in
// PostgreSQL.
func NewModel(rel Relation, features []Feature, opts Options) (*Model, error) {
	if err := rel.Validate(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	heavy := max(1, opts.HeavyBytes/bytesPerVertex)
	boxes := make([]cellInput, len(features))
	for i, f := range features {
		b := f.Bound
		var r rect
		if rel.SRID == SRIDWebMercator {
			r = rect{normX3857(b.Min[0]), normX3857(b.Min[1]), normX3857(b.Max[0]), normX3857(b.Max[1])}
		} else {
			r = lonLatRect(b.Min[0], b.Min[1], b.Max[0], b.Max[1])
		}
		v := max(f.Vertices, 1)
		if rel.Kind == Point {
			v = 1
		}
		boxes[i] = cellInput{box: r, vertices: float64(v), heavy: v >= heavy}
	}
	m := newModel(rel, groupRows(boxes, opts.MaxLevel), tallies{}, 1, opts)
	m.summary.BuiltAt = opts.Now()
	return m, nil
}

// cellInput is one feature on its way into a cell: its normalised box.
type cellInput struct {
	box      rect
	vertices float64
	heavy    bool
}

// groupRows groups features into the rows the build query returns
// (sql/density_cells.sql): per class and cell of the fit level, with the
// coordinates clamped into the world as the query clamps them.
func groupRows(features []cellInput, maxLevel int) []cellRow {
	scale := math.Ldexp(1, maxLevel)
	type groupKey struct {
		heavy bool
		f     int
		i, j  int64
		giant int64 // the finest cell of a giant's centre, else -1
	}
	at := map[groupKey]int{}
	var rows []cellRow
	clamp := func(v float64) float64 { return min(max(v, 0), 1) }
	for _, ft := range features {
		b := rect{clamp(ft.box.x0), clamp(ft.box.y0), clamp(ft.box.x1), clamp(ft.box.y1)}
		if !(b.x0 <= b.x1 && b.y0 <= b.y1) {
			continue // inverted or not a number: no box, as ST_XMin of an empty geometry
		}
		f := min(maxLevel, int(math.Floor(-math.Log2(max(b.x1-b.x0, b.y1-b.y0, 1/scale)))))
		cx, cy := (b.x0+b.x1)/2, (b.y0+b.y1)/2
		ix, iy := int64(min(scale-1, math.Floor(cx*scale))), int64(min(scale-1, math.Floor(cy*scale)))
		k := groupKey{ft.heavy, f, ix >> (maxLevel - f), iy >> (maxLevel - f), -1}
		if ft.heavy && f <= giantLevel {
			k.giant = ix<<20 | iy
		}
		n, ok := at[k]
		if !ok {
			n = len(rows)
			at[k] = n
			shift := uint(maxLevel - f)
			rows = append(rows, cellRow{heavy: ft.heavy, giant: k.giant >= 0, f: f, x0: cx, y0: cy, x1: cx, y1: cy,
				key: morton(uint32(k.i)<<shift, uint32(k.j)<<shift)}) //nolint:gosec // G115: cell indices are 0..2^maxLevel-1 (maxLevel <= 16)
		}
		c := &rows[n]
		c.merge(&cellRow{n: 1, v: ft.vertices, sdx: b.x1 - b.x0, sdy: b.y1 - b.y0, x0: cx, y0: cy, x1: cx, y1: cy, sx: cx, sy: cy})
	}
	return rows
}
