package tiles

import (
	"slices"
	"testing"
)

// TileJSON's bounds hold the data's extent: rounded to the microdegree
// outward, never in (a client asks for no tile outside them), and a value
// already on a microdegree is kept.
func TestClampBoundsRoundsOutward(t *testing.T) {
	for _, tt := range []struct{ in, want [4]float64 }{
		{[4]float64{-152.2045774, -39.2791836, 179.6838436, 70.6750284}, [4]float64{-152.204578, -39.279184, 179.683844, 70.675029}},
		{[4]float64{-10, 40, 20, 60}, [4]float64{-10, 40, 20, 60}},
		{[4]float64{13.4, 52.3, 13.7, 52.6}, [4]float64{13.4, 52.3, 13.7, 52.6}},
		{[4]float64{-0.0000004, -0.0000004, 0.0000004, 0.0000004}, [4]float64{-0.000001, -0.000001, 0.000001, 0.000001}},
		// Beyond Web Mercator's square: clamped to it.
		{[4]float64{-200, -89, 200, 89}, WorldBounds()},
	} {
		got := clampBounds(tt.in)
		if !slices.Equal(got[:], tt.want[:]) {
			t.Errorf("clampBounds(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if got[0] > tt.in[0] || got[1] > tt.in[1] || got[2] < tt.in[2] || got[3] < tt.in[3] {
			if tt.want != WorldBounds() {
				t.Errorf("clampBounds(%v) = %v does not hold the extent", tt.in, got)
			}
		}
	}
}
