package density

import (
	"math"
	"slices"
)

// cellRow is one row of the build query: the features whose boxes fit a
// cell of level f (and no cell of level f+1), grouped by the cell that holds
// their box centre. Assembly reuses it for the cells of every level.
type cellRow struct {
	key            uint64 // Morton code of the cell's first descendant at the finest level; row-major once assembled
	heavy          bool   // the class of geometries stored in at least Options.HeavyBytes
	f              int    // fit level
	n, v           float64
	sdx, sdy       float64 // sums of box widths and heights (normalised)
	x0, y0, x1, y1 float64 // extent of the box centres (normalised)
	sx, sy         float64 // weighted sums of the box centres
}

// merge adds o's features to c.
func (c *cellRow) merge(o *cellRow) {
	c.n += o.n
	c.v += o.v
	c.sdx += o.sdx
	c.sdy += o.sdy
	c.sx += o.sx
	c.sy += o.sy
	c.x0, c.y0 = min(c.x0, o.x0), min(c.y0, o.y0)
	c.x1, c.y1 = max(c.x1, o.x1), max(c.y1, o.y1)
}

// assemble builds a model's pyramids from the build query's rows (keyed by
// Morton code at maxLevel; reordered here): one of light features and one of
// heavy ones. It picks the finest level ≤ maxLevel at which the cells of
// both, over all levels, number at most maxCells.
func assemble(rows []cellRow, maxLevel, maxCells int, vertices bool) (level int, parts [2]pyramid) {
	split := sortRows(rows)
	classes := [2][]cellRow{rows[:split], rows[split:]}
	var all, fit [2][]int
	for k := range classes {
		all[k], fit[k] = countCells(classes[k], maxLevel)
	}
	level = maxLevel
	for ; level > 0; level-- {
		total := 0
		for k := range classes {
			for l := 0; l <= level; l++ {
				total += all[k][l]
				if l < level {
					total += fit[k][l]
				}
			}
		}
		if total <= maxCells {
			break
		}
	}
	for k := range classes {
		parts[k] = buildPyramid(classes[k], all[k], fit[k], level, maxLevel, vertices)
	}
	return level, parts
}

// sortRows puts the light rows before the heavy ones, each by Morton code,
// and returns where the heavy ones start. It sorts an index — heavy<<63 |
// Morton code<<31 | row (a code at level ≤ 16 has 32 bits; a build has
// under 2^31 rows) — and then moves each row once, following the
// permutation's cycles in place: every later pass over the rows is
// sequential.
func sortRows(rows []cellRow) (split int) {
	const index = 1<<31 - 1
	order := make([]uint64, len(rows))
	for i := range rows {
		order[i] = rows[i].key<<31 | uint64(i)
		if rows[i].heavy {
			order[i] |= 1 << 63
		} else {
			split++
		}
	}
	slices.Sort(order)
	for i := range order {
		if int(order[i]&index) == i {
			continue // in place, or placed by an earlier cycle
		}
		held := rows[i]
		for j := i; ; {
			from := int(order[j] & index)
			order[j] = order[j]&^index | uint64(j)
			if from == i {
				rows[j] = held
				break
			}
			rows[j] = rows[from]
			j = from
		}
	}
	return split
}

// countCells counts, for each level, the cells of all[level] and of
// fit[level] that rows (by Morton code) fill.
func countCells(rows []cellRow, maxLevel int) (all, fit []int) {
	all, fit = make([]int, maxLevel+1), make([]int, maxLevel+1)
	for l := 0; l <= maxLevel; l++ {
		shift := 2 * uint(maxLevel-l)
		first, last := true, uint64(0)
		for i := range rows {
			if rows[i].f < l {
				continue
			}
			if p := rows[i].key >> shift; first || p != last {
				all[l]++
				first, last = false, p
			}
		}
	}
	for i := range rows {
		fit[rows[i].f]++
	}
	return all, fit
}

// buildPyramid lays out the grids of levels 0..level from rows (by Morton
// code); allCells and fitCells count each level's cells.
func buildPyramid(rows []cellRow, allCells, fitCells []int, level, maxLevel int, vertices bool) pyramid {
	p := pyramid{all: make([]grid, level+1), fit: make([]grid, level)}
	for l := 0; l <= level; l++ {
		p.all[l] = buildGrid(rows, allCells[l], l, maxLevel, vertices, func(r *cellRow) bool { return r.f >= l })
		if l == level {
			break
		}
		if fitCells[l] == 0 {
			p.fit[l] = emptyGrid(l)
			continue
		}
		p.fit[l] = buildGrid(rows, fitCells[l], l, maxLevel, vertices, func(r *cellRow) bool { return r.f == l })
		p.fitMask |= 1 << l
	}
	return p
}

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
		g.keys[k] = uint32(c.key)
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
	return g
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

// morton interleaves a cell's column (even bits) and row (odd bits).
func morton(i, j uint32) uint64 { return spread(i) | spread(j)<<1 }

// unmorton splits a Morton code into column and row.
func unmorton(m uint64) (i, j uint32) { return compact(m), compact(m >> 1) }

func spread(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	v = (v | v<<8) & 0x00ff00ff00ff00ff
	v = (v | v<<4) & 0x0f0f0f0f0f0f0f0f
	v = (v | v<<2) & 0x3333333333333333
	v = (v | v<<1) & 0x5555555555555555
	return v
}

func compact(v uint64) uint32 {
	v &= 0x5555555555555555
	v = (v | v>>1) & 0x3333333333333333
	v = (v | v>>2) & 0x0f0f0f0f0f0f0f0f
	v = (v | v>>4) & 0x00ff00ff00ff00ff
	v = (v | v>>8) & 0x0000ffff0000ffff
	v = (v | v>>16) & 0x00000000ffffffff
	return uint32(v)
}
