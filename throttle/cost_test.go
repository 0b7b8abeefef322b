package throttle

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
)

var (
	nan  = math.NaN()
	inf  = math.Inf(1)
	ninf = math.Inf(-1)
)

func TestWeightsValidate(t *testing.T) {
	d := DefaultWeights()
	with := func(f func(*Weights)) Weights { w := d; f(&w); return w }
	tests := []struct {
		name string
		w    Weights
		ok   bool
	}{
		{"defaults", d, true},
		{"zero weights", Weights{Base: 1, MaxCost: 1}, true},
		{"zero value", Weights{}, false},
		{"base zero", with(func(w *Weights) { w.Base = 0 }), false},
		{"base negative", with(func(w *Weights) { w.Base = -1 }), false},
		{"base NaN", with(func(w *Weights) { w.Base = nan }), false},
		{"base Inf", with(func(w *Weights) { w.Base = inf }), false},
		{"base below a micro-token", with(func(w *Weights) { w.Base = 4e-7 }), false},
		{"base a micro-token", with(func(w *Weights) { w.Base = 1e-6 }), true},
		{"area weight negative", with(func(w *Weights) { w.AreaWeight = -0.1 }), false},
		{"area weight NaN", with(func(w *Weights) { w.AreaWeight = nan }), false},
		{"radius weight Inf", with(func(w *Weights) { w.RadiusWeight = inf }), false},
		{"feature weight negative", with(func(w *Weights) { w.FeatureWeight = -1 }), false},
		{"point weight NaN", with(func(w *Weights) { w.PointWeight = nan }), false},
		{"max below base", with(func(w *Weights) { w.MaxCost = 0.005 }), false},
		{"max NaN", with(func(w *Weights) { w.MaxCost = nan }), false},
		{"max Inf", with(func(w *Weights) { w.MaxCost = inf }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.w.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestTileCost(t *testing.T) {
	w := DefaultWeights()
	tests := []struct {
		name     string
		tile     maptile.Tile
		min, max float64
	}{
		{"z0 is MaxCost", maptile.New(0, 0, 0), 60, 60},
		{"z2 corner is MaxCost", maptile.New(0, 0, 2), 60, 60},
		{"z2 equator is MaxCost", maptile.New(1, 2, 2), 60, 60},
		{"z3 polar is MaxCost", maptile.New(7, 7, 3), 60, 60},
		{"z6 equator", maptile.New(10, 32, 6), 15, 17},
		{"z14 equator about Base", maptile.New(8800, 8192, 14), 0.01, 0.011},
		{"z14 polar about Base", maptile.New(8800, 0, 14), 0.01, 0.011},
		{"z22 is Base", maptile.New(1<<21, 1<<21, 22), 0.01, 0.010001},
		{"x out of range", maptile.New(4, 0, 2), 60, 60},
		{"y out of range", maptile.New(0, 1<<14, 14), 60, 60},
		{"z32 does not exist", maptile.New(0, 0, 32), 60, 60},
		{"huge zoom", maptile.New(0, 0, math.MaxUint32), 60, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := w.Tile(tt.tile)
			if !(got >= tt.min && got <= tt.max) {
				t.Errorf("Tile(%v) = %v, want in [%v, %v]", tt.tile, got, tt.min, tt.max)
			}
		})
	}
}

func TestBBoxCost(t *testing.T) {
	w := DefaultWeights()
	b := func(minx, miny, maxx, maxy float64) orb.Bound {
		return orb.Bound{Min: orb.Point{minx, miny}, Max: orb.Point{maxx, maxy}}
	}
	tests := []struct {
		name  string
		bound orb.Bound
		limit int
		want  float64
	}{
		{"point", b(13.4, 52.5, 13.4, 52.5), 0, 0.01},
		{"one square degree", b(13, 52, 14, 53), 0, 0.51},
		{"inverted counts its size", b(14, 53, 13, 52), 0, 0.51},
		{"limit", b(13, 52, 14, 53), 1000, 2.51},
		{"negative limit counts as zero", b(13, 52, 14, 53), -1000, 0.51},
		{"huge limit clamps", b(13, 52, 14, 53), math.MaxInt, 60},
		{"world clamps", b(-180, -90, 180, 90), 0, 60},
		{"NaN coordinate is worst case", b(nan, 0, 1, 1), 0, 60},
		{"Inf coordinate is worst case", b(0, 0, inf, 1), 0, 60},
		{"Inf minus Inf is worst case", b(inf, 0, inf, 1), 0, 60},
		{"-Inf coordinate is worst case", b(ninf, 0, 0, 1), 0, 60},
		{"zero width, infinite height", b(0, ninf, 0, inf), 0, 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.BBox(tt.bound, tt.limit); !approx(got, tt.want) {
				t.Errorf("BBox(%v, %d) = %v, want %v", tt.bound, tt.limit, got, tt.want)
			}
		})
	}
}

func TestRadiusCost(t *testing.T) {
	w := DefaultWeights()
	tests := []struct {
		name    string
		radiusM float64
		limit   int
		want    float64
	}{
		{"zero", 0, 0, 0.01},
		{"10 m", 10, 0, 0.022},
		{"1 km", 1000, 0, 1.21},
		{"1 km with limit", 1000, 500, 2.21},
		{"50 km clamps to MaxCost", 50000, 0, 60},
		{"500 km clamps to MaxCost", 500000, 0, 60},
		{"negative counts as zero", -5000, 0, 0.01},
		{"-Inf counts as zero", ninf, 0, 0.01},
		{"Inf clamps", inf, 0, 60},
		{"NaN is worst case", nan, 0, 60},
		{"negative limit counts as zero", 10, math.MinInt, 0.022},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.Radius(tt.radiusM, tt.limit); !approx(got, tt.want) {
				t.Errorf("Radius(%v, %d) = %v, want %v", tt.radiusM, tt.limit, got, tt.want)
			}
		})
	}
}

