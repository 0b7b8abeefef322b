package tiles

import (
	"text/template"
)

// The query of line, polygon and mixed layers: sql/tile_lines_polygons.sql.
var linesTemplate = template.Must(template.New("tile_lines_polygons.sql").Parse(mustQueryText("tile_lines_polygons.sql")))

// lineArgs appends the line and polygon query's parameters $10..$17 to the
// common ones ($1..$9). Level 0 simplifies the layer's own table by the
// zoom's tolerance in metres, and an overview (simplified when it was
// built) not again; the reduction levels scale the layer's tolerance in
// tile units, even where the zoom is not generalised.
func (l *Layer) lineArgs(args []any, src Source) []any {
	own := l.Generalize.At(src.Generalization.Zoom, l.Extent)
	generalised, minMetres, tolMetres := 0, 0.0, 0.0
	if src.Generalization.On {
		generalised, minMetres = 1, src.Generalization.MinSizeMetres
		if src.Builder == "" {
			tolMetres = src.Generalization.ToleranceMetres
		}
	}
	budget := BudgetFor(src.Kind, src.Generalization, l.MaxTileBytes)
	return append(args, own.ToleranceUnits, minMetres, generalised, budget.Bytes, budget.LastLevel,
		worldHalf, own.CellMetres, tolMetres)
}
