package density

import (
	"math"
	"testing"

	"github.com/paulmach/orb"
)

func TestNormLatRoundTrip(t *testing.T) {
	for lat := -85.0; lat <= 85; lat += 0.5 {
		if got := latOf(normLat(lat)); math.Abs(got-lat) > 1e-9 {
			t.Fatalf("latOf(normLat(%g)) = %g", lat, got)
		}
	}
	for _, tc := range []struct{ lat, want float64 }{{90, 1}, {85.1, 1}, {-89, 0}, {0, 0.5}} {
		if got := normLat(tc.lat); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("normLat(%g) = %g, want %g", tc.lat, got, tc.want)
		}
	}
	// EPSG:3857 y and latitude agree.
	for _, y := range []float64{-halfWorld, -1e7, 0, 12345.6, 1e7, halfWorld} {
		lat := math.Atan(math.Sinh(y/earthRadius)) / degree
		if got, want := normLat(lat), normX3857(y); math.Abs(got-want) > 1e-12 {
			t.Errorf("normLat(%g) = %g, want %g", lat, got, want)
		}
	}
}

// The lon/lat box the tile query reads for an EPSG:3857 rectangle on an
// EPSG:4326 column — Box2D(ST_Transform(the rectangle, its x range cut at
// ±π·R, 4326)), as PostGIS 3.3 (PROJ 9.1) printed it — is what rect3857
// reads once clamped to the world: an overhang past ±180° is not read on
// the other side.
func TestRect3857CutsAtTheWorldsEdges(t *testing.T) {
	for _, tc := range []struct {
		name             string
		b                orb.Bound
		west, east       float64 // Box2D's x range, as PostGIS printed it
		wantSouth, north float64
	}{
		{"z0 tile with a 64/4096 buffer",
			orb.Bound{Min: orb.Point{-halfWorld - 313086, -halfWorld - 313086}, Max: orb.Point{halfWorld + 313086, halfWorld + 313086}},
			-180, 180, -85.28791607116231, 85.28791607116231},
		{"over the antimeridian eastwards",
			orb.Bound{Min: orb.Point{19e6, 0}, Max: orb.Point{21e6, 1e6}},
			170.67990398270908, 180, 0, 8.946573850543423},
		{"over the antimeridian westwards",
			orb.Bound{Min: orb.Point{-25e6, 0}, Max: orb.Point{-19e6, 1e6}},
			-180, -170.67990398270908, 0, 8.946573850543423},
		{"inside",
			orb.Bound{Min: orb.Point{1e6, 2e6}, Max: orb.Point{3e6, 4e6}},
			8.983152841195214, 26.94945852358564, 17.678914238335743, 33.78523007002313},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := rect3857(tc.b).clamp01()
			if !ok {
				t.Fatalf("%+v: outside the world", tc.b)
			}
			if west, east := r.x0*360-180, r.x1*360-180; math.Abs(west-tc.west) > 1e-9 || math.Abs(east-tc.east) > 1e-9 {
				t.Errorf("x range %.12f..%.12f, want %.12f..%.12f", west, east, tc.west, tc.east)
			}
			// Normalised y is latitude's, clamped to the square world.
			if s, n := normLat(tc.wantSouth), normLat(tc.north); math.Abs(s-r.y0) > 1e-12 || math.Abs(n-r.y1) > 1e-12 {
				t.Errorf("y range %.12f..%.12f, want %.12f..%.12f", r.y0, r.y1, s, n)
			}
		})
	}
}

func TestClamp01(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		in   rect
		want rect
		ok   bool
	}{
		{"inside", rect{0.1, 0.2, 0.3, 0.4}, rect{0.1, 0.2, 0.3, 0.4}, true},
		{"overhanging", rect{-0.1, 0.5, 1.2, 1.5}, rect{0, 0.5, 1, 1}, true},
		{"wholly outside", rect{1.1, 0, 1.2, 1}, rect{}, false},
		{"wholly below", rect{0, -0.3, 1, -0.1}, rect{}, false},
		{"inverted", rect{0.3, 0, 0.2, 1}, rect{}, false},
		{"not a number", rect{nan, 0, 1, 1}, rect{}, false},
		{"a point on the edge", rect{1, 1, 1, 1}, rect{1, 1, 1, 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.in.clamp01()
			if ok != tc.ok || got != tc.want {
				t.Errorf("clamp01(%+v) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestEdgeRange(t *testing.T) {
	const step = 1e-9
	for _, tc := range []struct{ lo, hi, wantLo, wantHi float64 }{
		{0.2, 0.4, 0.2, 0.4},
		{0, 0.4, -1, 0.4},
		{0.2, 1, 0.2, 2},
		{1, 1, 1 - step, 2},
		{0, 0, -1, step},
	} {
		if lo, hi := edgeRange(tc.lo, tc.hi, step); lo != tc.wantLo || hi != tc.wantHi {
			t.Errorf("edgeRange(%g, %g) = %g, %g; want %g, %g", tc.lo, tc.hi, lo, hi, tc.wantLo, tc.wantHi)
		}
	}
}

func TestLevelFor(t *testing.T) {
	m := &Model{level: 16}
	for _, tc := range []struct {
		h    float64
		want int
	}{
		{0, 16}, {1, 3}, {1.0 / 64 * 1.03125, 8}, {math.Ldexp(1, -16), 16}, {math.Ldexp(1, -12), 15}, {4, 1}, {16, 0}, {math.Inf(1), 0},
	} {
		if got := m.levelFor(tc.h); got != tc.want {
			t.Errorf("levelFor(%g) = %d, want %d", tc.h, got, tc.want)
		}
	}
}
