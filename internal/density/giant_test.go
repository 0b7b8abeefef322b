package density

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
)

// A query much smaller than the huge heavy features whose box it meets
// reads each of them whole: a z13 tile inside Canada's box reads all of
// Canada. The model counts them exactly, even when they share cells with
// small features (whose averaged extent hid them from small queries).
func TestGiantsCountWholeInSmallQueries(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var fs []feature
	for i := 0; i < 40; i++ { // giants: boxes 1/64 to 1/2 of the world, 10^4..10^6 vertices
		x, y := rng.Float64()*0.5, rng.Float64()*0.5
		w, h := math.Pow(2, -1-5*rng.Float64()), math.Pow(2, -1-5*rng.Float64())
		fs = append(fs, feature{box: rect{x, y, x + w, y + h}, vertices: math.Round(math.Pow(10, 4+2*rng.Float64())), heavy: true})
	}
	giants := len(fs)
	for i := 0; i < 4000; i++ { // small features all over the same area
		x, y, s := rng.Float64()*0.9, rng.Float64()*0.9, 1e-5*rng.Float64()
		fs = append(fs, feature{box: rect{x, y, x + s, y + s}, vertices: 10, heavy: i%7 == 0})
	}
	m := modelOf(t, Polygon, SRIDWebMercator, fs, Options{})
	if len(m.giants) != giants {
		t.Fatalf("model keeps %d giants, want %d", len(m.giants), giants)
	}
	for q := 0; q < 2000; q++ {
		side := math.Pow(2, -8-6*rng.Float64()) // z8..z14 tiles
		x, y := rng.Float64()*0.9, rng.Float64()*0.9
		r := rect{x, y, x + side, y + side}
		var acc sum
		m.addRect(r, &acc)
		gn, gv := bruteForce(fs[:giants], r)
		_, lv := bruteForce(fs[giants:], r)
		// The giants count exactly; the small features are estimated, never
		// more than all of them.
		if acc.v < gv-1e-6 || acc.v > gv+lv+10*4000 {
			t.Fatalf("query %+v: %.0f vertices estimated, giants alone hold %.0f (%.0f features)", r, acc.v, gv, gn)
		}
	}
}

// Past maxGiants, the smallest stay in the grids and the world still
// counts every feature.
func TestGiantsBeyondTheCapStayInTheGrids(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	var fs []feature
	var total float64
	for i := 0; i < maxGiants+100; i++ {
		x, y, s := rng.Float64()*0.5, rng.Float64()*0.5, math.Pow(2, -2-4*rng.Float64())
		fs = append(fs, feature{box: rect{x, y, x + s, y + s}, vertices: 1000 + float64(i), heavy: true})
		total += 1000 + float64(i)
	}
	m := modelOf(t, Polygon, SRIDWebMercator, fs, Options{})
	if len(m.giants) != maxGiants {
		t.Fatalf("model keeps %d giants, want the cap %d", len(m.giants), maxGiants)
	}
	var acc sum
	m.addRect(rect{0, 0, 1, 1}, &acc)
	if math.Abs(acc.n-float64(len(fs))) > 1e-6 || math.Abs(acc.v-total) > 1e-6 {
		t.Fatalf("world estimates %.3f features, %.3f vertices; want %d, %.0f", acc.n, acc.v, len(fs), total)
	}
}

// A box across the antimeridian is read as two boxes joined by OR: a giant
// that meets both halves, as a country spanning the whole world does, is
// read once.
func TestGiantAcrossTheAntimeridianCountsOnce(t *testing.T) {
	fs := []feature{{box: rect{0, 0.7, 1, 0.9}, vertices: 100000, heavy: true}} // every longitude
	m := modelOf(t, Polygon, SRIDWebMercator, fs, Options{})
	if len(m.giants) != 1 {
		t.Fatalf("%d giants", len(m.giants))
	}
	one := m.BBox(orb.Bound{Min: orb.Point{170, 60}, Max: orb.Point{175, 65}})
	across := m.BBox(orb.Bound{Min: orb.Point{170, 60}, Max: orb.Point{-170, 65}})
	if one.Features != 1 || across != one {
		t.Fatalf("one side %+v, across the antimeridian %+v: want the giant once", one, across)
	}
}
