package density

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestShare(t *testing.T) {
	const s = 1.0 / steps
	box := func(lo, hi uint16) uint64 { return uint64(lo) | uint64(hi)<<32 }
	tests := []struct {
		name      string
		a, b      float64
		lo, hi, m uint16
		want, tol float64
	}{
		{"outside left", -1, 0.1, 20000, 40000, 30000, 0, 0},
		{"outside right", 0.9, 2, 20000, 40000, 30000, 0, 0},
		{"touching the low end", 0, 20000 * s, 20000, 40000, 30000, 0, 0},
		{"covering", 0.1, 0.9, 20000, 40000, 30000, 1, 0},
		{"even: mean in the middle", 30000 * s, 40000 * s, 20000, 40000, 30000, 0.5, 1e-12},
		{"even: a quarter", 20000 * s, 25000 * s, 20000, 40000, 30000, 0.25, 1e-12},
		// Mean near the high end: most of the share sits in [m, hi].
		{"clustered high: top piece", 38000 * s, 1, 20000, 40000, 38000, 0.9, 1e-12},
		{"clustered high: low piece", 0, 29000 * s, 20000, 40000, 38000, 0.05, 1e-12},
		{"one step wide, half covered", 0, 20000.5 * s, 20000, 20001, 20000, 0.5, 1e-9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := share(tc.a, tc.b, 0, s, box(tc.lo, tc.hi), uint32(tc.m))
			if math.Abs(got-tc.want) > tc.tol {
				t.Errorf("share = %.12f, want %.12f", got, tc.want)
			}
		})
	}
}

// share is a distribution: shares of adjacent intervals add up, lie in
// [0, 1], and the spread's mean is the stored mean.
func TestShareIsADistribution(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	const s = 1.0 / steps
	for i := 0; i < 1000; i++ {
		lo := uint16(rng.IntN(steps - 1))
		hi := lo + 1 + uint16(rng.IntN(steps-int(lo)))
		m := lo + uint16(rng.IntN(int(hi-lo)+1))
		box := uint64(lo) | uint64(hi)<<32
		a, c := rng.Float64(), rng.Float64()
		a, c = min(a, c), max(a, c)
		b := a + (c-a)*rng.Float64()
		left, right, whole := share(a, b, 0, s, box, uint32(m)), share(b, c, 0, s, box, uint32(m)), share(a, c, 0, s, box, uint32(m))
		if left < 0 || right < 0 || whole > 1+1e-12 || math.Abs(left+right-whole) > 1e-9 {
			t.Fatalf("box [%d, %d] mean %d: [%g,%g] %g + [%g,%g] %g ≠ %g", lo, hi, m, a, b, left, b, c, right, whole)
		}
		// The mean of the spread: ∫ x d(cdf), by midpoint sums.
		flo, fhi := float64(lo)*s, float64(hi)*s
		fm := min(max(float64(m)*s, flo+s/2), fhi-s/2)
		var mean float64
		const n = 2000
		for k := 0; k < n; k++ {
			x0, x1 := flo+(fhi-flo)*float64(k)/n, flo+(fhi-flo)*float64(k+1)/n
			mean += (x0 + x1) / 2 * (cdf(x1, flo, fm, fhi) - cdf(x0, flo, fm, fhi))
		}
		if math.Abs(mean-fm) > (fhi-flo)/n {
			t.Fatalf("box [%d, %d] mean %d: the spread's mean is %g, want %g", lo, hi, m, mean, fm)
		}
	}
}

func TestMortonRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for k := 0; k < 10000; k++ {
		i, j := rng.Uint32()&0xffff, rng.Uint32()&0xffff
		m := morton(i, j)
		if gi, gj := unmorton(m); gi != i || gj != j {
			t.Fatalf("unmorton(morton(%d, %d)) = %d, %d", i, j, gi, gj)
		}
		// A cell's parent is its Morton code shifted by two bits.
		if pi, pj := unmorton(m >> 2); pi != i>>1 || pj != j>>1 {
			t.Fatalf("parent of (%d, %d) is (%d, %d)", i, j, pi, pj)
		}
	}
}

// seek finds what search finds, from any lower bound at or before it.
func TestSeekMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	g := grid{}
	for k := 0; k < 3000; k++ {
		g.keys = append(g.keys, rng.Uint32()>>8)
	}
	slices.Sort(g.keys)
	for k := 0; k < 10000; k++ {
		target := uint64(rng.Uint32() >> 8)
		want := g.search(target, 0, len(g.keys))
		from := rng.IntN(want + 1)
		if got := g.seek(target, from); got != want {
			t.Fatalf("seek(%d, %d) = %d, search = %d", target, from, got, want)
		}
	}
}

func TestQuantRange(t *testing.T) {
	for _, tc := range []struct {
		name           string
		lo, hi         float64
		wantLo, wantHi uint16
	}{
		{"a point on a step", 0.5, 0.5, 32767, 32768},
		{"a point at the cell's start", 0, 0, 0, 1},
		{"a point at the cell's end", 1, 1, 65534, 65535},
		{"rounded outwards", 0.1, 0.9, 6553, 58982},
		{"beyond the cell: clamped", -0.5, 1.5, 0, 65535},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := quantRange(tc.lo, tc.hi, 0, 1)
			if lo != tc.wantLo || hi != tc.wantHi {
				t.Errorf("quantRange(%g, %g) = %d, %d; want %d, %d", tc.lo, tc.hi, lo, hi, tc.wantLo, tc.wantHi)
			}
		})
	}
}

// sortRows orders rows light before heavy, each by Morton code, keeping
// every row.
func TestSortRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{0, 1, 2, 7, 1000} {
		rows := make([]cellRow, n)
		for i := range rows {
			rows[i] = cellRow{key: uint64(rng.Uint32()), heavy: rng.IntN(5) == 0, n: float64(i)}
		}
		split := sortRows(rows)
		seen := make([]bool, n)
		for i := range rows {
			if seen[int(rows[i].n)] {
				t.Fatalf("n=%d: row %v twice", n, rows[i].n)
			}
			seen[int(rows[i].n)] = true
			if (i < split) == rows[i].heavy {
				t.Fatalf("n=%d: row %d (heavy %v) on the wrong side of %d", n, i, rows[i].heavy, split)
			}
			if i > 0 && i != split && rows[i-1].key > rows[i].key {
				t.Fatalf("n=%d: rows %d and %d out of order", n, i-1, i)
			}
		}
	}
}
