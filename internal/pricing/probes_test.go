package pricing

import (
	"math"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/throttle"
)

// fenceModel is a model of 50 small square fences of 25 vertices around
// Berlin (13.0–13.5°E, 52.4–52.5°N), held in memory.
func fenceModel(t *testing.T) *density.Model {
	t.Helper()
	var fs []density.Feature
	for i := range 50 {
		w := 13 + 0.01*float64(i)
		fs = append(fs, density.Feature{Bound: orb.Bound{Min: orb.Point{w, 52.4}, Max: orb.Point{w + 0.02, 52.5}}, Vertices: 25})
	}
	m, err := density.NewModel(density.Relation{Table: pgx.Identifier{"test", "fences"}, GeometryColumn: "geom",
		SRID: density.SRIDLonLat, Kind: density.Polygon}, fs, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A batch check (or contains) probes the index once per point, found or
// not: a batch of N points in no fence's box reads nothing but costs N
// probes, so its estimate, and its price, grow in proportion to N — not
// the query's price whatever N, as when a point that finds nothing
// counted for nothing. A point in fences' boxes pays its probe and the
// fences.
func TestEveryPointOfABatchPaysItsProbe(t *testing.T) {
	m := fenceModel(t)
	w := throttle.Weights{Base: 0.01, MaxCost: 60, Work: throttle.WorkModel{QueryMS: 0.1, FeatureMS: 0.001, VertexMS: 0.0003}}
	const msPerToken = 10
	ocean := func(n int) []orb.Point { // the South Pacific: no fence's box
		at := make([]orb.Point, n)
		for i := range at {
			at[i] = orb.Point{-140 + 0.001*float64(i%1000), -40 + 0.001*float64(i/1000)}
		}
		return at
	}
	var unit float64 // the price of a point beyond the query's
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		est := probes(m, ocean(n), 0)
		if est.Features != float64(n) || est.Vertices != 0 {
			t.Errorf("%d points in no fence's box: %+v, want %d probes and no vertices", n, est, n)
		}
		price := w.Read(est.Features, est.Vertices, msPerToken)
		perPoint := (price - w.Work.QueryMS/msPerToken) / float64(n)
		if n == 1000 {
			unit = perPoint
		}
		t.Logf("%5d points over the ocean: %+v, %.4f tokens", n, est, price)
		if n >= 100 && math.Abs(perPoint-w.Work.FeatureMS/msPerToken) > 1e-9 {
			t.Errorf("%d points over the ocean: %.6f tokens a point beyond the query, want feature_ms's %.6f", n, perPoint, w.Work.FeatureMS/msPerToken)
		}
	}
	if ten, one := w.Read(probes(m, ocean(10000), 0).Features, 0, msPerToken), w.Read(probes(m, ocean(1000), 0).Features, 0, msPerToken); !(ten > 9*one) {
		t.Errorf("10,000 ocean points cost %v, 1,000 cost %v: want about 10× (%v a point)", ten, one, unit)
	}
	city := []orb.Point{{13.105, 52.45}, {13.255, 52.45}}
	hit := probes(m, city, 0)
	found := m.Point(city[0]).Features + m.Point(city[1]).Features
	if found < 2 || hit.Features != found+2 {
		t.Errorf("two points among the fences: %+v, want their %v fences and two probes", hit, found)
	}
	if pieces := probes(m, city, 4); pieces.Features != hit.Features || pieces.Vertices != 8*found {
		t.Errorf("two points among the fences, pieces of 4 vertices: %+v, want %v features and two pieces a fence found (%v vertices)", pieces, hit.Features, 8*found)
	}
}
