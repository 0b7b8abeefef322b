package toll

import (
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// fixedEstimate estimates every request at est.
type fixedEstimate struct{ est density.Estimate }

func (f fixedEstimate) Tile(*tiles.Layer, maptile.Tile) (density.Estimate, bool) { return f.est, true }
func (f fixedEstimate) Geofence(geofence.Demand) (density.Estimate, bool)        { return f.est, true }

// Until a relation's density model is built — the first seconds after
// start-up, and for good on a relation the models cannot describe (an SRID
// other than 3857 or 4326) — a tile is priced by its size, "erring high,
// so a cold server is not an open one" (README, "How the price is
// computed"). From z12 on, the size price is below what the model charges
// for an empty tile of the same address (its query alone), and hundreds of
// times below a full one: a cold (or unmodelled) layer's street-level
// tiles are priced at about the base price.
func TestColdTilePriceErrsHigh(t *testing.T) {
	t.Parallel()
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	for z := maptile.Zoom(12); z <= 16; z++ {
		n := uint32(1) << z
		d := tiles.Demand{Layers: []*tiles.Layer{{Name: "places"}}, Tile: maptile.New(n/2, n/2, z)} // at the equator
		toll.Estimator = nil
		cold := toll.TilePrice(d)
		toll.Estimator = fixedEstimate{}
		empty := toll.TilePrice(d)
		toll.Estimator = fixedEstimate{density.Estimate{Features: tiles.DefaultMaxFeatures, Vertices: tiles.DefaultMaxFeatures}}
		full := toll.TilePrice(d)
		if cold < empty {
			t.Errorf("z%d: priced by size (no model) %.4f tokens, below the model's empty tile %.4f (a full one: %.2f)", z, cold, empty, full)
		}
	}
}
