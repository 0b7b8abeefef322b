package tiles

import (
	"text/template"
)

// The query of line, polygon and mixed layers: sql/tile_lines_polygons.sql.
var linesTemplate = template.Must(template.New("tile_lines_polygons.sql").Parse(mustQueryText("tile_lines_polygons.sql")))

// lineArgs appends the line and polygon query's parameters $10..$17 to the
// common ones ($1..$9). The tolerance and smallest size in tile units are
// the layer's own at the zoom (an overview was simplified in metres when
// it was built; the query then simplifies the clipped features in tile
// units); the byte budget's levels scale them even where the zoom is not
// generalised.
func (l *Layer) lineArgs(args []any, src Source) []any {
	own := l.Generalize.At(src.Generalization.Zoom, l.Extent)
	generalised, minMetres := 0, 0.0
	if src.Generalization.On {
		generalised, minMetres = 1, src.Generalization.MinSizeMetres
	}
	budget := BudgetFor(src.Kind, src.Generalization, l.MaxTileBytes)
	return append(args, own.ToleranceUnits, own.MinSizeUnits, minMetres, generalised, budget.Bytes, budget.LastLevel,
		worldHalf, own.CellMetres)
}
