package toll

import (
	"math"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// A tile priced by size costs at least the database time settlement does
// not measure (the settle floor: under it a request keeps its price), at
// least its query alone and at most a full tile; above the area's price
// only.
func TestColdTilePriceFloor(t *testing.T) {
	t.Parallel()
	z14 := tiles.Demand{Layers: []*tiles.Layer{{Name: "places"}}, Tile: maptile.New(1<<13, 1<<13, 14)}
	z6 := tiles.Demand{Layers: []*tiles.Layer{{Name: "places"}}, Tile: maptile.New(32, 32, 6)}
	slowQuery := throttle.DefaultWeights()
	slowQuery.Work.QueryMS = 8
	for _, tc := range []struct {
		name  string
		edit  func(*Toll)
		d     tiles.Demand
		price float64
	}{
		{"z14: the settle floor's 5 ms", func(*Toll) {}, z14, 0.5},
		{"z14: a settle floor of 20 ms", func(t *Toll) { t.SettleFloor = 20 * time.Millisecond }, z14, 2},
		{"z14: a settle floor beyond any tile: a full tile", func(t *Toll) { t.SettleFloor = time.Hour }, z14, 5.08},
		{"z14: a query alone dearer than the settle floor", func(t *Toll) { t.Default = slowQuery }, z14, 0.8},
		{"z6: its area, above the floor", func(*Toll) {}, z6, throttle.DefaultWeights().Tile(z6.Tile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
			toll.Estimator = nil
			tc.edit(toll)
			if got := toll.TilePrice(tc.d); math.Abs(got-tc.price) > 1e-9 {
				t.Errorf("priced by size at %v tokens, want %v", got, tc.price)
			}
		})
	}
}
