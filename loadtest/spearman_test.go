package loadtest

import (
	"math"
	"slices"
	"testing"
)

func TestRanks(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want []float64
	}{
		{"distinct", []float64{30, 10, 20}, []float64{3, 1, 2}},
		{"ties share the average", []float64{10, 20, 20, 30}, []float64{1, 2.5, 2.5, 4}},
		{"all tied", []float64{5, 5, 5}, []float64{2, 2, 2}},
		{"ties at the top", []float64{1, 9, 9, 9}, []float64{1, 3, 3, 3}},
		{"empty", nil, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ranks(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("Ranks(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestSpearman(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   float64
	}{
		{"same order", []float64{1, 2, 3, 4}, []float64{10, 20, 30, 400}, 1},
		{"reversed", []float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		// 1 - 6·Σd²/(n(n²-1)) with Σd² = 4, n = 5.
		{"two swaps", []float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8},
		// Ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5/√(4.5·5).
		{"ties", []float64{1, 2, 2, 3}, []float64{1, 2, 3, 4}, 4.5 / math.Sqrt(4.5*5)},
		{"monotone, not linear", []float64{1, 2, 3}, []float64{1, 100, 100000}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Spearman(tc.xs, tc.ys); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Spearman = %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		xs, ys []float64
	}{
		{"constant side", []float64{1, 1, 1}, []float64{1, 2, 3}},
		{"lengths differ", []float64{1, 2}, []float64{1, 2, 3}},
		{"one pair", []float64{1}, []float64{1}},
		{"NaN", []float64{1, math.NaN(), 3}, []float64{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Spearman(tc.xs, tc.ys); !math.IsNaN(got) {
				t.Errorf("Spearman = %v, want NaN", got)
			}
		})
	}
}

func FuzzSpearman(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 4, 3, 2, 1})
	f.Add([]byte{5, 5, 1, 9, 2, 2, 7, 7, 0, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b) / 2
		xs, ys := make([]float64, n), make([]float64, n)
		for i := range n {
			xs[i], ys[i] = float64(b[i]%8), float64(b[n+i])
		}
		r := Spearman(xs, ys)
		if math.IsNaN(r) {
			return
		}
		if r < -1-1e-9 || r > 1+1e-9 {
			t.Fatalf("ρ = %v out of [-1, 1]", r)
		}
		if back := Spearman(ys, xs); math.Abs(back-r) > 1e-9 {
			t.Fatalf("not symmetric: %v vs %v", r, back)
		}
		if self := Spearman(xs, xs); math.Abs(self-1) > 1e-9 {
			t.Fatalf("ρ(x, x) = %v", self)
		}
	})
}
