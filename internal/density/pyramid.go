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
