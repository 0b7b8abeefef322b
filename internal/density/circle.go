package density

import "math"

// circle is the area within a ground distance of a centre, on a sphere of
// the Earth's mean radius, seen in normalised Web Mercator space. Its rows
// are cut into chords: at latitude φ it spans the longitudes λ0 ± Δλ(φ),
// where cos d = sin φ0 sin φ + cos φ0 cos φ cos Δλ (d: the angular radius).
type circle struct {
	cx               float64 // normalised x of the centre
	latMin, latMax   float64 // latitude range, radians (a pole included when the circle covers it)
	y0, y1           float64 // the same, normalised (clamped to the square world)
	sinLat0, cosLat0 float64
	cosD             float64
	d                float64 // angular radius, radians
	polar            bool    // the centre is a pole: every parallel is all in or all out
	north            bool    // the centre is in the northern hemisphere
	edgeStep         float64 // see edgeRange
}

// newCircle describes the circle of radius metres around lon/lat (degrees),
// in a model whose finest step is edgeStep; ok is false for a negative or
// non-finite radius or centre.
func newCircle(lon, lat, radius, edgeStep float64) (c circle, ok bool) {
	if !(radius >= 0) || math.IsInf(radius, 0) || !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180) {
		return circle{}, false
	}
	d := radius / groundR
	phi := lat * degree
	c = circle{cx: normLon(lon), d: d, cosD: math.Cos(d), north: lat > 0, edgeStep: edgeStep}
	c.sinLat0, c.cosLat0 = math.Sin(phi), math.Cos(phi)
	c.polar = c.cosLat0 < 1e-12
	c.latMin, c.latMax = max(phi-d, -math.Pi/2), min(phi+d, math.Pi/2)
	c.y0, c.y1 = normLat(c.latMin/degree), normLat(c.latMax/degree)
	return c, true
}

// halfWidth is the chord's half width (normalised x) at latitude phi
// (radians); 0.5 or more means every longitude.
func (c *circle) halfWidth(phi float64) float64 {
	if c.d >= math.Pi {
		return 0.5
	}
	if c.polar {
		dist := math.Pi/2 - phi // from the north pole
		if !c.north {
			dist = math.Pi/2 + phi
		}
		if dist <= c.d {
			return 0.5
		}
		return 0
	}
	arg := (c.cosD - c.sinLat0*math.Sin(phi)) / (c.cosLat0 * math.Cos(phi))
	switch {
	case arg >= 1:
		return 0
	case arg <= -1:
		return 0.5
	}
	return math.Acos(arg) / twoPi
}

// add adds the features of g whose box centre lies in the circle widened by
// their half extent: one chord per row of g, taken at the middle latitude of
// the row's part of the circle, split at the antimeridian. The edge rows
// reach the poles (the model clamps features beyond ±85.0511° onto them,
// keeping their longitude): there the chord is the widest over the row's
// part of the circle.
func (c *circle) add(g *grid, acc *sum) {
	if len(g.keys) == 0 {
		return
	}
	j0, j1 := g.rows(c.y0, c.y1)
	at := -1
	bandLo := rowLat(g, j0)
	for j := j0; j <= j1; j++ {
		bandHi := rowLat(g, j+1)
		lo, hi := max(bandLo, c.latMin), min(bandHi, c.latMax)
		if lo > hi { // a row beyond the circle, within reach of the half extents
			if bandHi < c.latMin {
				lo, hi = c.latMin, c.latMin
			} else {
				lo, hi = c.latMax, c.latMax
			}
		}
		bandLo = bandHi
		var hw float64
		if j == 0 || j == g.size-1 {
			hw = c.widest(lo, hi)
		} else {
			hw = c.halfWidth((lo + hi) / 2)
		}
		ya, yb := edgeRange(normLat(lo/degree), normLat(hi/degree), c.edgeStep)
		// Parts in ascending columns, so that each call seeks on from the last.
		switch x0, x1 := c.cx-hw, c.cx+hw; {
		case hw >= 0.5:
			at = g.addRow(j, 0, 1, ya, yb, at, acc)
		case x0 < 0:
			at = g.addRow(j, 0, x1, ya, yb, at, acc)
			at = g.addRow(j, x0+1, 1, ya, yb, at, acc)
		case x1 > 1:
			at = g.addRow(j, 0, x1-1, ya, yb, at, acc)
			at = g.addRow(j, x0, 1, ya, yb, at, acc)
		default:
			at = g.addRow(j, x0, x1, ya, yb, at, acc)
		}
	}
}

// widest is the largest half width over latitudes [lo, hi] (radians): the
// half width grows from the circle's top and bottom to its widest parallel,
// asin(sin φ0 / cos d) — or, when the circle covers a pole, up to the pole.
func (c *circle) widest(lo, hi float64) float64 {
	hw := max(c.halfWidth(lo), c.halfWidth(hi))
	if s := c.sinLat0 / c.cosD; c.cosD > 0 && s > -1 && s < 1 {
		hw = max(hw, c.halfWidth(min(max(math.Asin(s), lo), hi)))
	}
	return hw
}

// rowLat is the latitude (radians) of the bottom edge of row j of g; the
// bottom row starts at the south pole and the row past the top at the north
// pole.
func rowLat(g *grid, j int) float64 {
	switch {
	case j <= 0:
		return -math.Pi / 2
	case j >= g.size:
		return math.Pi / 2
	}
	return latOf(float64(j)*g.w) * degree
}
