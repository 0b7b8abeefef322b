package calibrate

import (
	"math"
	"math/rand/v2"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/loadtest"
)

// TileSample draws, for every zoom of minZ..maxZ, perZoom distinct tiles:
// half under anchors (where the layer has data), half anywhere in the
// zoom. Zooms with fewer tiles than perZoom give all they have.
func TileSample(seed uint64, perZoom, minZ, maxZ int, anchors []orb.Point) []maptile.Tile {
	var out []maptile.Tile
	for z := minZ; z <= maxZ; z++ {
		out = append(out, loadtest.SampleTiles(seed+uint64(z), perZoom, z, z, anchors)...) //nolint:gosec // G115: z is a zoom, 0..tiles.MaxZoom
	}
	return out
}

// anywhere is a position uniform on the square Web Mercator world: what a
// map pans over.
func anywhere(rng *rand.Rand) orb.Point {
	y := (rng.Float64()*2 - 1) * math.Pi
	return orb.Point{rng.Float64()*360 - 180, math.Atan(math.Sinh(y)) * 180 / math.Pi}
}

// place is an anchor for even i (when there are any), else anywhere.
func place(rng *rand.Rand, i int, anchors []orb.Point) orb.Point {
	if i%2 == 0 && len(anchors) > 0 {
		return anchors[rng.IntN(len(anchors))]
	}
	return anywhere(rng)
}

// logUniform is a value whose logarithm is uniform in [log lo, log hi].
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
}

// GeofenceSample draws n requests of each kind a geofence layer serves —
// within (radii log-uniform from 10 m to the largest allowed, limits from
// 1 to the largest) and bbox (boxes of log-uniform area up to the largest
// allowed) — half at anchors of the layer, half anywhere.
func GeofenceSample(seed uint64, n int, layer string, lim geofence.Limits, anchors []orb.Point) []geofence.Demand {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	var out []geofence.Demand
	for i := range n {
		at := place(rng, i, anchors)
		limit := int(math.Round(logUniform(rng, 1, float64(max(lim.MaxLimit, 1)))))
		out = append(out, geofence.Demand{Kind: geofence.KindWithin, Layer: layer,
			RadiusM: logUniform(rng, 10, max(lim.MaxRadius, 10)), Limit: limit, Points: 1, At: []orb.Point{at}})
	}
	for i := range n {
		at := place(rng, i, anchors)
		area := logUniform(rng, 1e-6, max(lim.MaxBBoxArea, 1e-6))
		w := math.Sqrt(area) * logUniform(rng, 0.5, 2)
		h := area / w
		b := orb.Bound{Min: orb.Point{at[0] - w/2, math.Max(at[1]-h/2, -90)}, Max: orb.Point{at[0] + w/2, math.Min(at[1]+h/2, 90)}}
		if b.Min[0] < -180 { // unwrapped, as the handler passes a box across the antimeridian
			b.Min[0], b.Max[0] = b.Min[0]+360, b.Max[0]+360
		}
		limit := int(math.Round(logUniform(rng, 1, float64(max(lim.MaxLimit, 1)))))
		out = append(out, geofence.Demand{Kind: geofence.KindBBox, Layer: layer, Bound: b, Limit: limit, Points: 1})
	}
	return out
}

// FenceSample draws n contains requests and n batch checks (of log-uniform
// size up to the largest batch), their points half at anchors of the
// fences, half anywhere. Each demand is the one serve's handler prices for
// that request (geofence.Handler.Contains and Check on the fences), so the
// density model estimates it as it does in serve: a check tests the
// fences' pieces (PieceVertices geofence.FencePieceVertices), and is
// estimated at no more than two pieces' vertices per fence found, while
// contains, which renders the fences it finds whole, is estimated at their
// whole vertices (PieceVertices 0).
func FenceSample(seed uint64, n int, lim geofence.Limits, anchors []orb.Point) []geofence.Demand {
	return containmentSample(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), n, lim, anchors, "", 0, geofence.FencePieceVertices)
}

// ContainmentSample draws what FenceSample draws, on the polygon layer ct
// (?layer=): both kinds test what serve reads for it — its pieces
// (PieceVertices, as the handler prices them) or its whole polygons.
func ContainmentSample(seed uint64, n int, lim geofence.Limits, ct *geofence.Containment, anchors []orb.Point) []geofence.Demand {
	rng := rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc908))
	return containmentSample(rng, n, lim, anchors, ct.Layer.Name, ct.PieceVertices, ct.PieceVertices)
}

func containmentSample(rng *rand.Rand, n int, lim geofence.Limits, anchors []orb.Point, layer string, containsPieces, checkPieces int) []geofence.Demand {
	var out []geofence.Demand
	for i := range n {
		out = append(out, geofence.Demand{Kind: geofence.KindContains, Layer: layer, Limit: lim.DefaultLimit, Points: 1,
			At: []orb.Point{place(rng, i, anchors)}, PieceVertices: containsPieces})
	}
	for range n {
		size := int(math.Round(logUniform(rng, 1, float64(max(lim.MaxBatch, 1)))))
		at := make([]orb.Point, size)
		for j := range at {
			at[j] = place(rng, j, anchors)
		}
		out = append(out, geofence.Demand{Kind: geofence.KindCheck, Layer: layer, Points: size, At: at, PieceVertices: checkPieces})
	}
	return out
}
