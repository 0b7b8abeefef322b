package density

import "math/bits"

// pyramid is the grids of one class of features (light or heavy). all[ℓ]
// holds every feature whose box fits a level-ℓ cell, by the cell of its box
// centre, for ℓ = 0..level: a query reads the one level where it spans a few
// rows. fit[ℓ] holds the features whose box fits a level-ℓ cell but no
// level-ℓ+1 cell, for ℓ < level: a query at level q also reads fit[ℓ] for
// every ℓ < q, the features too large for all[q] to place.
type pyramid struct {
	all, fit []grid
	fitMask  uint64 // bit ℓ is set when fit[ℓ] has cells
}

// empty reports whether the pyramid holds no feature.
func (p *pyramid) empty() bool { return len(p.all) == 0 || p.all[0].cells() == 0 }

// addRect adds the estimate of rectangle r, read at level q.
func (p *pyramid) addRect(r rect, q int, acc *sum) {
	p.all[q].addRect(r, acc)
	for mask := p.fitMask & (1<<q - 1); mask != 0; mask &= mask - 1 {
		p.fit[bits.TrailingZeros64(mask)].addRect(r, acc)
	}
}

// addCircle adds the estimate of circle c, read at level q.
func (p *pyramid) addCircle(c *circle, q int, acc *sum) {
	c.add(&p.all[q], false, acc)
	for mask := p.fitMask & (1<<q - 1); mask != 0; mask &= mask - 1 {
		c.add(&p.fit[bits.TrailingZeros64(mask)], true, acc)
	}
}

// cells and bytes are the pyramid's non-empty cells and their memory.
func (p *pyramid) cells() (n int) {
	for _, gs := range [][]grid{p.all, p.fit} {
		for i := range gs {
			n += gs[i].cells()
		}
	}
	return n
}

func (p *pyramid) bytes() (n int) {
	for _, gs := range [][]grid{p.all, p.fit} {
		for i := range gs {
			n += gs[i].bytes()
		}
	}
	return n
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
