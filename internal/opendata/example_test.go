package opendata_test

import (
	"fmt"

	"github.com/geotoll/geotoll/internal/opendata"
)

// Ten points over two cities: each gets its share of the population.
func ExampleNewPoints() {
	cities := []opendata.City{
		{Name: "Big", Country: "AA", Population: 4_000_000, Lon: 10, Lat: 50},
		{Name: "Small", Country: "BB", Population: 1_000_000, Lon: -70, Lat: -30},
	}
	count := map[string]int{}
	g := opendata.NewPoints(cities, 10, 1)
	for g.Next() {
		count[g.Point().City]++
	}
	fmt.Println(count)
	// Output: map[Big:8 Small:2]
}
