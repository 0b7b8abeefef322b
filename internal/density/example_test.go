package density_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
	"github.com/paulmach/orb/project"

	"github.com/geotoll/geotoll/internal/density"
)

// tileEnvelope is tile t's EPSG:3857 envelope expanded by its buffer (64 of
// 4096 tile units), the rectangle a tile query's && reads.
func tileEnvelope(t maptile.Tile) orb.Bound {
	b := project.Bound(t.Bound(), project.WGS84.ToMercator)
	return b.Pad((b.Max[0] - b.Min[0]) * 64 / 4096)
}

// A model answers how much of a relation an area reads, in memory. This one
// is built from features held in memory; Build and Refresher build it from
// the database.
func Example() {
	rel := density.Relation{
		Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom",
		SRID: density.SRIDLonLat, Kind: density.Point,
	}
	// 1000 points over Berlin's centre (828 of them in the z12 tile below,
	// buffer included), 10 in Paris.
	var features []density.Feature
	for i := 0; i < 1000; i++ {
		p := orb.Point{13.35 + float64(i%40)*0.0025, 52.48 + float64(i/40)*0.0016}
		features = append(features, density.Feature{Bound: orb.Bound{Min: p, Max: p}})
	}
	for i := 0; i < 10; i++ {
		p := orb.Point{2.35 + float64(i)*0.001, 48.85}
		features = append(features, density.Feature{Bound: orb.Bound{Min: p, Max: p}})
	}
	m, err := density.NewModel(rel, features, density.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	berlin := maptile.At(orb.Point{13.40, 52.50}, 12)
	fmt.Printf("z%d tile over Berlin: %.0f features\n", berlin.Z, m.Rect(tileEnvelope(berlin)).Features)
	ocean := maptile.New(0, 2, 2) // the South Pacific
	fmt.Printf("z2 tile of open ocean: %.0f features\n", m.Rect(tileEnvelope(ocean)).Features)
	europe := orb.Bound{Min: orb.Point{-10, 35}, Max: orb.Point{30, 60}}
	fmt.Printf("bbox over Europe: %.0f features\n", m.BBox(europe).Features)
	fmt.Printf("10 km around Paris: %.0f features\n", m.Circle(orb.Point{2.35, 48.85}, 10_000).Features)
	s := m.Summary()
	fmt.Printf("%.0f rows in %d cells, finest level %d\n", s.Rows, s.Cells, s.Level)
	// Output:
	// z12 tile over Berlin: 828 features
	// z2 tile of open ocean: 0 features
	// bbox over Europe: 1010 features
	// 10 km around Paris: 10 features
	// 1010 rows in 380 cells, finest level 16
}

// A Refresher builds a relation's model in the background and swaps each new
// one in; until the first build succeeds Model is nil and callers price
// without it.
func ExampleRefresher() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://geotoll_reader@localhost/geotoll") // the read-only role
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	r, err := density.NewRefresher(pool, density.Relation{
		Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom_3857",
		SRID: density.SRIDWebMercator, Kind: density.Point,
	}, density.Options{Interval: 10 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	go r.Run(ctx)

	tile := maptile.New(8800, 5373, 14)
	if m := r.Model(); m != nil {
		fmt.Printf("%.0f features\n", m.Rect(tileEnvelope(tile)).Features)
	} else {
		fmt.Printf("no model yet: %+v\n", r.Status())
	}
}
