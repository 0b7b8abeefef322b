package density

import (
	"math"
	"slices"
)

// grid is one level of a model: the non-empty cells of the 2^level × 2^level
// grid over the normalised world, in row-major order, with prefix sums of
// their features and vertices, so that any run of cells of one row sums with
// two binary searches whatever its length.
//
// Each cell also keeps small summaries that let a query cut through it: the
// extent of its features' bounding-box centres (a content box) and their
// mean, and the mean half extent of their boxes — all in 1/65535 of the
// cell. A partly covered cell counts the share of its centres that fall in
// the query widened by the half extent, the centres taken as spread over the
// content box in two even pieces split at the mean (so a cluster at one end
// of the box stays at that end).
type grid struct {
	level int
	size  int     // cells per axis: 2^level
	w     float64 // cell width and height: 2^-level

	keys []uint32  // row<<16 | column, ascending
	cumN []float64 // cumN[k]: features of cells [0, k); len(keys)+1
	cumV []float64 // the same for vertices; nil when every feature is one vertex
	box  []uint64  // content box: x0 | y0<<16 | x1<<32 | y1<<48, in steps of 1/65535 of the cell
	mean []uint32  // mean centre: x | y<<16, in steps
	half []uint32  // mean half extent: hx | hy<<16, in steps; nil when all are points

	hxMax, hyMax   float64 // the largest half extent of any cell
	hxMean, hyMean float64 // the feature-weighted mean half extent

	// edge says how the cells of the bottom row [0] and the top row [1]
	// hold the features the model clamps onto the world's edge (see
	// edgeOf); edgeRows sums a mixedEdge one's runs (empty otherwise).
	edge     [2]edgeKind
	edgeRows [2]edgeRow
}

// edgeRow is what a mixedEdge row sums a run of more than maxEdgeVisit
// cells with, without weighing them one by one: prefix sums over its cells
// on the edge alone, which count whole in a query that reaches the edge,
// and the vertical spread of its other cells' centres taken together over
// the whole row — the union of their content boxes and the feature-weighted
// mean of their means, in steps, as one cell's — which the query takes its
// share of (an approximation: see the package doc).
type edgeRow struct {
	on   []uint32  // the indices of the row's cells on the edge, ascending
	cumN []float64 // cumN[i]: features of the cells on[:i]; len(on)+1
	cumV []float64 // the same for vertices; nil when the grid's cumV is
	box  uint64    // the other cells' content box along y: lo | hi<<32, in steps
	mean uint32    // their mean centre along y, in steps
}

// bytes is the edge row's memory footprint (its slices).
func (e *edgeRow) bytes() int { return 4*len(e.on) + 8*(len(e.cumN)+len(e.cumV)) }

// sum is the features and vertices of the cells on the edge among [k0, k1).
func (e *edgeRow) sum(k0, k1 int) (n, v float64) {
	a, b := e.find(k0), e.find(k1)
	n = e.cumN[b] - e.cumN[a]
	if e.cumV == nil {
		return n, n
	}
	return n, e.cumV[b] - e.cumV[a]
}

// find is how many of the cells on the edge lie before cell k.
func (e *edgeRow) find(k int) int {
	i, _ := slices.BinarySearch(e.on, uint32(k)) //nolint:gosec // G115: k indexes the grid's cells, fewer than 2^32
	return i
}

// edgeKind says whether the cells of a row at the world's edge have their
// content boxes in the step at the edge, where the features the model
// clamps onto it lie.
type edgeKind uint8

const (
	offEdge   edgeKind = iota // none of them (or the row is empty)
	onEdge                    // all of them
	mixedEdge                 // some of them
)

// maxVisit bounds the cells of one partly covered row that are weighed one by
// one; beyond it the row's inner cells share one vertical fraction (see
// addRun). maxEdgeVisit is that bound for an edge row holding both features
// clamped onto the edge and others, which the query reaches: the summary
// addRun takes of such a row's other cells is an approximation (their
// union, over the whole row), which weighing them one by one avoids for
// every row of up to 2,048 cells in reach — 18 µs an estimate on a 2-CPU
// machine — and beyond that bounds the cost of a polar query on the
// finest grids.
const (
	maxVisit     = 64
	maxEdgeVisit = 2048
)

// sum accumulates an estimate: features and vertices, and the cells
// weighed one by one on the way (what the estimate cost, for tests).
type sum struct {
	n, v    float64
	visited int
}

