package tiles

import (
	"text/template"

	"github.com/paulmach/orb/maptile"
)

// The query of point layers: sql/tile_points.sql.
var pointsTemplate = template.Must(template.New("tile_points.sql").Parse(mustQueryText("tile_points.sql")))

// pointArgs appends the point query's parameters $10..$18 to the common
// ones ($1..$9), widening the buffer to whole cells so that every cell the
// query keeps is read whole: in metres ($7), what the query reads, and in
// tile units ($6), what ST_AsMVTGeom clips to. Both must widen together:
// a cluster of a kept cell beyond the configured buffer would otherwise be
// read and counted, then clipped away, and the point_counts of the tile
// would no longer sum to the rows of its cells.
func (l *Layer) pointArgs(args []any, src Source, t maptile.Tile) []any {
	g := src.Generalization
	x0, x1, y0, y1 := g.CellRange(t, l.Extent, l.Buffer)
	bufferCells := (x1 - x0 + 1 - int64(g.CellsPerTile)) / 2
	args[6] = max(args[6].(float64), float64(bufferCells)*g.CellMetres)
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
