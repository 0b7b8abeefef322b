package tiles_test

import (
	"fmt"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

func ExampleParseTile() {
	// The path segments of GET /tiles/places/14/8802/5373.mvt.
	y, err := tiles.SplitFormat("5373.mvt")
	if err != nil {
		panic(err)
	}
	t, err := tiles.ParseTile("14", "8802", y)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Z, t.X, t.Y)

	// Out of range: a 422 that names the parameter.
	_, err = tiles.ParseTile("23", "0", "0")
	p := problem.From(err)
	fmt.Println(problem.Status(p.Code), p.Param)

	// Output:
	// 14 8802 5373
	// 422 z
}

func ExampleEnvelope() {
	t, err := tiles.ParseTile("1", "1", "0") // the north-east quarter of the world
	if err != nil {
		panic(err)
	}
	env := tiles.Envelope(t)
	fmt.Printf("x %.3f .. %.3f\n", env.Min[0], env.Max[0])
	fmt.Printf("y %.3f .. %.3f\n", env.Min[1], env.Max[1])

	t, _ = tiles.ParseTile("14", "8802", "5373") // Berlin-Mitte
	env = tiles.Envelope(t)
	fmt.Printf("%.3f m wide\n", env.Max[0]-env.Min[0])

	// Output:
	// x 0.000 .. 20037508.343
	// y 0.000 .. 20037508.343
	// 2445.985 m wide
}

// What a tile of a layer reads at each zoom. Without serving storage (no
// Catalog.Refresh, or before `geotoll prepare` ran) every zoom reads the
// layer's table; the points are clustered up to Generalize.MaxZoom.
func ExampleLayer_Source() {
	cat, err := tiles.NewCatalog([]tiles.Layer{{
		Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", GeometryKind: tiles.KindPoint,
	}})
	if err != nil {
		panic(err)
	}
	l := cat.Layer("places")
	for _, z := range []maptile.Zoom{2, 12, 13} {
		s := l.Source(z)
		fmt.Printf("z%d: %s.%s (%s, SRID %d), clustered %v, cells of %.1f m\n", z,
			s.Relation.Sanitize(), s.GeometryColumn, s.Kind, s.SRID, s.Clustered, s.Generalization.CellMetres)
	}
	// Output:
	// z2: "geotoll"."places".geom_3857 (point, SRID 3857), clustered true, cells of 156543.0 m
	// z12: "geotoll"."places".geom_3857 (point, SRID 3857), clustered true, cells of 152.9 m
	// z13: "geotoll"."places".geom_3857 (point, SRID 3857), clustered false, cells of 76.4 m
}