// bytes is the grid's memory footprint (its slices).
func (g *grid) bytes() int {
	return 4*(len(g.keys)+len(g.mean)+len(g.half)) + 8*(len(g.cumN)+len(g.cumV)+len(g.box)) +
		g.edgeRows[0].bytes() + g.edgeRows[1].bytes()
}

// cells is the number of non-empty cells.
func (g *grid) cells() int { return len(g.keys) }

// index is the row or column of the grid at normalised position v, clamped
// to the grid at both ends: the world's top and right edges (v = 1) belong
// to the last row and column, where the build places what lies on them.
func (g *grid) index(v float64) int {
	return min(max(int(math.Floor(v/g.w)), 0), g.size-1)
}

// rows returns the rows a query spanning [y0, y1] reads, widened by the
// largest half extent and clamped to the grid: a query on the world's edge,
// or beyond it, reads the edge row.
func (g *grid) rows(y0, y1 float64) (j0, j1 int) {
	return g.index(y0 - g.hyMax), g.index(y1 + g.hyMax)
}

// edgeStep is one step of the grid's cell summaries (see edgeRange): a
// content box is quantised in steps of the grid's own cells, so the features
// clamped onto the world's edge lie within one such step of it.
func (g *grid) edgeStep() float64 { return g.w / steps }

// addRect adds the features whose box centre lies in r (clamped to the
// world) widened by their half extent; edgeRange opens it onto the world's
// edges.
func (g *grid) addRect(r rect, acc *sum) {
	if len(g.keys) == 0 {
		return
	}
	r.x0, r.x1 = edgeRange(r.x0, r.x1, g.edgeStep())
	r.y0, r.y1 = edgeRange(r.y0, r.y1, g.edgeStep())
	j0, j1 := g.rows(r.y0, r.y1)
	at := -1
	for j := j0; j <= j1; j++ {
		at = g.addRow(j, r.x0, r.x1, r.y0, r.y1, at, acc)
	}
}

// addRow adds row j's share of the query [x0, x1] × [y0, y1]: cells wholly
// inside count in full through the prefix sums; the few cut by an edge, by
// their content boxes. at is where an earlier call on a lower row or column
// ended (-1: none); addRow returns where it ended, for the next call.
func (g *grid) addRow(j int, x0, x1, y0, y1 float64, at int, acc *sum) int {
	w := g.w
	a, b := g.index(x0-g.hxMax), g.index(x1+g.hxMax)
	if a > b {
		return at
	}
	row := uint64(j) << 16 //nolint:gosec // G115: j is a grid row, 0..size-1
	var lo int
	if at < 0 {
		lo = g.search(row+uint64(a), 0, len(g.keys)) //nolint:gosec // G115: a is a grid column, 0..size-1
	} else {
		lo = g.seek(row+uint64(a), at) //nolint:gosec // G115: a is a grid column, 0..size-1
	}
	// At most b-a+1 cells lie in [a, b]: the second search is short.
	hi := g.search(row+uint64(b+1), lo, min(lo+b-a+1, len(g.keys))) //nolint:gosec // G115: b is a grid column, 0..size-1
	if lo == hi {
		return hi
	}
	rowFull := y0 <= float64(j)*w && y1 >= float64(j+1)*w
	if !rowFull && (hi-lo <= maxVisit || hi-lo <= maxEdgeVisit && g.mixedEdgeRow(j, y0, y1)) {
		for k := lo; k < hi; k++ {
			g.addCell(k, x0, x1, y0, y1, acc)
		}
		return hi
	}
	// Columns [ia, ib] lie wholly inside [x0, x1].
	ia := int(math.Ceil(x0 / w))
	ib := int(math.Floor(x1/w)) - 1
	k0, k1 := lo, hi
	for ; k0 < k1 && int(g.keys[k0]&0xffff) < ia; k0++ {
		g.addCell(k0, x0, x1, y0, y1, acc)
	}
	for ; k1 > k0 && int(g.keys[k1-1]&0xffff) > ib; k1-- {
		g.addCell(k1-1, x0, x1, y0, y1, acc)
	}
	if k0 < k1 {
		g.addRun(j, k0, k1, y0, y1, rowFull, acc)
	}
	return hi
}