func TestBatchCost(t *testing.T) {
	w := DefaultWeights()
	tests := []struct {
		name   string
		points int
		want   float64
	}{
		{"none", 0, 0.01},
		{"one", 1, 0.06},
		{"twenty", 20, 1.01},
		{"clamps", 5000, 60},
		{"max int clamps", math.MaxInt, 60},
		{"negative counts as zero", -3, 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.Batch(tt.points); !approx(got, tt.want) {
				t.Errorf("Batch(%d) = %v, want %v", tt.points, got, tt.want)
			}
		})
	}
}

// Contains is a one-point check plus the fences it may return.
func TestContainsCost(t *testing.T) {
	w := DefaultWeights()
	for _, tt := range []struct {
		limit int
		want  float64
	}{{0, 0.06}, {100, 0.26}, {1000, 2.06}, {math.MaxInt, 60}, {-5, 0.06}} {
		if got := w.Contains(tt.limit); !approx(got, tt.want) {
			t.Errorf("Contains(%d) = %v, want %v", tt.limit, got, tt.want)
		}
	}
	if w.Contains(1) != w.Batch(1)+w.FeatureWeight {
		t.Error("Contains(1) is not a one-point check plus one feature")
	}
}

func TestZeroWeightIgnoresGarbage(t *testing.T) {
	w := Weights{Base: 2, MaxCost: 10}
	world := orb.Bound{Min: orb.Point{nan, ninf}, Max: orb.Point{inf, nan}}
	for name, got := range map[string]float64{
		"tile":   w.Tile(maptile.New(0, 0, 0)),
		"bbox":   w.BBox(world, math.MaxInt),
		"radius": w.Radius(nan, math.MaxInt),
		"batch":  w.Batch(math.MaxInt),
	} {
		if got != 2 {
			t.Errorf("%s = %v, want Base 2: a zero weight ignores its input", name, got)
		}
	}
}

