package pricing

import (
	"errors"
	"math"

	"github.com/geotoll/geotoll/throttle"
)

// Observation is one timed request: what the model estimated it reads and
// the database time it took.
type Observation struct {
	Features, Vertices float64
	MS                 float64
}

// floorMS keeps the relative error of a sub-millisecond observation from
// dominating a fit: below it, an error counts as if the query took floorMS.
const floorMS = 0.5

// Fit returns the non-negative work model that minimise the squared
// relative error Σ ((ms − predicted) / max(ms, floorMS))² over the
// observations. Relative, because a price must rank a 1 ms tile against a
// 2 ms one as surely as a 100 ms tile against a 200 ms one, and plain least
// squares would spend itself on the slowest few.
//
// Non-negative, because a negative weight would price some request below
// its fixed cost: the fit solves the least-squares problem on every subset
// of the three terms (eight small normal equations) and keeps the best
// whose coefficients are all ≥ 0 — the exact solution with three unknowns.
func Fit(obs []Observation) (throttle.WorkModel, error) {
	var usable int
	for _, o := range obs {
		if finite(o.Features) && finite(o.Vertices) && finite(o.MS) && o.MS >= 0 {
			usable++
		}
	}
	if usable < 3 {
		return throttle.WorkModel{}, errors.New("fit: fewer than three usable observations")
	}
	best, bestErr := throttle.WorkModel{}, math.Inf(1)
	for mask := 1; mask < 8; mask++ {
		c, ok := solve(obs, mask)
		if !ok || c.QueryMS < 0 || c.FeatureMS < 0 || c.VertexMS < 0 {
			continue
		}
		if e := relErr(obs, c); e < bestErr {
			best, bestErr = c, e
		}
	}
	if math.IsInf(bestErr, 1) {
		return throttle.WorkModel{}, errors.New("fit: no non-negative solution")
	}
	return best, nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// terms are the regressors of an observation: 1, features, vertices.
func terms(o Observation) [3]float64 {
	return [3]float64{1, max(o.Features, 0), max(o.Vertices, 0)}
}

// solve is weighted least squares over the terms in mask (bit i: term i).
func solve(obs []Observation, mask int) (throttle.WorkModel, bool) {
	var idx []int
	for i := range 3 {
		if mask&(1<<i) != 0 {
			idx = append(idx, i)
		}
	}
	n := len(idx)
	var a [3][3]float64
	var b [3]float64
	for _, o := range obs {
		if !finite(o.Features) || !finite(o.Vertices) || !finite(o.MS) || o.MS < 0 {
			continue
		}
		w := 1 / math.Pow(max(o.MS, floorMS), 2)
		x := terms(o)
		for r := range n {
			for c := range n {
				a[r][c] += w * x[idx[r]] * x[idx[c]]
			}
			b[r] += w * x[idx[r]] * o.MS
		}
	}
	sol, ok := gauss(a, b, n)
	if !ok {
		return throttle.WorkModel{}, false
	}
	var full [3]float64
	for r, i := range idx {
		full[i] = sol[r]
	}
	return throttle.WorkModel{QueryMS: full[0], FeatureMS: full[1], VertexMS: full[2]}, true
}

// gauss solves the n×n system a·x = b by elimination with partial pivoting;
// ok is false when it is singular (to rounding).
func gauss(a [3][3]float64, b [3]float64, n int) ([3]float64, bool) {
	var scale float64
	for r := range n {
		for c := range n {
			scale = max(scale, math.Abs(a[r][c]))
		}
	}
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) <= scale*1e-12 {
			return [3]float64{}, false
		}
		a[col], a[p] = a[p], a[col]
		b[col], b[p] = b[p], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < n; c++ {
				a[r][c] -= f * a[col][c]
			}
			b[r] -= f * b[col]
		}
	}
	var x [3]float64
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for c := r + 1; c < n; c++ {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	for _, v := range x[:n] {
		if !finite(v) {
			return [3]float64{}, false
		}
	}
	return x, true
}

// relErr is the objective Fit minimises.
func relErr(obs []Observation, c throttle.WorkModel) float64 {
	var s float64
	for _, o := range obs {
		if !finite(o.Features) || !finite(o.Vertices) || !finite(o.MS) || o.MS < 0 {
			continue
		}
		d := (o.MS - c.MS(o.Features, o.Vertices)) / max(o.MS, floorMS)
		s += d * d
	}
	return s
}
