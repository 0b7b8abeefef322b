package tiles

import (
	"math"
	"strings"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
)

// MaxZoom is the deepest zoom geotoll serves; PostGIS's ST_TileEnvelope and
// every common client stop well before orb's uint32 limit.
const MaxZoom maptile.Zoom = 22

// worldHalf is half the width of the EPSG:3857 world square in metres
// (π × the WGS84 semi-major axis, the same constant PostGIS uses).
const worldHalf = math.Pi * orb.EarthRadius

// ParseTile parses the z, x and y path segments of a tile address. Each must
// be a plain decimal number (no sign, no spaces, no leading zero, at most
// 10 digits): one address for each tile. A malformed segment is a 400
// naming it; a zoom above MaxZoom or x/y outside 0 … 2^z−1 is a 422.
func ParseTile(zs, xs, ys string) (maptile.Tile, error) {
	z, err := parseUint("z", zs)
	if err != nil {
		return maptile.Tile{}, err
	}
	x, err := parseUint("x", xs)
	if err != nil {
		return maptile.Tile{}, err
	}
	y, err := parseUint("y", ys)
	if err != nil {
		return maptile.Tile{}, err
	}
	if z > uint64(MaxZoom) {
		return maptile.Tile{}, problem.Range("z", "zoom %d is above the maximum %d", z, MaxZoom)
	}
	n := uint64(1) << z
	if x >= n {
		return maptile.Tile{}, problem.Range("x", "x %d is outside 0..%d at zoom %d", x, n-1, z)
	}
	if y >= n {
		return maptile.Tile{}, problem.Range("y", "y %d is outside 0..%d at zoom %d", y, n-1, z)
	}
	t := maptile.New(uint32(x), uint32(y), maptile.Zoom(z)) //nolint:gosec // G115: x and y are below 2^z and z <= MaxZoom, checked above
	if !t.Valid() {                                         // unreachable after the checks above; orb has the last word
		return maptile.Tile{}, problem.Range("x", "tile %d/%d/%d is not valid", z, x, y)
	}
	return t, nil
}

// SplitFormat splits "123.mvt" into "123" and "mvt". Only .mvt and .pbf are
// served; anything else is a 404 for the "format" parameter.
func SplitFormat(seg string) (string, error) {
	dot := strings.LastIndexByte(seg, '.')
	if dot < 0 {
		return "", problem.Missing("format", "tile path must end in .mvt or .pbf")
	}
	switch seg[dot+1:] {
	case "mvt", "pbf":
		return seg[:dot], nil
	}
	return "", problem.Missing("format", "format %q is not served; use .mvt or .pbf", truncate(seg[dot+1:], 16))
}

func parseUint(param, s string) (uint64, error) {
	if s == "" {
		return 0, problem.Malformed(param, "%s is empty", param)
	}
	if len(s) > 10 {
		return 0, problem.Malformed(param, "%s is not a tile coordinate (too long)", param)
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, problem.Malformed(param, "%s must be a non-negative integer, got %q", param, truncate(s, 16))
		}
		v = v*10 + uint64(c-'0')
	}
	if s[0] == '0' && len(s) > 1 {
		// One tile, one address: 01 and 1 would be two cache entries
		// (here and in every CDN) and two charges for the same bytes.
		return 0, problem.Malformed(param, "%s has a leading zero: the tile's address is %d", param, v)
	}
	return v, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Envelope returns the tile's bounds in EPSG:3857 metres.
//
// orb's maptile gives the tile; its web-mercator square is computed with the
// same arithmetic as PostGIS's ST_TileEnvelope (world square ±π·R, divided
// into 2^z steps) rather than by projecting t.Bound()'s lon/lat corners:
// the lon/lat round trip through atan(sinh) and log(tan) loses precision near
// the poles, while this form agrees with ST_TileEnvelope to the last bit
// (tested against PostGIS for z 0–22).
func Envelope(t maptile.Tile) orb.Bound {
	size := 2 * worldHalf / float64(uint64(1)<<t.Z)
	return orb.Bound{
		Min: orb.Point{-worldHalf + size*float64(t.X), worldHalf - size*float64(t.Y+1)},
		Max: orb.Point{-worldHalf + size*float64(t.X+1), worldHalf - size*float64(t.Y)},
	}
}
