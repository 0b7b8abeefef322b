package density

import "math"

// circle is the area within a ground distance of a centre, on a sphere of
// the Earth's mean radius, seen in normalised Web Mercator space. Its rows
// are cut into chords: at latitude φ it spans the longitudes λ0 ± Δλ(φ),
// where cos d = sin φ0 sin φ + cos φ0 cos φ cos Δλ (d: the angular radius).
type circle struct {
	cx               float64 // normalised x of the centre
	y0, y1           float64 // normalised y range (clamped to the world)
	sinLat0, cosLat0 float64
	cosD             float64
	polar            bool // the centre is a pole: chords are all or nothing
	northPole        bool
	d                float64 // angular radius, radians
}

// newCircle describes the circle of radius metres around lon/lat (degrees);
// ok is false for a negative or non-finite radius or centre.
func newCircle(lon, lat, radius float64) (c circle, ok bool) {
	if !(radius >= 0) || math.IsInf(radius, 0) || !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180) {
		return circle{}, false
	}
	d := radius / groundR
	c = circle{cx: normLon(lon), d: d, cosD: math.Cos(d)}
	phi := lat * degree
	c.sinLat0, c.cosLat0 = math.Sin(phi), math.Cos(phi)
	c.polar = c.cosLat0 < 1e-12
	c.northPole = lat > 0
	c.y0 = normLat(math.Max(lat-d/degree, -90))
	c.y1 = normLat(math.Min(lat+d/degree, 90))
	return c, true
}

// halfWidth is the chord's half width (normalised x) at normalised y; 0.5 or
// more means every longitude.
func (c *circle) halfWidth(y float64) float64 {
	if c.d >= math.Pi {
		return 0.5
	}
	phi := latOf(y) * degree
	if c.polar {
		// Every point of the parallel is as far from the pole.
		dist := math.Pi/2 - phi
		if !c.northPole {
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
// their half extent: one chord per row of g, taken at the middle of the
// row's part of the circle and split at the antimeridian.
func (c *circle) add(g *grid, acc *sum) {
	if len(g.keys) == 0 {
		return
	}
	j0, j1 := g.rows(c.y0, c.y1)
	at := -1
	for j := j0; j <= j1; j++ {
		ya, yb := max(float64(j)*g.w, c.y0), min(float64(j+1)*g.w, c.y1)
		if ya > yb { // a row beyond the circle, within reach of the half extents
			if yb < c.y0 {
				ya, yb = c.y0, c.y0
			} else {
				ya, yb = c.y1, c.y1
			}
		}
		hw := c.halfWidth((ya + yb) / 2)
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