// addRun adds the cells [k0, k1) of row j, wholly inside the query's
// columns, at their share of its rows [y0, y1]: all of them when the query
// covers the row, else the row's even vertical share — save in an edge row
// that holds features clamped onto the world's edge, which the query
// reaches (see edgeOf): there those count whole, and the row's other cells
// (if any) take their share of the spread of their centres (see edgeRow).
// It costs two binary searches at most, however long the run.
func (g *grid) addRun(j, k0, k1 int, y0, y1 float64, rowFull bool, acc *sum) {
	n := g.cumN[k1] - g.cumN[k0]
	v := n
	if g.cumV != nil {
		v = g.cumV[k1] - g.cumV[k0]
	}
	side, edge := g.edgeOf(j, y0, y1)
	fy := 1.0
	switch {
	case rowFull || edge == onEdge:
	case edge == mixedEdge:
		e := &g.edgeRows[side]
		onN, onV := e.sum(k0, k1)
		fy = share(y0-g.hyMean, y1+g.hyMean, float64(j)*g.w, g.w/steps, e.box, e.mean)
		acc.n += onN + fy*(n-onN)
		acc.v += onV + fy*(v-onV)
		return
	default:
		fy = overlap(y0-g.hyMean, y1+g.hyMean, float64(j)*g.w, float64(j+1)*g.w)
	}
	acc.n += fy * n
	acc.v += fy * v
}

// edgeOf is the side (0: bottom, 1: top) and edgeKind of row j for a query
// spanning [y0, y1]: offEdge unless j is an edge row and the query reaches
// the world's edge there. The row's even vertical share, which a long run
// of cells takes, would count the features clamped onto the edge at a
// sliver of their weight, and the features just short of it as if spread
// over the row.
func (g *grid) edgeOf(j int, y0, y1 float64) (side int, kind edgeKind) {
	switch {
	case j == g.size-1 && y1 >= 1:
		return 1, g.edge[1]
	case j == 0 && y0 <= 0:
		return 0, g.edge[0]
	}
	return 0, offEdge
}

// mixedEdgeRow reports whether row j is an edge row the query [y0, y1]
// reaches whose cells hold both features clamped onto the edge and others.
func (g *grid) mixedEdgeRow(j int, y0, y1 float64) bool {
	_, kind := g.edgeOf(j, y0, y1)
	return kind == mixedEdge
}

// addCell adds cell k's expected share of the query: the share of its
// centres within the query widened by the cell's half extent, per axis.
func (g *grid) addCell(k int, x0, x1, y0, y1 float64, acc *sum) {
	acc.visited++
	key := g.keys[k]
	w := g.w
	cx, cy := float64(key&0xffff)*w, float64(key>>16)*w
	s := w / steps
	bx, mc := g.box[k], g.mean[k]
	var hx, hy float64
	if g.half != nil {
		h := g.half[k]
		hx, hy = float64(h&0xffff)*s/2, float64(h>>16)*s/2
	}
	f := share(x0-hx, x1+hx, cx, s, bx, mc)
	if f == 0 {
		return
	}
	f *= share(y0-hy, y1+hy, cy, s, bx>>16, mc>>16)
	if f == 0 {
		return
	}
	n := g.cumN[k+1] - g.cumN[k]
	acc.n += f * n
	if g.cumV != nil {
		acc.v += f * (g.cumV[k+1] - g.cumV[k])
	} else {
		acc.v += f * n
	}
}

// steps is the resolution of a cell's summaries: positions in 1/steps of
// the cell's width, half extents in 1/(2·steps).
const steps = 65535

// share is the share of a cell's centres, along one axis, that lie in
// [a, b]: the cell starts at o, s is one step (1/65535 of its width),
// box&0xffff and box>>32&0xffff are the ends of its content box and
// mean&0xffff the mean, in steps. The centres are taken as spread over the
// content box in two even pieces split at the mean — a share p on [lo, m]
// and 1-p on [m, hi], p = (hi-m)/(hi-lo) so that the mean is m — which is
// the even spread over [lo, hi] when m is its middle. The mean is kept half
// a step inside the box (a content box is at least one step wide), so no
// share sits on an edge.
func share(a, b, o, s float64, box uint64, mean uint32) float64 {
	lo, hi := o+float64(box&0xffff)*s, o+float64(box>>32&0xffff)*s
	if b <= lo || a >= hi {
		return 0
	}
	if a <= lo && b >= hi {
		return 1
	}
	m := min(max(o+float64(mean&0xffff)*s, lo+s/2), hi-s/2)
	return cdf(b, lo, m, hi) - cdf(a, lo, m, hi)
}

