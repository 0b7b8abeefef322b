package tiles

import (
	"text/template"

	"github.com/paulmach/orb/maptile"
)

// The query of point layers: sql/tile_points.sql.
var pointsTemplate = template.Must(template.New("tile_points.sql").Parse(mustQueryText("tile_points.sql")))

// pointArgs appends the point query's parameters $10..$18 to the common
// ones ($1..$9) and widens the buffer in tile units ($6), what
// ST_AsMVTGeom clips to, to whole cells, as the buffer in metres ($7),
// what the query reads, already is (bufferMetres): every cell the query
// keeps is then read whole. Both must widen together: a cluster of a kept
// cell beyond the configured buffer would otherwise be read and counted,
// then clipped away, and the point_counts of the tile would no longer sum
// to the rows of its cells.
func (l *Layer) pointArgs(args []any, src Source, t maptile.Tile) []any {
	g := src.Generalization
	x0, x1, y0, y1 := g.CellRange(t, l.Extent, l.Buffer)
	bufferCells := g.BufferCells(l.Extent, l.Buffer)
	// Units of the buffer cells, rounded up: a cell is extent/CellsPerTile
	// units wide, not always a whole number of them.
	cells := int64(g.CellsPerTile)
	args[5] = max(args[5].(int), int((bufferCells*int64(l.Extent)+cells-1)/cells))
	budget := BudgetFor(KindPoint, g, l.MaxTileBytes)
	clustered := 0
	if src.Clustered {
		clustered = 1
	}
	return append(args, worldHalf, g.CellMetres, x0, x1, y0, y1, budget.Bytes, budget.LastLevel, clustered)
}

// BufferMetres is how far beyond tile t's envelope the tile's query
// reads, in metres: its $7, by which its filter expands the envelope. It
// is the layer's buffer, widened for points to whole cluster cells: under
// a coarse grid (cluster_px 64, cells an eighth of the tile wide) a tile
// reads half as many rows again as under the default buffer of 64 units.
// Estimating a tile's read over any smaller area sells it for less than
// it costs.
func (l *Layer) BufferMetres(t maptile.Tile) float64 {
	return l.bufferMetres(l.plan().zoom(t.Z).source, t)
}

// bufferMetres is BufferMetres for a tile whose query reads src.
func (l *Layer) bufferMetres(src Source, t maptile.Tile) float64 {
	m := TileWidth(t.Z) * float64(l.Buffer) / float64(l.Extent)
	if src.Kind == KindPoint {
		m = max(m, float64(src.Generalization.BufferCells(l.Extent, l.Buffer))*src.Generalization.CellMetres)
	}
	return m
}
