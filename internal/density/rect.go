package density

import "math"

// Web Mercator (EPSG:3857) and ground constants.
const (
	earthRadius = 6378137.0             // EPSG:3857 sphere, metres
	halfWorld   = math.Pi * earthRadius // 20037508.342789244 m: the world's half width
	worldWidth  = 2 * halfWorld         // metres
	maxLat      = 85.05112877980659     // latitude of the square world's edge
	groundR     = 6371008.8             // mean Earth radius for ground distances, metres
	degree      = math.Pi / 180         // radians per degree
	twoPi       = 2 * math.Pi
)

// rect is an axis-aligned rectangle in normalised Web Mercator space: x runs
// from 0 at 180°W to 1 at 180°E, y from 0 at 85.0511°S to 1 at 85.0511°N.
// Every position of the world, and every grid level, lives in [0, 1]².
type rect struct{ x0, y0, x1, y1 float64 }

// normX3857 maps an EPSG:3857 x (metres) to normalised x, unclamped.
func normX3857(x float64) float64 { return (x + halfWorld) / worldWidth }

// normLon maps a longitude (degrees) to normalised x, unclamped.
func normLon(lon float64) float64 { return (lon + 180) / 360 }

// normLat maps a latitude (degrees) to normalised y; latitudes beyond the
// square world's edge (±85.0511°) clamp to it.
func normLat(lat float64) float64 {
	switch {
	case lat >= maxLat:
		return 1
	case lat <= -maxLat:
		return 0
	}
	return min(max(0.5+math.Asinh(math.Tan(lat*degree))/twoPi, 0), 1)
}

// latOf is the latitude (degrees) of normalised y, the inverse of normLat.
func latOf(y float64) float64 { return math.Atan(math.Sinh((y-0.5)*twoPi)) / degree }

// clamp01 clamps r into the world; ok is false when r lies wholly outside it
// (or is not a number).
func (r rect) clamp01() (rect, bool) {
	if !(r.x1 >= 0 && r.x0 <= 1 && r.y1 >= 0 && r.y0 <= 1 && r.x0 <= r.x1 && r.y0 <= r.y1) {
		return rect{}, false
	}
	return rect{math.Max(r.x0, 0), math.Max(r.y0, 0), math.Min(r.x1, 1), math.Min(r.y1, 1)}, true
}

// edgeRange widens a normalised range, already clamped to [0, 1], so that it
// reads the features the model clamps onto the world's edges (those beyond
// ±85.0511°, or exactly at ±180°): an end at an edge opens past it (to -1 or
// 2: finite, so cell arithmetic stays exact), and a range wholly on an edge
// reads the last step before it — one step of the cells of the grid read
// (1/65535 of a cell, grid.edgeStep), where that grid's content boxes hold
// the clamped features, so that they count whole at every level.
func edgeRange(lo, hi, step float64) (float64, float64) {
	if lo >= 1 {
		lo = 1 - step
	}
	if hi <= 0 {
		hi = step
	}
	if lo <= 0 {
		lo = -1
	}
	if hi >= 1 {
		hi = 2
	}
	return lo, hi
}

// lonLatRect is the normalised rectangle of a lon/lat box that does not cross
// the antimeridian (west ≤ east), longitudes clamped into ±180°.
func lonLatRect(west, south, east, north float64) rect {
	return rect{
		x0: normLon(math.Max(-180, math.Min(180, west))),
		y0: normLat(south),
		x1: normLon(math.Max(-180, math.Min(180, east))),
		y1: normLat(north),
	}
}
