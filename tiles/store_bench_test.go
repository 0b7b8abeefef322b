package tiles_test

import (
	"fmt"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// BenchmarkStoreTile measures one tile's guarded read (connection, one
// batch with the read-only transaction, the layer's query) on the demo's
// dense z14 tile of Berlin and a z10 tile, one render at a time.
//
//	go test -run '^$' -bench BenchmarkStoreTile -benchtime 2s ./tiles
func BenchmarkStoreTile(b *testing.B) {
	store := tiles.NewStore(testenv.ReadPool(b))
	layers := resolve(b, demoCatalog(b), "places")
	for _, z := range []maptile.Zoom{14, 10} {
		tile := maptile.At(berlin, z)
		b.Run(fmt.Sprintf("z%d", z), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := store.Tile(b.Context(), layers, tile); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
