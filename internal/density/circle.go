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
	boxHW            float64 // the widest chord's half width, once computed (boxDone)
	boxDone          bool
}

// newCircle describes the circle of radius metres around lon/lat (degrees);
// ok is false for a negative or non-finite radius or centre.
func newCircle(lon, lat, radius float64) (c circle, ok bool) {
	if !(radius >= 0) || math.IsInf(radius, 0) || !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180) {
		return circle{}, false
	}
	d := radius / groundR
	phi := lat * degree
	c = circle{cx: normLon(lon), d: d, cosD: math.Cos(d), north: lat > 0}
	c.sinLat0, c.cosLat0 = math.Sin(phi), math.Cos(phi)
	c.polar = c.cosLat0 < 1e-12
	c.latMin, c.latMax = max(phi-d, -math.Pi/2), min(phi+d, math.Pi/2)
	c.y0, c.y1 = normSin(math.Sin(c.latMin)), normSin(math.Sin(c.latMax))
	return c, true
}

// sinMaxLat is the sine of the square world's edge latitude: tanh π.
const sinMaxLat = 0.99627207622074994

// normSin is normLat of the latitude whose sine is s: 1/2 + atanh(s)/2π,
// clamped to [0, 1] (one log instead of a tan and an asinh).
func normSin(s float64) float64 {
	switch {
	case s >= sinMaxLat:
		return 1
	case s <= -sinMaxLat:
		return 0
	}
	return min(max(0.5+math.Log((1+s)/(1-s))/(4*math.Pi), 0), 1)
}

// halfWidth is the chord's half width (normalised x) at latitude phi
// (radians); 0.5 or more means every longitude.
func (c *circle) halfWidth(phi float64) float64 { return c.chord(math.Sin(phi), math.Cos(phi)) }

// halfWidthAt is halfWidth at normalised y: sin φ = tanh u and cos φ =
// 1/cosh u for u = 2π(y - 1/2), from one exp.
func (c *circle) halfWidthAt(y float64) float64 { return c.chordE(math.Exp(twoPi * (y - 0.5))) }

// chordE is the half width at the latitude where exp(2π(y - 1/2)) is e.
func (c *circle) chordE(e float64) float64 {
	sum := e + 1/e
	return c.chord((e-1/e)/sum, 2/sum)
}

// chord is the half width at the latitude of sine sinPhi and cosine cosPhi.
func (c *circle) chord(sinPhi, cosPhi float64) float64 {
	if c.d >= math.Pi {
		return 0.5
	}
	if c.polar { // every point of a parallel is as far from the pole
		if (c.north && sinPhi >= c.cosD) || (!c.north && -sinPhi >= c.cosD) {
			return 0.5
		}
		return 0
	}
	arg := (c.cosD - c.sinLat0*sinPhi) / (c.cosLat0 * cosPhi)
	switch {
	case arg >= 1:
		return 0
	case arg <= -1:
		return 0.5
	}
	return acos(arg) / twoPi
}

// acos is arccos on [-1, 1] within 2.2e-8 radians (Abramowitz and Stegun
// 4.4.46), several times faster than math.Acos: a chord's end moves by at
// most 2.2e-8/2π of the world's width, 14 cm.
func acos(x float64) float64 {
	neg := x < 0
	x = math.Abs(x)
	p := 1.5707963050 + x*(-0.2145988016+x*(0.0889789874+x*(-0.0501743046+
		x*(0.0308918810+x*(-0.0170881256+x*(0.0066700901+x*-0.0012624911))))))
	r := math.Sqrt(1-x) * p
	if neg {
		return math.Pi - r
	}
	return r
}

// add adds the features of g whose box centre lies in the circle widened by
// their half extent: one chord per row of g, taken at the middle of the
// row's part of the circle, split at the antimeridian. An edge row that the
// circle reaches beyond the square world (±85.0511°) holds the features the
// model clamps onto the edge, keeping their longitude: there the chord is
// the widest over the row's latitudes up to the circle's extreme.
//
// With big, a grid of features at least a quarter of a cell wide, a circle
// no taller than a cell is read as its bounding box: next to the features'
// own extent its rounded corners are a small share of the area that reaches
// them (under 10%), and it saves a chord per row.
func (c *circle) add(g *grid, big bool, acc *sum) {
	if len(g.keys) == 0 {
		return
	}
	j0, j1 := g.rows(c.y0, c.y1)
	at := -1
	// exp(2π(y - 1/2)) at the middle of row j0, then row by row: the chord
	// of a row wholly inside the circle's range costs no exp.
	e, step := math.Exp(twoPi*((float64(j0)+0.5)*g.w-0.5)), math.Exp(twoPi*g.w)
	for j := j0; j <= j1; j, e = j+1, e*step {
		ya, yb := max(float64(j)*g.w, c.y0), min(float64(j+1)*g.w, c.y1)
		if ya > yb { // a row beyond the circle, within reach of the half extents
			if yb < c.y0 {
				ya, yb = c.y0, c.y0
			} else {
				ya, yb = c.y1, c.y1
			}
		}
		var hw float64
		switch {
		case big && c.y1-c.y0 <= g.w:
			hw = c.box()
		case j == g.size-1 && c.latMax > maxLat*degree:
			hw = c.widest(latOf(ya)*degree, c.latMax)
		case j == 0 && c.latMin < -maxLat*degree:
			hw = c.widest(c.latMin, latOf(yb)*degree)
		case ya == float64(j)*g.w && yb == float64(j+1)*g.w:
			hw = c.chordE(e)
		default:
			hw = c.halfWidthAt((ya + yb) / 2)
		}
		ya, yb = edgeRange(ya, yb, g.edgeStep())
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

// box is the half width of the circle's bounding box: its widest chord.
func (c *circle) box() float64 {
	if !c.boxDone {
		c.boxHW, c.boxDone = c.widest(c.latMin, c.latMax), true
	}
	return c.boxHW
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
