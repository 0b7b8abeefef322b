package density

import (
	"fmt"
	"math"
	"testing"

	"github.com/paulmach/orb"
)

// cellByCell is addRect weighing every cell of every row it reads one by
// one, whatever the row's length: the reference a long row's sums stand in
// for.
func cellByCell(g *grid, r rect) sum {
	var acc sum
	if len(g.keys) == 0 {
		return acc
	}
	r.x0, r.x1 = edgeRange(r.x0, r.x1, g.edgeStep())
	r.y0, r.y1 = edgeRange(r.y0, r.y1, g.edgeStep())
	j0, j1 := g.rows(r.y0, r.y1)
	a, b := g.index(r.x0-g.hxMax), g.index(r.x1+g.hxMax)
	for j := j0; j <= j1; j++ {
		row := uint64(j) << 16                          //nolint:gosec // G115: a grid row
		lo := g.search(row+uint64(a), 0, len(g.keys))   //nolint:gosec // G115: a grid column
		hi := g.search(row+uint64(b+1), 0, len(g.keys)) //nolint:gosec // G115: a grid column
		for k := lo; k < hi; k++ {
			g.addCell(k, r.x0, r.x1, r.y0, r.y1, &acc)
		}
	}
	return acc
}

// rowCells is the number of cells in row j of g.
func rowCells(g *grid, j int) int {
	row := uint64(j) << 16 //nolint:gosec // G115: a grid row
	return g.search(row+1<<16, 0, len(g.keys)) - g.search(row, 0, len(g.keys))
}

// An edge row of the finest grid whose 65,536 cells alternate between
// features clamped onto the world's edge and features just short of it is
// not walked cell by cell by a query that spans every longitude at the
// edge: a polar box or circle weighs at most maxEdgeVisit cells one by one, and
// still counts the clamped features whole and the others as far as the
// query reaches them. The same holds for a fit grid's edge row.
func TestLongMixedEdgeRowsAreNotWalked(t *testing.T) {
	const n = 1 << 16
	for _, sign := range []float64{1, -1} {
		hemisphere := map[float64]string{1: "north", -1: "south"}[sign]
		side := map[float64]int{1: 1, -1: 0}[sign]
		pts := alternatingPoints(sign)
		// Boxes that fit a level-10 cell (0.75 of its width), one per
		// column: even ones at 88.9–89.1° (clamped), odd ones at
		// 85.03–85.04°, in the level-10 edge row.
		boxes := make([]feature, 1024)
		for i := range boxes {
			lat0, lat1 := 85.03, 85.04
			if i%2 == 0 {
				lat0, lat1 = 88.9, 89.1
			}
			west := -180 + (float64(i)+0.125)*360/1024
			boxes[i] = lonLatBox(west, min(sign*lat0, sign*lat1), west+0.75*360/1024, max(sign*lat0, sign*lat1), 4, false)
		}
		for _, tc := range []struct {
			name     string
			kind     Kind
			features []feature
			vertices float64
			grid     func(m *Model) *grid // the grid whose edge row is long and mixed
			queries  []edgeQuery
		}{
			{"65536 points", Point, pts, 1, func(m *Model) *grid { return &m.parts[0].all[m.level] }, []edgeQuery{
				{"bbox of the polar cap from 85.06°", bboxQuery(-180, sign*85.06, 180, sign*90), n / 2},
				{"bbox of the polar cap from 89.72°", bboxQuery(-180, sign*89.72, 180, sign*90), n / 2},
				{"circle of 1 km at the pole", circleQuery(0, sign*90, 1e3), n / 2},
				{"circle of 50 km at the pole", circleQuery(0, sign*90, 50e3), n / 2},
				{"circle of 50 km off the pole", circleQuery(45, sign*89.9, 50e3), n / 2},
				{"bbox of both", bboxQuery(-180, sign*85.0508, 180, sign*90), n},
				{"bbox of half the longitudes", bboxQuery(-90, sign*85.06, 90, sign*90), n / 4},
				{"bbox of both over half the longitudes", bboxQuery(-90, sign*85.0508, 90, sign*90), n / 2},
			}},
			{"1024 boxes of level 10", Polygon, boxes, 4, func(m *Model) *grid { return &m.parts[0].fit[10] }, []edgeQuery{
				{"bbox of the polar cap from 85.06°", bboxQuery(-180, sign*85.06, 180, sign*90), 512},
				{"circle of 1 km at the pole", circleQuery(0, sign*90, 1e3), 512},
				{"bbox of both", bboxQuery(-180, sign*85.02, 180, sign*90), 1024},
			}},
		} {
			m := modelOf(t, tc.kind, SRIDLonLat, tc.features, Options{})
			g := tc.grid(m)
			j := map[int]int{0: 0, 1: g.size - 1}[side]
			if g.edge[side] != mixedEdge || rowCells(g, j) != len(tc.features) {
				t.Fatalf("%s %s: edge row %d of level %d is %d with %d cells; want mixed with %d", hemisphere, tc.name, j, g.level, g.edge[side], rowCells(g, j), len(tc.features))
			}
			for _, q := range tc.queries {
				t.Run(fmt.Sprintf("%s/%s/%s", hemisphere, tc.name, q.name), func(t *testing.T) {
					var acc sum
					q.add(m, &acc)
					if acc.visited > maxEdgeVisit {
						t.Errorf("weighed %d cells one by one, want at most %d", acc.visited, maxEdgeVisit)
					}
					if math.Abs(acc.n-q.want) > 1e-6*q.want || math.Abs(acc.v-q.want*tc.vertices) > 1e-6*q.want*tc.vertices {
						t.Errorf("estimate %g features, %g vertices; want %g and %g", acc.n, acc.v, q.want, q.want*tc.vertices)
					}
				})
			}
		}
	}
}

