package density

import (
	"cmp"
	"slices"
)

// Giants: heavy features whose bounding box is wider or taller than a cell
// of level giantLevel+1 (about 1/128 of the world's width: 313 km at the
// equator) are kept one by one, box and vertices, instead of in the grids.
// A country or a coastline is read whole by every query that meets its box,
// however small the query: a z13 tile inside Canada reads all of Canada's
// vertices. The grids average a cell's features (their centres spread over
// the cell's content box, their mean extent), which is right for many small
// features and wrong by orders of magnitude for a few huge ones sharing a
// cell with small ones. Real data has few giants (250 countries have about
// 150), so an exact test of each costs less than the grids; past maxGiants
// the smallest stay in the grids.
const (
	giantLevel = 6
	maxGiants  = 256
)

// giant is one feature (or, rarely, the few whose box centres share a
// cell of the finest level) kept whole: its box in normalised Web Mercator.
type giant struct {
	r    rect
	n, v float64
}

// takeGiants moves the giants out of rows (see giantLevel; the build
// query gives each its own row) and returns them and the rows left, the
// giants past maxGiants merged back into the rows of their cells.
func takeGiants(rows []cellRow) ([]giant, []cellRow) {
	var idx []int
	for i := range rows {
		if rows[i].giant {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, rows
	}
	// The largest boxes first, then the most vertices.
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(rows[a].f, rows[b].f), cmp.Compare(rows[b].v, rows[a].v))
	})
	taken := make(map[int]bool, len(idx))
	giants := make([]giant, 0, min(len(idx), maxGiants))
	for _, i := range idx[:min(len(idx), maxGiants)] {
		c := &rows[i]
		hw, hh := c.sdx/c.n/2, c.sdy/c.n/2
		giants = append(giants, giant{r: rect{c.x0 - hw, c.y0 - hh, c.x1 + hw, c.y1 + hh}, n: c.n, v: c.v})
		taken[i] = true
	}
	type cellKey struct {
		heavy bool
		f     int
		key   uint64
	}
	at := map[cellKey]int{}
	kept := rows[:0:0]
	for i := range rows {
		if taken[i] {
			continue
		}
		c := rows[i]
		c.giant = false
		k := cellKey{c.heavy, c.f, c.key}
		if j, ok := at[k]; ok {
			kept[j].merge(&c)
			continue
		}
		at[k] = len(kept)
		kept = append(kept, c)
	}
	return giants, kept
}

// addGiants adds the giants whose box meets a or b (normalised, x0 ≤ x1
// and y0 ≤ y1: the two parts of an area across the antimeridian, or one
// area twice), each whole and once — as the database reads a feature once
// however many parts of its filter it meets.
func addGiants(giants []giant, a, b rect, acc *sum) {
	for i := range giants {
		g := &giants[i]
		if meets(g.r, a) || meets(g.r, b) {
			acc.n += g.n
			acc.v += g.v
		}
	}
}

// addGiants adds the giants whose box meets the circle's bounding box, each
// whole and once, also across the antimeridian.
func (c *circle) addGiants(giants []giant, acc *sum) {
	hw := c.box()
	main := rect{c.cx - hw, c.y0, c.cx + hw, c.y1}
	wrapped := main // the part beyond ±180°, moved to the other side
	switch {
	case hw >= 0.5:
		main.x0, main.x1 = 0, 1
	case main.x0 < 0:
		wrapped.x0, wrapped.x1 = main.x0+1, 1
	case main.x1 > 1:
		wrapped.x0, wrapped.x1 = 0, main.x1-1
	}
	addGiants(giants, main, wrapped, acc)
}

func meets(a, b rect) bool { return a.x0 <= b.x1 && b.x0 <= a.x1 && a.y0 <= b.y1 && b.y0 <= a.y1 }
