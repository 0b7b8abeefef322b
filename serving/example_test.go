package serving_test

import (
	"fmt"

	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// The overviews `geotoll prepare` keeps for a point layer: one table per
// zoom of its band, deepest first (each zoom is built from the one below),
// holding the layer's columns under names of its own.
func ExampleOverview_Targets() {
	cat, err := tiles.NewCatalog([]tiles.Layer{{
		Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857",
		GeometryKind: tiles.KindPoint, Properties: []string{"name"}, OrderBy: []string{"rank"},
		Overviews: tiles.Overviews{MinZoom: 2, MaxZoom: 4},
	}})
	if err != nil {
		panic(err)
	}
	for _, t := range (serving.Overview{}).Targets(cat.Layer("places"), tiles.KindPoint) {
		fmt.Printf("%s serves z%d-%d: %d cells per tile of %.0f m, columns %v holding %v\n",
			t.Relation, t.ZoomMin, t.ZoomMax, t.Params.CellsPerTile, t.Params.CellMetres, t.Columns, t.Params.SourceColumns)
	}
	// Output:
	// places_ov_z4 serves z4-4: 64 cells per tile of 39136 m, columns [c0 c1 c2] holding [id name rank]
	// places_ov_z3 serves z3-3: 64 cells per tile of 78272 m, columns [c0 c1 c2] holding [id name rank]
	// places_ov_z2 serves z2-2: 64 cells per tile of 156543 m, columns [c0 c1 c2] holding [id name rank]
}
