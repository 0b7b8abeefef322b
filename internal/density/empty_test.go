package density_test

import (
	"context"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// Every z2 tile where the demo points have no feature (open ocean, Antarctica)
// estimates (next to) zero, and the densest one within 5% of what PostGIS
// counts (its buffer cuts through the clusters of its neighbours).
func TestEmptyTilesEstimateZero(t *testing.T) {
	pool := testenv.ReadPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range demoRelations[:2] { // places, both columns
		m, err := density.Build(ctx, pool, d.rel, density.Options{})
		if err != nil {
			t.Fatal(err)
		}
		empty, densest, densestExact := 0, density.Estimate{}, 0.0
		for x := 0; x < 4; x++ {
			for y := 0; y < 4; y++ {
				p := tileProbe(d.rel, 2, x, y, "z2")
				got, want := p.est(m), exact(ctx, t, pool, d.rel, p)
				if want.Features == 0 {
					empty++
					if got.Features > 0.01 {
						t.Errorf("%s %s: estimate %.3f features where PostGIS reads none", d.name, p.label, got.Features)
					}
				}
				if want.Features > densestExact {
					densest, densestExact = got, want.Features
				}
			}
		}
		if empty == 0 {
			t.Fatalf("%s: no empty z2 tile: the demo data changed", d.name)
		}
		if relErr(densest.Features, densestExact) > 0.05 {
			t.Errorf("%s: densest z2 tile estimates %.1f features, PostGIS reads %.0f", d.name, densest.Features, densestExact)
		}
		t.Logf("%s: %d empty z2 tiles estimate ≤ 0.01; the densest %.1f (exact %.0f)", d.name, empty, densest.Features, densestExact)
	}
}
