package loadtest_test

import (
	"fmt"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/loadtest"
)

// A dense tile and an empty one both priced 60 tokens, a quick tile priced
// 1 and a slow one priced 1.2: the price hardly ranks them by database time.
func ExampleSpearman() {
	price := []float64{60, 60, 1, 1.2}
	dbMS := []float64{120, 0.05, 0.1, 30}
	fmt.Printf("ρ = %.3f\n", loadtest.Spearman(price, dbMS))
	fmt.Println(loadtest.Ranks(price))
	// Output:
	// ρ = 0.105
	// [3.5 3.5 1 2]
}

// The same seed and anchors give the same tiles, half of them under an
// anchor.
func ExampleSampleTiles() {
	berlin := orb.Point{13.405, 52.52}
	for _, t := range loadtest.SampleTiles(1, 4, 10, 12, []orb.Point{berlin}) {
		fmt.Println(loadtest.TilePath("points", t))
	}
	// Output:
	// /tiles/points/11/1100/671.mvt
	// /tiles/points/11/1855/860.mvt
	// /tiles/points/12/2200/1343.mvt
	// /tiles/points/10/810/970.mvt
}