// alternatingPoints is a point in each of the 65,536 cells of the finest
// grid's edge row of a hemisphere (sign): even columns at 89° (clamped onto
// the edge), odd ones at 85.0509°, in the edge row short of the edge.
func alternatingPoints(sign float64) []feature {
	const n = 1 << 16
	pts := make([]feature, n)
	for i := range pts {
		lat := 85.0509
		if i%2 == 0 {
			lat = 89
		}
		pts[i] = point(-180+(float64(i)+0.5)*360/n, sign*lat)
	}
	return pts
}

// BenchmarkPolarQueries estimates a polar box and circles at the pole on
// the model of alternatingPoints, whose finest edge row is 65,536 cells
// long and mixed.
func BenchmarkPolarQueries(b *testing.B) {
	m := modelOf(b, Point, SRIDLonLat, alternatingPoints(1), Options{})
	for _, q := range []struct {
		name string
		est  func() Estimate
	}{
		{"bbox from 85.06°", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{-180, 85.06}, Max: orb.Point{180, 90}}) }},
		{"circle of 1 km", func() Estimate { return m.Circle(orb.Point{0, 90}, 1e3) }},
		{"circle of 50 km", func() Estimate { return m.Circle(orb.Point{0, 90}, 50e3) }},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				q.est()
			}
		})
	}
}

// edgeQuery is a query of TestLongMixedEdgeRowsAreNotWalked: how it adds
// to a sum, and the features it should count.
type edgeQuery struct {
	name string
	add  func(m *Model, acc *sum)
	want float64
}

// bboxQuery adds a lon/lat box (west ≤ east) as Model.BBox does.
func bboxQuery(west, south, east, north float64) func(m *Model, acc *sum) {
	return func(m *Model, acc *sum) {
		m.addRect(lonLatRect(west, min(south, north), east, max(south, north)), acc)
	}
}

// circleQuery adds a circle as Model.Circle does.
func circleQuery(lon, lat, radius float64) func(m *Model, acc *sum) {
	return func(m *Model, acc *sum) {
		c, ok := newCircle(lon, lat, radius)
		if !ok {
			panic("bad circle")
		}
		m.addCircle(&c, acc)
	}
}