// TestParentNeverCheaperThanChild checks, over many random tiles at every
// zoom 1..22, that a tile's parent costs at least as much as the tile. The
// weight sets include ones that never clamp, so the property is checked on
// the raw areas and not only on MaxCost == MaxCost.
func TestParentNeverCheaperThanChild(t *testing.T) {
	tests := []struct {
		name string
		w    Weights
	}{
		{"defaults", DefaultWeights()},
		{"unclamped", Weights{Base: 1, AreaWeight: 1e6, MaxCost: 1e15}},
		{"tiny area weight", Weights{Base: 1, AreaWeight: 1e-9, MaxCost: 2}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const perZoom = 5000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for z := maptile.Zoom(1); z <= 22; z++ {
				n := uint32(1) << z
				for range perZoom {
					child := maptile.New(rng.Uint32N(n), rng.Uint32N(n), z)
					parent := child.Parent()
					pc, cc := tt.w.Tile(parent), tt.w.Tile(child)
					if pc < cc {
						t.Fatalf("parent %v costs %v < child %v costs %v", parent, pc, child, cc)
					}
					for _, sibling := range parent.Children() {
						if sc := tt.w.Tile(sibling); pc < sc {
							t.Fatalf("parent %v costs %v < child %v costs %v", parent, pc, sibling, sc)
						}
					}
				}
			}
		})
	}
}

func TestPricesAreMonotonic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, w := range []Weights{DefaultWeights(), {Base: 0.5, AreaWeight: 3, RadiusWeight: 0.01, FeatureWeight: 0.5, PointWeight: 2, MaxCost: 1e6}} {
		for range 20000 {
			// Two sizes a <= b, spanning many magnitudes, negatives and 0.
			a, b := randSize(rng), randSize(rng)
			if a > b {
				a, b = b, a
			}
			la, lb := rng.IntN(100000)-1000, rng.IntN(100000)-1000
			if la > lb {
				la, lb = lb, la
			}
			box := func(s float64) orb.Bound { return orb.Bound{Max: orb.Point{s, 1}} }
			if w.Radius(a, la) > w.Radius(b, la) || w.Radius(a, la) > w.Radius(a, lb) {
				t.Fatalf("%+v: Radius not monotonic at r %v<=%v, limit %d<=%d", w, a, b, la, lb)
			}
			// A bbox's area is |Δlon| × |Δlat|: an inverted box has a size too.
			sa, sb := math.Abs(a), math.Abs(b)
			if sa > sb {
				sa, sb = sb, sa
			}
			if w.BBox(box(sa), la) > w.BBox(box(-sb), la) || w.BBox(box(-sa), la) > w.BBox(box(sa), lb) {
				t.Fatalf("%+v: BBox not monotonic at area %v<=%v, limit %d<=%d", w, sa, sb, la, lb)
			}
			if w.Batch(la) > w.Batch(lb) {
				t.Fatalf("%+v: Batch not monotonic at %d<=%d", w, la, lb)
			}
		}
		// Including the extremes, in order.
		sizes := []float64{ninf, -1, 0, 1e-300, 1, 1e3, 5e4, 1e300, inf}
		for i := 1; i < len(sizes); i++ {
			if w.Radius(sizes[i-1], 0) > w.Radius(sizes[i], 0) {
				t.Errorf("Radius(%v) > Radius(%v)", sizes[i-1], sizes[i])
			}
		}
		ints := []int{math.MinInt, -1, 0, 1, 1000, math.MaxInt}
		for i := 1; i < len(ints); i++ {
			if w.Batch(ints[i-1]) > w.Batch(ints[i]) || w.Radius(1, ints[i-1]) > w.Radius(1, ints[i]) {
				t.Errorf("not monotonic between %d and %d", ints[i-1], ints[i])
			}
		}
	}
}

