package loadtest

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
)

// maxMercatorLat is the latitude where the square Web Mercator world ends.
const maxMercatorLat = 85.05112877980659

// SampleTiles draws n distinct tiles with zooms uniform in minZ..maxZ,
// deterministically from seed: even draws are the tile under a random
// anchor (a lon/lat where the layer has data), odd draws a uniformly random
// tile of the zoom ("anywhere"). Without anchors every draw is anywhere. A
// draw that repeats an earlier tile is drawn again (up to 64 times), so at
// the lowest zooms, which have few tiles, the list may come out shorter
// than n.
func SampleTiles(seed uint64, n, minZ, maxZ int, anchors []orb.Point) []maptile.Tile {
	if n <= 0 || minZ < 0 || maxZ < minZ || maxZ > 22 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	seen := make(map[maptile.Tile]bool, n)
	out := make([]maptile.Tile, 0, n)
	for i := 0; i < n; i++ {
		for try := 0; try < 64; try++ {
			z := maptile.Zoom(minZ + rng.IntN(maxZ-minZ+1)) //nolint:gosec // G115: z is within the caller's minZ..maxZ zooms
			var t maptile.Tile
			if i%2 == 0 && len(anchors) > 0 {
				p := anchors[rng.IntN(len(anchors))]
				t = maptile.At(orb.Point{p[0], clampLat(p[1])}, z)
			} else {
				side := 1 << z
				t = maptile.New(uint32(rng.IntN(side)), uint32(rng.IntN(side)), z) //nolint:gosec // G115: a tile index below 2^z
			}
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
				break
			}
		}
	}
	return out
}

func clampLat(lat float64) float64 {
	return math.Max(-maxMercatorLat+1e-9, math.Min(maxMercatorLat-1e-9, lat))
}

// DenseTiles returns the n tiles of zoom z that hold the most of the
// points (EPSG:3857 metres), densest first, ties in x then y order.
// Points outside the square Mercator world are ignored.
func DenseTiles(points []orb.Point, z maptile.Zoom, n int) []maptile.Tile {
	const half = 20037508.342789244 // π × the WGS84 semi-major axis
	side := uint64(1) << z
	size := 2 * half / float64(side)
	counts := map[maptile.Tile]int{}
	for _, p := range points {
		x, y := math.Floor((p[0]+half)/size), math.Floor((half-p[1])/size)
		if !(x >= 0 && y >= 0 && x < float64(side) && y < float64(side)) {
			continue
		}
		counts[maptile.New(uint32(x), uint32(y), z)]++
	}
	out := make([]maptile.Tile, 0, len(counts))
	for t := range counts {
		out = append(out, t)
	}
	sortTiles(out, func(a, b maptile.Tile) bool { return counts[a] > counts[b] })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// sortTiles orders ts by before, then by zoom, x and y.
func sortTiles(ts []maptile.Tile, before func(a, b maptile.Tile) bool) {
	slices.SortFunc(ts, func(a, b maptile.Tile) int {
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return cmp.Or(cmp.Compare(a.Z, b.Z), cmp.Compare(a.X, b.X), cmp.Compare(a.Y, b.Y))
	})
}