// An edge row read by a query that reaches the world's edge estimates what
// weighing its cells one by one does, whatever its length, when its cells
// short of the edge share one vertical spread: the cells clamped onto the
// edge count whole, the others by the share of that spread the query
// reaches. A run of up to maxEdgeVisit cells is weighed cell by cell; a longer
// one weighs only the cells the query's sides cut.
func TestEdgeRowsMatchCellByCell(t *testing.T) {
	for _, sign := range []float64{1, -1} {
		hemisphere := map[float64]string{1: "north", -1: "south"}[sign]
		for _, cells := range []int{10, 64, 65, 300, 4096} {
			for _, short := range [][]float64{{85.0509}, {85.0508, 85.05105}} {
				fs := edgeRowFeatures(cells, sign, short)
				m := modelOf(t, Point, SRIDLonLat, fs, Options{})
				g := &m.parts[0].all[m.level]
				j := map[float64]int{1: g.size - 1, -1: 0}[sign]
				if got := rowCells(g, j); got != cells {
					t.Fatalf("%d cells in the edge row, want %d", got, cells)
				}
				for _, south := range []float64{90, 85.0511, 85.051, 85.05085, 85.0507, 85.04} {
					for _, x := range [][2]float64{{0, 1}, {0.3, 0.7}, {0.1234567, 0.13}, {0.5, 0.5}} {
						name := fmt.Sprintf("%s/%d cells/short of the edge at %v/from %g°/x %g..%g", hemisphere, cells, short, south, x[0], x[1])
						y := normLat(south)
						r := rect{x[0], y, x[1], 1}
						if sign < 0 {
							r.y0, r.y1 = 0, 1-y
						}
						var got sum
						g.addRect(r, &got)
						want := cellByCell(g, r)
						if math.Abs(got.n-want.n) > 1e-9*max(want.n, 1) || math.Abs(got.v-want.v) > 1e-9*max(want.v, 1) {
							t.Errorf("%s: estimate %g features, %g vertices; cell by cell %g and %g", name, got.n, got.v, want.n, want.v)
						}
						if got.visited > maxEdgeVisit {
							t.Errorf("%s: weighed %d cells one by one, want at most %d", name, got.visited, maxEdgeVisit)
						}
					}
				}
			}
		}
	}
}

// edgeRowFeatures is points in cells columns of the finest edge row of a
// hemisphere (sign): every third cell holds a point beyond the edge
// (clamped onto it), the others one point at each latitude of short, short
// of the edge.
func edgeRowFeatures(cells int, sign float64, short []float64) []feature {
	stride := (1 << 16) / cells
	var fs []feature
	for i := range cells {
		lon := -180 + (float64(i*stride)+0.5)*360/(1<<16)
		if i%3 == 0 {
			fs = append(fs, point(lon, sign*(86+float64(i%4))))
			continue
		}
		for _, lat := range short {
			fs = append(fs, point(lon, sign*lat))
		}
	}
	return fs
}

// A mixed edge row of up to maxEdgeVisit cells in reach is weighed cell by
// cell, as exactly as any short row: summed as one cell over the whole row,
// columns the query does not read decided how much of those it reads
// counted — dense points near the edge outside the query made a query of
// one clamped point and sparse points on the row's inner side estimate 292.
func TestMixedEdgeRowsInReachAreWeighedCellByCell(t *testing.T) {
	const stride = 64 // 1,024 columns of the finest row
	lon := func(col int) float64 { return -180 + (float64(col*stride)+0.5)*360/(1<<16) }
	for _, dense := range []float64{85.05105, 85.0507} {
		sparse := map[float64]float64{85.05105: 85.0507, 85.0507: 85.05105}[dense]
		var fs []feature
		for c := range 300 { // outside the query
			for range 50 {
				fs = append(fs, point(lon(c), dense))
			}
		}
		for c := 600; c < 900; c++ { // inside it
			fs = append(fs, point(lon(c), sparse))
		}
		fs = append(fs, point(lon(950), 87)) // clamped onto the edge
		m := modelOf(t, Point, SRIDLonLat, fs, Options{})
		g := &m.parts[0].all[m.level]
		y0 := normLat(85.0509)
		r := rect{float64(590*stride) / (1 << 16), y0, 1, 1}
		var got sum
		g.addRect(r, &got)
		want := cellByCell(g, r)
		if math.Abs(got.n-want.n) > 1e-9*max(want.n, 1) {
			t.Errorf("dense at %g, sparse at %g: estimate %g features, cell by cell %g", dense, sparse, got.n, want.n)
		}
	}
}
