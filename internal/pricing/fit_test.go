package pricing_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/throttle"
)

func TestFitRecoversTheCoefficients(t *testing.T) {
	for _, tc := range []struct {
		name string
		want throttle.WorkModel
	}{
		{"all three", throttle.WorkModel{QueryMS: 0.4, FeatureMS: 0.002, VertexMS: 0.0001}},
		{"points: no vertex term", throttle.WorkModel{QueryMS: 0.3, FeatureMS: 0.004}},
		{"a fixed cost only", throttle.WorkModel{QueryMS: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var obs []pricing.Observation
			for range 200 {
				f := math.Exp(r.Float64() * 12)
				v := f * (1 + r.Float64()*500)
				obs = append(obs, pricing.Observation{Features: f, Vertices: v, MS: tc.want.MS(f, v)})
			}
			got, err := pricing.Fit(obs)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range [][2]float64{{tc.want.QueryMS, got.QueryMS}, {tc.want.FeatureMS, got.FeatureMS}, {tc.want.VertexMS, got.VertexMS}} {
				if math.Abs(p[0]-p[1]) > 1e-6*max(1, p[0]) {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// Time that falls as features grow has no non-negative exact fit: the
// fit keeps every coefficient ≥ 0 and prices by the fixed cost.
func TestFitNeverGoesNegative(t *testing.T) {
	var obs []pricing.Observation
	for i := range 50 {
		f := float64(i * 100)
		obs = append(obs, pricing.Observation{Features: f, Vertices: 0, MS: 10 - f/1000})
	}
	got, err := pricing.Fit(obs)
	if err != nil {
		t.Fatal(err)
	}
	if got.QueryMS <= 0 || got.FeatureMS != 0 || got.VertexMS != 0 {
		t.Fatalf("got %+v, want a positive fixed cost and no negative slope", got)
	}
}

func TestFitNeedsThreeObservations(t *testing.T) {
	obs := []pricing.Observation{{1, 1, 1}, {2, 2, 2}, {math.NaN(), 1, 1}, {1, 1, math.Inf(1)}}
	if _, err := pricing.Fit(obs); err == nil {
		t.Fatal("two usable observations fitted")
	}
}

func FuzzFit(f *testing.F) {
	f.Add(1.0, 0.0, 0.5, 10.0, 100.0, 3.0, 1000.0, 5000.0, 40.0)
	f.Add(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Add(1e300, -1.0, 1e-300, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0)
	f.Fuzz(func(t *testing.T, f1, v1, m1, f2, v2, m2, f3, v3, m3 float64) {
		obs := []pricing.Observation{{f1, v1, m1}, {f2, v2, m2}, {f3, v3, m3}, {f1 + f2, v1 + v2, m1 + m2}}
		c, err := pricing.Fit(obs)
		if err != nil {
			return
		}
		for _, x := range []float64{c.QueryMS, c.FeatureMS, c.VertexMS} {
			if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("Fit(%v) = %+v", obs, c)
			}
		}
	})
}
