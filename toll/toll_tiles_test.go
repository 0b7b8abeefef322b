package toll

import (
	"testing"

	"github.com/paulmach/orb/maptile"

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

// A tile priced by its size (no estimate of its work yet) never costs less
// than the work model's price of an empty tile — the one query it runs —
// however small it is: the size price of a z14 tile is about the base
// price, half that.
func TestTileSizePriceIsAtLeastAnEmptyTile(t *testing.T) {
	t.Parallel()
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	w := throttle.DefaultWeights()
	empty := w.Read(0, 0, toll.msPerToken())
	if !(empty > w.Base) {
		t.Fatalf("the empty tile costs %v, the base %v: the test needs it dearer", empty, w.Base)
	}
	for z := range maptile.Zoom(21) {
		d := tileDemand(z, "places")
		got := toll.TilePrice(d)
		if want := max(w.Tile(d.Tile), empty); got != want {
			t.Errorf("z%d priced by size: %v, want %v (its area's price %v, an empty tile's %v)", z, got, want, w.Tile(d.Tile), empty)
		}
	}
}
