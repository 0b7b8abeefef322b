package density_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// benchModel builds the model of a demo relation.
func benchModel(b *testing.B, name string) (*density.Model, []orb.Point) {
	b.Helper()
	pool := testenv.ReadPool(b)
	for _, d := range demoRelations {
		if d.name != name {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m, err := density.Build(ctx, pool, d.rel, density.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return m, anchors(ctx, b, pool, d.rel, 500)
	}
	b.Fatalf("no demo relation %q", name)
	return nil, nil
}

// BenchmarkRect estimates tile envelopes (with buffer) at zooms 0–16, half
// of them where data is, on the demo relations.
func BenchmarkRect(b *testing.B) {
	for _, name := range []string{"places_3857", "districts_3857", "geofences_4326"} {
		b.Run(name, func(b *testing.B) {
			m, at := benchModel(b, name)
			rng := rand.New(rand.NewPCG(3, 4))
			bounds := make([]orb.Bound, 1024)
			for i := range bounds {
				z := rng.IntN(17)
				x, y := rng.IntN(1<<z), rng.IntN(1<<z)
				if i%2 == 0 {
					a := at[rng.IntN(len(at))]
					x, y = tileAt(z, a[0], a[1])
				}
				bounds[i] = tileBound(z, x, y, 64.0/4096)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var sink float64
			for i := 0; b.Loop(); i++ {
				sink += m.Rect(bounds[i&1023]).Features
			}
			_ = sink
		})
	}
}
