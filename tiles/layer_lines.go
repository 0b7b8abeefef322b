package tiles

import (
	"text/template"
)

// The query of line, polygon and mixed layers: sql/tile_lines_polygons.sql.
var linesTemplate = template.Must(template.New("tile_lines_polygons.sql").Parse(mustQueryText("tile_lines_polygons.sql")))

// lineArgs appends the line and polygon query's parameters $10..$13 to the
// common ones ($1..$9): the reduction levels scale the layer's tolerance
// in tile units, even where the zoom is not generalised.
func (l *Layer) lineArgs(args []any, src Source) []any {
	own := l.Generalize.At(src.Generalization.Zoom, l.Extent)
	generalised := 0
	if src.Generalization.On {
		generalised = 1
	}
	budget := BudgetFor(src.Kind, src.Generalization, l.MaxTileBytes)
	return append(args, own.ToleranceUnits, generalised, budget.Bytes, budget.LastLevel)
}
