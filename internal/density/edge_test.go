package density

import (
	"fmt"
	"math"
	"testing"

	"github.com/paulmach/orb"
)

// lonLatBox is a feature whose bounding box is a lon/lat box (degrees).
func lonLatBox(west, south, east, north, vertices float64, heavy bool) feature {
	return feature{box: lonLatRect(west, south, east, north), vertices: vertices, heavy: heavy}
}

// Features wholly beyond ±85.0511° lie on the world's clamped edge: a point,
// box or circle that reaches them counts each whole, in either hemisphere,
// whatever the level of the grid that holds them — also a circle that lies
// wholly beyond the edge itself.
func TestFeaturesBeyondTheEdgeCountWhole(t *testing.T) {
	type query struct {
		name string
		est  func(m *Model) Estimate
		want float64 // features
	}
	bbox := func(west, south, east, north float64) func(m *Model) Estimate {
		return func(m *Model) Estimate {
			return m.BBox(orb.Bound{Min: orb.Point{west, south}, Max: orb.Point{east, north}})
		}
	}
	circle := func(lon, lat, r float64) func(m *Model) Estimate {
		return func(m *Model) Estimate { return m.Circle(orb.Point{lon, lat}, r) }
	}
	at := func(lon, lat float64) func(m *Model) Estimate {
		return func(m *Model) Estimate { return m.Point(orb.Point{lon, lat}) }
	}
	for _, sign := range []float64{1, -1} {
		hemisphere := map[float64]string{1: "north", -1: "south"}[sign]
		near, pole, both := make([]feature, 100), make([]feature, 100), make([]feature, 0, 200)
		for i := range near {
			near[i] = point(float64(i)*0.001, sign*85.2)     // 0°..0.099°E: under 1 km apart
			pole[i] = point(-180+float64(i)*3.6, sign*89.95) // 5.6 km from the pole
			// Also 100 in the finest grid's edge row short of the edge.
			both = append(both, pole[i], point(-178.2+float64(i)*3.6, sign*85.0509))
		}
		// Ten 10°×2° boxes at 86–88°: light, fit for a level-5 cell; and
		// ten 1°×2° heavy ones (not giants), fit for a level-8 cell.
		var light, heavy []feature
		for i := range 10 {
			w := float64(i) * 0.1
			light = append(light, lonLatBox(w, sign*86, 10+w, sign*88, 5, false))
			heavy = append(heavy, lonLatBox(w, sign*86, 1+w, sign*88, 1000, true))
		}
		lo, hi := min(sign*86.5, sign*87.5), max(sign*86.5, sign*87.5)
		for _, tc := range []struct {
			name     string
			kind     Kind
			features []feature
			vertices float64 // of each feature
			queries  []query
		}{
			{"points at 85.2°", Point, near, 1, []query{
				{"circle of 5 km among them", circle(0.05, sign*85.2, 5e3), 100},
				{"bbox around them", bbox(-1, min(sign*85.1, sign*85.3), 1, max(sign*85.1, sign*85.3)), 100},
				{"point between them", at(0.0505, sign*85.2), 0},
			}},
			{"points around the pole", Point, pole, 1, []query{
				{"circle of 20 km at the pole", circle(0, sign*90, 20e3), 100},
				{"circle of 20 km off the pole", circle(33, sign*89.9, 20e3), 100},
				{"bbox of the polar cap", bbox(-180, min(sign*89, sign*90), 180, max(sign*89, sign*90)), 100},
			}},
			{"points on and just off the edge", Point, both, 1, []query{
				{"circle of 20 km at the pole", circle(0, sign*90, 20e3), 100},
				{"bbox of the polar cap", bbox(-180, min(sign*89, sign*90), 180, max(sign*89, sign*90)), 100},
				{"bbox of both", bbox(-180, min(sign*85.0508, sign*90), 180, max(sign*85.0508, sign*90)), 200},
			}},
			{"polygons at 86–88°", Polygon, light, 5, []query{
				{"point in them", at(5, sign*87), 10},
				{"bbox in them", bbox(4, lo, 6, hi), 10},
				{"circle of 10 km in them", circle(5, sign*87, 10e3), 10},
				{"circle of 10 km east of them", circle(30, sign*87, 10e3), 0},
			}},
			{"heavy polygons at 86–88°", Polygon, heavy, 1000, []query{
				{"point in them", at(0.95, sign*87), 10},
				{"bbox in them", bbox(0.92, lo, 0.98, hi), 10},
				{"circle of 1 km in them", circle(0.95, sign*87, 1e3), 10},
			}},
		} {
			m := modelOf(t, tc.kind, SRIDLonLat, tc.features, Options{})
			if tc.name == "points at 85.2°" { // the circle's answer is the points within 5 km
				n := 0.0
				for i := range tc.features {
					if groundDistance(0.05, sign*85.2, float64(i)*0.001, sign*85.2) <= 5e3 {
						n++
					}
				}
				if n != 100 {
					t.Fatalf("%g of the points lie within 5 km", n)
				}
			}
			for _, q := range tc.queries {
				t.Run(fmt.Sprintf("%s/%s/%s", hemisphere, tc.name, q.name), func(t *testing.T) {
					got := q.est(m)
					if math.Abs(got.Features-q.want) > 1e-6*max(q.want, 1) || math.Abs(got.Vertices-q.want*tc.vertices) > 1e-6*max(q.want*tc.vertices, 1) {
						t.Errorf("estimate %+v, want %g features and %g vertices", got, q.want, q.want*tc.vertices)
					}
				})
			}
		}
	}
}

// A query on the world's edge, or beyond it, reads the edge row of every
// grid, whatever the half extents.
func TestRowsAtTheEdges(t *testing.T) {
	for _, l := range []int{0, 1, 5, 16} {
		for _, hy := range []float64{0, 1e-9} {
			g := emptyGrid(l)
			g.hyMax = hy
			last := g.size - 1
			for _, tc := range []struct {
				y0, y1 float64
				j0, j1 int
			}{
				{1, 1, last, last},
				{1 - g.edgeStep(), 2, last, last},
				{0, 0, 0, 0},
				{-1, g.edgeStep(), 0, 0},
				{0, 1, 0, last},
			} {
				if j0, j1 := g.rows(tc.y0, tc.y1); j0 != tc.j0 || j1 != tc.j1 {
					t.Errorf("level %d, half height %g: rows(%g, %g) = %d, %d; want %d, %d", l, hy, tc.y0, tc.y1, j0, j1, tc.j0, tc.j1)
				}
			}
		}
	}
}