// cdf is the share of the two-piece spread of share (lo < m < hi) at or
// below x.
func cdf(x, lo, m, hi float64) float64 {
	switch {
	case x <= lo:
		return 0
	case x >= hi:
		return 1
	}
	p := (hi - m) / (hi - lo)
	if x <= m {
		return p * (x - lo) / (m - lo)
	}
	return p + (1-p)*(x-m)/(hi-m)
}

// search returns the first index in [lo, hi) whose key is at least target,
// or hi.
func (g *grid) search(target uint64, lo, hi int) int {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if uint64(g.keys[mid]) < target {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// seek is search from a known lower bound: the first index at or after from
// whose key is at least target. It gallops (1, 2, 4… ahead) and then
// searches the last stride, so nearby targets cost a few steps.
func (g *grid) seek(target uint64, from int) int {
	n := len(g.keys)
	if from >= n || uint64(g.keys[from]) >= target {
		return from
	}
	lo, step := from, 1
	for lo+step < n && uint64(g.keys[lo+step]) < target {
		lo += step
		step <<= 1
	}
	return g.search(target, lo+1, min(lo+step, n))
}

// overlap is the fraction of [b0, b1] that [a0, a1] covers; a degenerate
// [b0, b0] is covered wholly or not at all.
func overlap(a0, a1, b0, b1 float64) float64 {
	if b1 <= b0 {
		if b0 >= a0 && b0 <= a1 {
			return 1
		}
		return 0
	}
	lo, hi := max(a0, b0), min(a1, b1)
	if hi <= lo {
		return 0
	}
	return (hi - lo) / (b1 - b0)
}

// emptyGrid is a grid of level with no cells.
func emptyGrid(level int) grid {
	return grid{level: level, size: 1 << level, w: 1 / float64(uint64(1)<<level)}
}

// buildGrid merges the kept rows (by Morton code) into the n cells of level
// l, and lays them out row-major.
func buildGrid(rows []cellRow, n, l, maxLevel int, vertices bool, keep func(*cellRow) bool) grid {
	shift := 2 * uint(maxLevel-l)
	cells := make([]cellRow, 0, n)
	for i := range rows {
		r := &rows[i]
		if !keep(r) {
			continue
		}
		p := r.key >> shift
		if k := len(cells) - 1; k >= 0 && cells[k].key == p {
			cells[k].merge(r)
			continue
		}
		c := *r
		c.key = p
		cells = append(cells, c)
	}
	// Row-major order by an index: row<<16 | column, then the cell.
	byRow := make([]uint64, len(cells))
	for k := range cells {
		i, j := unmorton(cells[k].key)
		cells[k].key = uint64(j)<<16 | uint64(i)
		byRow[k] = cells[k].key<<32 | uint64(k)
	}
	slices.Sort(byRow)
	return layout(cells, byRow, l, vertices)
}

// layout fills a grid of level l from its cells, taken in the row-major
// order of byRow (row<<16 | column)<<32 | cell.
func layout(cells []cellRow, byRow []uint64, l int, vertices bool) grid {
	g := emptyGrid(l)
	w := g.w
	g.keys = make([]uint32, len(cells))
	g.cumN = make([]float64, len(cells)+1)
	if vertices {
		g.cumV = make([]float64, len(cells)+1)
	}
	g.box = make([]uint64, len(cells))
	g.mean = make([]uint32, len(cells))
	half := make([]uint32, len(cells))
	var n, sdx, sdy float64
	anyHalf := false
	for k, o := range byRow {
		c := &cells[o&(1<<32-1)]
		g.keys[k] = uint32(c.key) //nolint:gosec // G115: keys are row<<16|column of a grid whose size fits 16 bits each
		g.cumN[k+1] = g.cumN[k] + c.n
		if vertices {
			g.cumV[k+1] = g.cumV[k] + c.v
		}
		ox, oy := float64(c.key&0xffff)*w, float64(c.key>>16)*w
		x0, x1 := quantRange(c.x0, c.x1, ox, w)
		y0, y1 := quantRange(c.y0, c.y1, oy, w)
		g.box[k] = uint64(x0) | uint64(y0)<<16 | uint64(x1)<<32 | uint64(y1)<<48
		g.mean[k] = uint32(quantMean(c.sx/c.n, ox, w, x0, x1)) | uint32(quantMean(c.sy/c.n, oy, w, y0, y1))<<16
		hx, hy := quantHalf(c.sdx/(2*c.n), w), quantHalf(c.sdy/(2*c.n), w)
		half[k] = uint32(hx) | uint32(hy)<<16
		anyHalf = anyHalf || half[k] != 0
		g.hxMax = max(g.hxMax, float64(hx)*w/(2*steps))
		g.hyMax = max(g.hyMax, float64(hy)*w/(2*steps))
		n, sdx, sdy = n+c.n, sdx+c.sdx, sdy+c.sdy
	}
	if anyHalf {
		g.half = half
	}
	if n > 0 {
		g.hxMean, g.hyMean = sdx/(2*n), sdy/(2*n)
	}
	g.setEdges()
	return g
}

// setEdges fills edge from the content boxes of the bottom and top rows'
// cells (see onEdgeCell), and edgeRows for a mixedEdge row.
func (g *grid) setEdges() {
	var cells, on [2]int // bottom, top
	for k, key := range g.keys {
		for side, j := range [2]int{0, g.size - 1} {
			if int(key>>16) == j {
				cells[side]++
				if g.onEdgeCell(k, side) {
					on[side]++
				}
			}
		}
	}
	for i := range cells {
		switch on[i] {
		case 0:
			g.edge[i] = offEdge
		case cells[i]:
			g.edge[i] = onEdge
		default:
			g.edge[i] = mixedEdge
			g.edgeRows[i] = g.newEdgeRow(i, on[i])
		}
	}
}

// onEdgeCell reports whether cell k, of the bottom (side 0) or top (1) row,
// is on the edge: its content box is the step at the edge.
func (g *grid) onEdgeCell(k, side int) bool {
	if side == 0 {
		return g.box[k]>>48 == 1
	}
	return g.box[k]>>16&0xffff == steps-1
}

// newEdgeRow lays out the edgeRow of the bottom (side 0) or top (1) row,
// which holds on cells on the edge and at least one other.
func (g *grid) newEdgeRow(side, on int) edgeRow {
	row := uint64(side*(g.size-1)) << 16 //nolint:gosec // G115: a grid row, 0..size-1
	lo, hi := g.search(row, 0, len(g.keys)), g.search(row+1<<16, 0, len(g.keys))
	e := edgeRow{on: make([]uint32, 0, on), cumN: make([]float64, 1, on+1)}
	if g.cumV != nil {
		e.cumV = make([]float64, 1, on+1)
	}
	boxLo, boxHi := uint64(steps), uint64(0)
	var n, sy float64 // the other cells' features, and their means' sum weighted by them
	for k := lo; k < hi; k++ {
		cn := g.cumN[k+1] - g.cumN[k]
		if g.onEdgeCell(k, side) {
			e.on = append(e.on, uint32(k)) //nolint:gosec // G115: k indexes the grid's cells, fewer than 2^32
			e.cumN = append(e.cumN, e.cumN[len(e.cumN)-1]+cn)
			if e.cumV != nil {
				e.cumV = append(e.cumV, e.cumV[len(e.cumV)-1]+g.cumV[k+1]-g.cumV[k])
			}
			continue
		}
		boxLo, boxHi = min(boxLo, g.box[k]>>16&0xffff), max(boxHi, g.box[k]>>48)
		n, sy = n+cn, sy+cn*float64(g.mean[k]>>16)
	}
	e.box = boxLo | boxHi<<32
	e.mean = uint32(min(max(math.Round(sy/n), float64(boxLo)), float64(boxHi)))
	return e
}

// quantRange rounds [lo, hi], within the cell at origin o (width w),
// outwards to steps of 1/65535 of the cell, at least one step wide: a
// content box never collapses onto a cell's edge, where a neighbouring
// query's edge would then seem to cut it.
func quantRange(lo, hi, o, w float64) (qlo, qhi uint16) {
	l := min(max(math.Floor((lo-o)/w*steps), 0), steps-1)
	h := min(max(math.Ceil((hi-o)/w*steps), l+1), steps)
	return uint16(l), uint16(h)
}

// quantMean rounds a mean centre to a step of the cell at origin o (width
// w), inside the quantised content box [lo, hi].
func quantMean(v, o, w float64, lo, hi uint16) uint16 {
	return uint16(min(max(math.Round((v-o)/w*steps), float64(lo)), float64(hi)))
}

// quantHalf rounds a half extent to half a step of the cell width w (a
// feature that fits the cell has a half extent of at most w/2).
func quantHalf(h, w float64) uint16 {
	if !(h > 0) {
		return 0
	}
	return uint16(min(math.Round(h/w*2*steps), steps))
}
