package toll

import (
	"testing"

	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// A tile served from the cache costs its base price: the database did no
// work. A composite hit costs the largest base of its layers (one lookup),
// not their sum.
func TestTilePriceCacheHit(t *testing.T) {
	t.Parallel()
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	heavy := throttle.DefaultWeights()
	heavy.Base = 3
	toll.LayerWeights = map[string]throttle.Weights{"heavy": heavy}

	hit := func(d tiles.Demand) tiles.Demand { d.CacheHit = true; return d }
	for _, tc := range []struct {
		name string
		d    tiles.Demand
		want float64
	}{
		{"z2 miss", tileDemand(2, "places"), 60},
		{"z2 hit", hit(tileDemand(2, "places")), 0.01},
		{"z14 hit", hit(tileDemand(14, "places")), 0.01},
		{"heavy hit", hit(tileDemand(2, "heavy")), 3},
		{"composite hit", hit(tileDemand(2, "places", "heavy")), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toll.TilePrice(tc.d); got != tc.want {
				t.Errorf("TilePrice = %v, want %v", got, tc.want)
			}
		})
	}

	w, ok := admit(t, toll, "", hit(tileDemand(0, "places")))
	if !ok || w.Header().Get("X-Request-Cost") != "0.01" {
		t.Fatalf("admitted %v, X-Request-Cost %q; want the base price 0.01", ok, w.Header().Get("X-Request-Cost"))
	}
}
