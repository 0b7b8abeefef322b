package density

import (
	"math"
	"time"

	"github.com/paulmach/orb"
)

// Estimate is how much of a relation a query reads: the features whose
// bounding box meets the query's area, and their vertices (ST_NPoints of the
// whole geometries). Both are expected values, not integers.
type Estimate struct {
	Features float64
	Vertices float64
}

// Summary describes a built model.
type Summary struct {
	Relation string    // the relation's quoted name
	Rows     float64   // features the model holds (scaled back when sampled)
	Sampled  float64   // the fraction of rows the build read: 1 when it read all
	Level    int       // the finest grid level: cells of 2^-Level of the world's width
	Cells    int       // non-empty cells over all levels
	Bytes    int       // memory the cells take
	BuiltAt  time.Time // when the build query finished
	Took     time.Duration
	// Skipped is how many features (scaled back when sampled) the build
	// left out because PostGIS could not transform their boxes to lon/lat
	// (a point outside the projection's domain; see Relation.Transformed):
	// a model of the others, said, rather than no model at all.
	Skipped float64
}

// Model answers, in memory, how much of one relation any area reads. A Model
// is immutable once built, and safe for any number of concurrent readers.
type Model struct {
	rel     Relation
	level   int
	parts   [2]pyramid // light and heavy features
	giants  []giant    // heavy features with huge boxes, kept whole (see giantLevel)
	summary Summary
}

// Summary describes the model.
func (m *Model) Summary() Summary { return m.summary }

// maxRows is about how many rows of cells a query reads at the level chosen
// for it: the finest level at which its height spans at most maxRows cells.
const maxRows = 8

// levelFor is the grid level for a query of normalised height h: the finest
// at which h spans at most maxRows cells (log2 by math.Frexp: exact, no
// transcendental call).
func (m *Model) levelFor(h float64) int {
	if h*float64(uint64(1)<<m.level) <= maxRows {
		return m.level
	}
	_, exp := math.Frexp(maxRows / h) // maxRows/h = frac·2^exp, frac in [0.5, 1)
	return min(max(exp-1, 0), m.level)
}

// addRect estimates a normalised rectangle at the level that suits its
// height, in each pyramid.
func (m *Model) addRect(r rect, acc *sum) {
	r, ok := r.clamp01()
	if !ok {
		return
	}
	addGiants(m.giants, r, r, acc)
	m.addGrids(r, acc)
}

// addGrids adds the estimate of the grids (every feature but the giants)
// for r, already clamped; each grid opens it onto the world's edges in its
// own steps (see edgeRange).
func (m *Model) addGrids(r rect, acc *sum) {
	q := m.levelFor(r.y1 - r.y0)
	for i := range m.parts {
		if !m.parts[i].empty() {
			m.parts[i].addRect(r, q, acc)
		}
	}
}

// result turns an accumulated sum into an Estimate.
func (m *Model) result(acc sum) Estimate {
	return Estimate{Features: acc.n, Vertices: acc.v}
}

// Rect estimates a rectangle in EPSG:3857 metres, such as a tile's envelope
// expanded by its buffer: what `geom && rectangle` reads when the relation is
// in EPSG:3857, and, when it is in EPSG:4326, what the tile query reads —
// `geom && ST_Transform(rectangle, 4326)` with the rectangle's x range cut
// at the world's edges first (an overhang past ±180° is not read on the
// other side). A relation in another SRID, modelled in EPSG:4326
// (Relation.Transformed), is estimated the same way: the features whose
// box, transformed, meets the rectangle, without the margin the tile
// query's box of the transformed corners adds. A rectangle outside the
// world, empty or not finite estimates zero.
func (m *Model) Rect(b orb.Bound) Estimate {
	var acc sum
	m.addRect(rect3857(b), &acc)
	return m.result(acc)
}

// rect3857 is the normalised rectangle a relation in either SRID reads for
// an EPSG:3857 rectangle, before it is clamped to the world: EPSG:3857 y
// maps linearly to normalised y whatever the SRID (the latitude of y is
// atan(sinh(y/R)), whose normLat is (y + halfWorld) / worldWidth), and x
// too, within the world's edges.
func rect3857(b orb.Bound) rect {
	return rect{normX3857(b.Min[0]), normX3857(b.Min[1]), normX3857(b.Max[0]), normX3857(b.Max[1])}
}

// BBox estimates a lon/lat box (degrees): west > east crosses the
// antimeridian and counts both parts. Latitudes beyond the square world's
// edge (±85.0511°) count as its edge.
func (m *Model) BBox(b orb.Bound) Estimate {
	var acc sum
	if b.Min[0] > b.Max[0] {
		// Two boxes the query reads as one (OR): a giant that meets both,
		// such as a country across the antimeridian, is read once.
		east, okE := lonLatRect(b.Min[0], b.Min[1], 180, b.Max[1]).clamp01()
		west, okW := lonLatRect(-180, b.Min[1], b.Max[0], b.Max[1]).clamp01()
		switch {
		case okE && okW:
			addGiants(m.giants, east, west, &acc)
		case okE:
			addGiants(m.giants, east, east, &acc)
		case okW:
			addGiants(m.giants, west, west, &acc)
		}
		if okE {
			m.addGrids(east, &acc)
		}
		if okW {
			m.addGrids(west, &acc)
		}
	} else {
		m.addRect(lonLatRect(b.Min[0], b.Min[1], b.Max[0], b.Max[1]), &acc)
	}
	return m.result(acc)
}

// Circle estimates the features whose bounding box comes within radius
// metres (on the ground) of a lon/lat centre: for points, what ST_DWithin on
// geography finds. Circles over a pole or the antimeridian are handled; a
// negative or non-finite radius or centre estimates zero.
func (m *Model) Circle(center orb.Point, radius float64) Estimate {
	c, ok := newCircle(center[0], center[1], radius)
	if !ok {
		return Estimate{}
	}
	var acc sum
	m.addCircle(&c, &acc)
	return m.result(acc)
}

// addCircle adds the estimate of c: its giants, and each pyramid at the
// level that suits the circle's height.
func (m *Model) addCircle(c *circle, acc *sum) {
	if len(m.giants) > 0 {
		c.addGiants(m.giants, acc)
	}
	q := m.levelFor(c.y1 - c.y0)
	for i := range m.parts {
		if !m.parts[i].empty() {
			m.parts[i].addCircle(c, q, acc)
		}
	}
}

// Point estimates the features whose bounding box contains a lon/lat point:
// the candidates a point-in-polygon test reads.
func (m *Model) Point(p orb.Point) Estimate {
	var acc sum
	if p[0] >= -180 && p[0] <= 180 && p[1] >= -90 && p[1] <= 90 {
		x, y := normLon(p[0]), normLat(p[1])
		m.addRect(rect{x, y, x, y}, &acc)
	}
	return m.result(acc)
}
