package density

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
)

// fuzzModel is a model of clustered points and polygons of every size, some
// heavy, some across the antimeridian's neighbourhood and the poles.
func fuzzModel(t testing.TB) (*Model, float64) {
	rng := rand.New(rand.NewPCG(11, 11))
	fs := clustered(rng, 3000)
	for i := 0; i < 300; i++ {
		x, y, s := rng.Float64(), rng.Float64(), math.Pow(10, -7+7*rng.Float64())
		fs = append(fs, feature{box: rect{x, y, min(x+s, 1), min(y+s, 1)}, vertices: 4 + float64(rng.IntN(100)), heavy: i%30 == 0})
	}
	fs = append(fs, point(180, 89), point(-180, -89), point(179.9999, 0))
	var vertices float64
	for _, f := range fs {
		vertices += f.vertices
	}
	return modelOf(t, Polygon, SRIDLonLat, fs, Options{MaxCells: 8192}), vertices
}

// checkEstimate fails unless e is finite and within [0, limit] features.
func checkEstimate(t *testing.T, what string, e Estimate, limit, vertices float64) {
	t.Helper()
	if !(e.Features >= 0 && e.Features <= limit*(1+1e-9) && e.Vertices >= 0 && e.Vertices <= 2*vertices*(1+1e-9)) {
		t.Fatalf("%s: estimate %+v outside [0, %g] features, [0, %g] vertices", what, e, limit, 2*vertices)
	}
}

// No input — huge, tiny, inverted, across the antimeridian or the poles,
// not a number — makes an estimate panic, allocate or leave [0, total]
// (twice the total for a box across the antimeridian: two parts).
func FuzzEstimates(f *testing.F) {
	m, vertices := fuzzModel(f)
	total := m.Summary().Rows
	f.Add(-20037508.34, -20037508.34, 20037508.34, 20037508.34, 179.0, -1.0, -179.0, 1.0, 500.0)
	f.Add(1e6, 2e6, 1e6, 2e6, 0.0, 85.2, 0.0, 90.0, 2e7)
	f.Add(math.Inf(-1), 0.0, math.NaN(), 1.0, -180.0, -90.0, 180.0, 90.0, 0.0)
	f.Add(3e7, 3e7, 4e7, 4e7, 10.0, 10.0, -10.0, -10.0, -1.0)
	f.Fuzz(func(t *testing.T, x0, y0, x1, y1, west, south, east, north, radius float64) {
		var e Estimate
		allocs := testing.AllocsPerRun(1, func() {
			e = m.Rect(orb.Bound{Min: orb.Point{x0, y0}, Max: orb.Point{x1, y1}})
		})
		if allocs != 0 {
			t.Fatalf("Rect allocates %.0f times", allocs)
		}
		checkEstimate(t, "Rect", e, total, vertices)
		checkEstimate(t, "BBox", m.BBox(orb.Bound{Min: orb.Point{west, south}, Max: orb.Point{east, north}}), 2*total, vertices)
		checkEstimate(t, "Circle", m.Circle(orb.Point{west, south}, radius), total, vertices)
		checkEstimate(t, "Point", m.Point(orb.Point{east, north}), total, vertices)
	})
}
