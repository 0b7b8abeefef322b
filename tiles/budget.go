package tiles

import "math/bits"

// Budget is how a tile that exceeds its layer's byte budget is reduced.
// Level 0 is the tile as generalised; each further level halves the
// detail again, deterministically, until the tile fits or the last level
// is reached (then that level is served — for lines and polygons, the
// smallest level, the last of those as small — whatever its size: a tile
// is never cut mid-feature):
//
//   - points: the clusters are merged into cells twice as wide per level
//     (counts summed, the first in order_by kept as the representative);
//     beyond the layer's generalised zooms, level 1 clusters at the
//     zoom's own cell;
//   - lines and polygons: the simplification tolerance doubles per level
//     and the feature cap halves (the first features in order_by kept, at
//     least one: a reduced tile is never empty); a feature whose
//     simplification is not valid, or that its redraw drops, is drawn as
//     at level 0, so a level may be larger than the one before it.
type Budget struct {
	Bytes     int // the budget, uncompressed MVT bytes
	LastLevel int
}

// DefaultMaxTileBytes is the default byte budget of one layer of a tile:
// MapLibre's and Mapbox's guidance for a whole tile.
const DefaultMaxTileBytes = 500_000

// maxBudgetLevel bounds the reduction: 2^8 = 256 times coarser.
const maxBudgetLevel = 8

// BudgetFor returns the reduction levels of a layer's tile at generalisation
// g: points stop when one cell covers the whole tile, lines and polygons
// after maxBudgetLevel halvings.
func BudgetFor(kind Kind, g Generalization, bytes int) Budget {
	last := maxBudgetLevel
	if kind == KindPoint {
		last = bits.Len(uint(g.CellsPerTile)) - 1 // log2(cells): one cell per tile
		if !g.On {
			last++
		}
		last = max(1, last)
	}
	return Budget{Bytes: bytes, LastLevel: last}
}
