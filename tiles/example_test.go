package tiles_test

import (
	"fmt"

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
