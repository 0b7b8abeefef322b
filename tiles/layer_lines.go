package tiles

import (
	"text/template"
)

// The query of line, polygon and mixed layers: sql/tile_lines_polygons.sql.
var linesTemplate = template.Must(template.New("tile_lines_polygons.sql").Parse(mustQueryText("tile_lines_polygons.sql")))

// lineArgs appends the line and polygon query's parameters $10..$16 to the
// common ones ($1..$9). The smallest size thins where the zoom is
// generalised; the reduction levels scale the layer's tolerance in tile
// units, even where it is not.
func (l *Layer) lineArgs(args []any, src Source) []any {
	own := l.Generalize.At(src.Generalization.Zoom, l.Extent)
	generalised, minMetres := 0, 0.0
	if src.Generalization.On {
		generalised, minMetres = 1, src.Generalization.MinSizeMetres
	}
	budget := BudgetFor(src.Kind, src.Generalization, l.MaxTileBytes)
	return append(args, own.ToleranceUnits, minMetres, generalised, budget.Bytes, budget.LastLevel,
		worldHalf, own.CellMetres)
}
