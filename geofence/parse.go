package geofence

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/problem"
)

// maxNumberLen bounds the text of one number. Seventeen significant digits
// identify any float64; 32 bytes leave room for sign, point and exponent,
// and keep a hostile parameter from costing more than a few comparisons.
const maxNumberLen = 32

// isNumber reports whether s is a number in JSON's grammar (RFC 8259 §6):
//
//	-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
//
// This is the one numeric grammar of the API, for query parameters and
// request bodies alike. It is strconv.ParseFloat minus everything that is
// not a plain decimal: no NaN or Inf, no hex floats (0x1p3), no leading '+',
// no leading zeros, no underscores, no bare '.5' or '5.', no spaces. The
// exponent is allowed because common serialisers emit it for small values
// (JavaScript writes 1e-7 for 0.0000001).
func isNumber(s string) bool {
	i, n := 0, len(s)
	if i < n && s[i] == '-' {
		i++
	}
	switch {
	case i < n && s[i] == '0':
		i++
	case i < n && s[i] >= '1' && s[i] <= '9':
		for i < n && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < n && s[i] == '.' {
		i++
		if i == n || !isDigit(s[i]) {
			return false
		}
		for i < n && isDigit(s[i]) {
			i++
		}
	}
	if i < n && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < n && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i == n || !isDigit(s[i]) {
			return false
		}
		for i < n && isDigit(s[i]) {
			i++
		}
	}
	return i == n
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseNumber parses s as a finite float64 in the grammar of isNumber.
// Malformed text is a 400 naming param, with example (a value param
// takes) to show the grammar. A well-formed number too large for a
// float64 (1e999) is a 422: it is a number, just out of every range.
func parseNumber(param, s, example string) (float64, error) {
	switch {
	case s == "":
		return 0, problem.Malformed(param, "%s is empty; expected a decimal number", param)
	case len(s) > maxNumberLen:
		return 0, problem.Malformed(param, "%s is longer than %d characters", param, maxNumberLen)
	case !isNumber(s):
		return 0, problem.Malformed(param, "%s must be a decimal number such as %s, got %q", param, example, s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if math.IsInf(v, 0) {
		return 0, problem.Range(param, "%s %s is out of range", param, s)
	}
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		// Unreachable: isNumber admits only what ParseFloat accepts.
		return 0, problem.Malformed(param, "%s must be a decimal number, got %q", param, s)
	}
	return v, nil
}

// ParseLng parses a longitude in degrees, which must lie in [-180, 180].
func ParseLng(param, s string) (float64, error) {
	v, err := parseNumber(param, s, "-12.5")
	if err != nil {
		return 0, err
	}
	if v < -180 || v > 180 {
		return 0, problem.Range(param, "%s %s must be within [-180, 180]", param, s)
	}
	return v, nil
}

// ParseLat parses a latitude in degrees, which must lie in [-90, 90].
func ParseLat(param, s string) (float64, error) {
	v, err := parseNumber(param, s, "-12.5")
	if err != nil {
		return 0, err
	}
	if v < -90 || v > 90 {
		return 0, problem.Range(param, "%s %s must be within [-90, 90]", param, s)
	}
	return v, nil
}

// ParseRadius parses a radius in metres on the ground, which must lie in
// [0, maxRadius].
func ParseRadius(s string, maxRadius float64) (float64, error) {
	v, err := parseNumber("radius", s, "250")
	if err != nil {
		return 0, err
	}
	if v < 0 || v > maxRadius {
		return 0, problem.Range("radius", "radius %s must be within [0, %g] metres", s, maxRadius)
	}
	return v, nil
}

// ParseLimit parses a feature limit: an empty s means def; otherwise digits
// only (no sign, no leading zeros) and a value in [1, maxLimit]. Digits of
// any length are a well-formed count: past maxLimit (or past int) they are
// out of range, a 422, not malformed.
func ParseLimit(s string, def, maxLimit int) (int, error) {
	if s == "" {
		return def, nil
	}
	if !isCount(s) {
		return 0, problem.Malformed("limit", "limit must be a positive integer, got %q", truncate(s, 32))
	}
	v, err := strconv.Atoi(s) // only ErrRange is possible now
	if err != nil || v < 1 || v > maxLimit {
		return 0, problem.Range("limit", "limit %s must be within [1, %d]", truncate(s, 32), maxLimit)
	}
	return v, nil
}

// isCount reports whether s is a non-negative integer without sign or
// leading zeros.
func isCount(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// BBox is a validated lon/lat box.
type BBox struct {
	// West, South, East, North in degrees, as given. West > East means the
	// box crosses the antimeridian.
	West, South, East, North float64
}

// CrossesAntimeridian reports whether the box wraps past 180°.
func (b BBox) CrossesAntimeridian() bool { return b.West > b.East }

// Parts returns the box as one or two bounds within [-180, 180]: a box that
// crosses the antimeridian is split at it into [West, 180] and [-180, East].
func (b BBox) Parts() []orb.Bound {
	if !b.CrossesAntimeridian() {
		return []orb.Bound{{Min: orb.Point{b.West, b.South}, Max: orb.Point{b.East, b.North}}}
	}
	return []orb.Bound{
		{Min: orb.Point{b.West, b.South}, Max: orb.Point{180, b.North}},
		{Min: orb.Point{-180, b.South}, Max: orb.Point{b.East, b.North}},
	}
}

// Unwrapped returns the box as one bound whose east edge may exceed 180
// (East + 360 when the box crosses the antimeridian). Its area is the total
// area of Parts, which is what pricing needs.
func (b BBox) Unwrapped() orb.Bound {
	east := b.East
	if b.CrossesAntimeridian() {
		east += 360
	}
	return orb.Bound{Min: orb.Point{b.West, b.South}, Max: orb.Point{east, b.North}}
}

// Area is the box's area in square degrees (the sum of its parts).
func (b BBox) Area() float64 {
	u := b.Unwrapped()
	return (u.Max[0] - u.Min[0]) * (u.Max[1] - u.Min[1])
}

// ParseBBox parses "minx,miny,maxx,maxy" (west, south, east, north in
// degrees). Each number follows the grammar of parseNumber; longitudes must
// lie in [-180, 180], latitudes in [-90, 90], south <= north, and the area
// must not exceed maxArea square degrees. minx > maxx is a box that crosses
// the antimeridian (170,-10,-170,10 spans 20° of longitude), not an error.
func ParseBBox(s string, maxArea float64) (BBox, error) {
	const param = "bbox"
	if s == "" {
		return BBox{}, problem.Malformed(param, "bbox is empty; expected minx,miny,maxx,maxy")
	}
	if len(s) > 4*maxNumberLen+3 {
		return BBox{}, problem.Malformed(param, "bbox is longer than %d characters", 4*maxNumberLen+3)
	}
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return BBox{}, problem.Malformed(param, "bbox must be four numbers minx,miny,maxx,maxy, got %d", len(parts))
	}
	var v [4]float64
	for i, p := range parts {
		f, err := parseNumber(param, p, "-12.5")
		if err != nil {
			var pe *problem.Error
			if errors.As(err, &pe) {
				pe.Detail = "bbox " + [4]string{"minx", "miny", "maxx", "maxy"}[i] + ": " + pe.Detail
			}
			return BBox{}, err
		}
		v[i] = f
	}
	b := BBox{West: v[0], South: v[1], East: v[2], North: v[3]}
	switch {
	case b.West < -180 || b.West > 180 || b.East < -180 || b.East > 180:
		return BBox{}, problem.Range(param, "bbox longitudes must be within [-180, 180]")
	case b.South < -90 || b.South > 90 || b.North < -90 || b.North > 90:
		return BBox{}, problem.Range(param, "bbox latitudes must be within [-90, 90]")
	case b.South > b.North:
		return BBox{}, problem.Range(param, "bbox miny %g is north of maxy %g", b.South, b.North)
	}
	if a := b.Area(); a > maxArea {
		return BBox{}, problem.Range(param, "bbox covers %.4g square degrees; at most %g are allowed", a, maxArea)
	}
	return b, nil
}

// ParseFenceID parses a fence id: a positive decimal integer without sign
// or leading zeros. Fence ids are bigints: 0, or digits past int64, name
// no fence (404); they are well formed.
func ParseFenceID(s string) (int64, error) {
	if !isCount(s) {
		return 0, problem.Malformed("id", "fence id must be a positive integer, got %q", truncate(s, 32))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return 0, problem.Missing("id", "no fence %s", truncate(s, 32))
	}
	return v, nil
}

// truncate shortens s for an error message. Bytes that are not UTF-8 — a
// rune the cut split, or any the client sent — show as U+FFFD, never
// dropped: "zo\xffnes" must not read as the layer "zones".
func truncate(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(s[:n], "\uFFFD") + "…"
}
