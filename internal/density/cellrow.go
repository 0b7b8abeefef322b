package density

import "slices"

// cellRow is one row of the build query: the features whose boxes fit a
// cell of level f (and no cell of level f+1), grouped by the cell that holds
// their box centre. Assembly reuses it for the cells of every level.
type cellRow struct {
	key            uint64 // Morton code of the cell's first descendant at the finest level; row-major once assembled
	heavy          bool   // the class of geometries stored in at least Options.HeavyBytes
	giant          bool   // a giant's own row (see giantLevel), not yet merged into its cell
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