func randSize(rng *rand.Rand) float64 {
	s := math.Pow(10, rng.Float64()*12-6) // 1e-6 .. 1e6
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return -s
	}
	return s
}

// FuzzWeights feeds arbitrary numbers to every price and checks that the
// result is in [Base, MaxCost] and monotonic in the size it was given.
func FuzzWeights(f *testing.F) {
	d := DefaultWeights()
	f.Add(d.Base, d.AreaWeight, d.RadiusWeight, d.FeatureWeight, d.PointWeight, d.MaxCost,
		13.0, 52.0, 14.0, 53.0, 10.0, 100, 20, uint32(8800), uint32(5373), uint32(14))
	f.Add(1.0, 0.0, 0.0, 0.0, 0.0, 1.0, nan, inf, ninf, 0.0, nan, -1, -1, uint32(0), uint32(0), uint32(0))
	f.Add(0.5, 1e300, 1e300, 1e300, 1e300, 1e308, -180.0, -90.0, 180.0, 90.0, inf, math.MaxInt, math.MaxInt, uint32(1), uint32(1), uint32(1))
	f.Add(2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 1e-300, -1e-300, 5e-324, math.Copysign(0, -1), -5e4, math.MinInt, math.MinInt, uint32(math.MaxUint32), uint32(7), uint32(31))
	f.Fuzz(func(t *testing.T, base, areaW, radiusW, featureW, pointW, maxCost,
		minx, miny, maxx, maxy, radiusM float64, limit, points int, x, y, z uint32) {
		w := Weights{Base: base, AreaWeight: areaW, RadiusWeight: radiusW, FeatureWeight: featureW, PointWeight: pointW, MaxCost: maxCost}
		if w.Validate() != nil {
			w = DefaultWeights()
		}
		check := func(what string, v float64) {
			t.Helper()
			if !(v >= w.Base && v <= w.MaxCost) {
				t.Fatalf("%s = %v, outside [%v, %v] for %+v", what, v, w.Base, w.MaxCost, w)
			}
		}
		tile := maptile.New(x, y, maptile.Zoom(z))
		bound := orb.Bound{Min: orb.Point{minx, miny}, Max: orb.Point{maxx, maxy}}
		check("Tile", w.Tile(tile))
		check("BBox", w.BBox(bound, limit))
		check("Radius", w.Radius(radiusM, limit))
		check("Batch", w.Batch(points))
		check("Contains", w.Contains(limit))

		if tile.Valid() && tile.Z > 0 && w.Tile(tile.Parent()) < w.Tile(tile) {
			t.Fatalf("parent of %v is cheaper", tile)
		}
		if !math.IsNaN(radiusM) && w.Radius(radiusM, limit) > w.Radius(math.Abs(radiusM)*2+1, limit) {
			t.Fatalf("Radius not monotonic above %v", radiusM)
		}
		if limit < math.MaxInt && w.Radius(1, limit) > w.Radius(1, limit+1) {
			t.Fatalf("Radius not monotonic in limit above %d", limit)
		}
		if points < math.MaxInt && w.Batch(points) > w.Batch(points+1) {
			t.Fatalf("Batch not monotonic above %d", points)
		}
		if limit < math.MaxInt && w.Contains(limit) > w.Contains(limit+1) {
			t.Fatalf("Contains not monotonic above %d", limit)
		}
		if a := area(bound); !math.IsNaN(a) {
			bigger := orb.Bound{Max: orb.Point{a*2 + 1, 1}}
			if w.BBox(bound, limit) > w.BBox(bigger, limit) {
				t.Fatalf("BBox not monotonic above area %v", a)
			}
		}
	})
}

func TestTileCostDoesNotAllocate(t *testing.T) {
	w := DefaultWeights()
	tile := maptile.New(8800, 5373, 14)
	if n := testing.AllocsPerRun(1000, func() { _ = w.Tile(tile) }); n != 0 {
		t.Errorf("Tile allocates %v times per call, want 0", n)
	}
}

func approx(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}
