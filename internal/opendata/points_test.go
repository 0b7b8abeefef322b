package opendata

import (
	"math"
	"testing"
)

var testCities = []City{
	{ID: 1, Name: "Big", Country: "AA", Population: 8_000_000, Lon: 10, Lat: 50},
	{ID: 2, Name: "Mid", Country: "AA", Population: 1_000_000, Lon: 20, Lat: -30},
	{ID: 3, Name: "Town", Country: "BB", Population: 0, Lon: 179.99, Lat: 0}, // unknown: counts as 1,000
	{ID: 4, Name: "Polar", Country: "CC", Population: 1_000_000, Lon: -40, Lat: 89.9},
}

func collect(cities []City, n int, seed uint64) []Point {
	g := NewPoints(cities, n, seed)
	var out []Point
	for g.Next() {
		out = append(out, g.Point())
	}
	return out
}

func TestPointsDeterministic(t *testing.T) {
	a, b := collect(testCities, 5000, 7), collect(testCities, 5000, 7)
	if len(a) != 5000 || len(b) != 5000 {
		t.Fatalf("got %d and %d points, want 5000", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("point %d differs between two runs with the same seed: %+v %+v", i, a[i], b[i])
		}
	}
	c := collect(testCities, 5000, 8)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("seeds 7 and 8 gave the same points")
	}
}

func TestPointsSharesFollowPopulation(t *testing.T) {
	const n = 100_000
	pts := collect(testCities, n, 1)
	count := map[string]int{}
	for i, p := range pts {
		if p.ID != int64(i+1) {
			t.Fatalf("point %d has id %d: ids must be 1..n in order", i, p.ID)
		}
		if math.Abs(p.Lon) > 180 || math.Abs(p.Lat) > 85 {
			t.Fatalf("point out of bounds: %+v", p)
		}
		if p.Rank < 1 || p.Rank > 100 {
			t.Fatalf("rank %d out of 1..100", p.Rank)
		}
		count[p.City]++
	}
	total := 8_000_000.0 + 1_000_000 + 1_000 + 1_000_000
	for _, c := range testCities {
		share := n * float64(max(c.Population, minPopulation)) / total
		// Systematic sampling: the floor or the ceiling of the share.
		if got := float64(count[c.Name]); got < math.Floor(share) || got > math.Ceil(share) {
			t.Errorf("%s: %v points, want %.2f (±1)", c.Name, got, share)
		}
	}
}

func TestPointsClusterAroundTheirCity(t *testing.T) {
	near, far := 0, 0
	for _, p := range collect(testCities[:1], 20_000, 3) {
		// The 8M city's core is ~8 km: 0.1° of latitude is ~11 km.
		switch d := math.Hypot((p.Lon-10)*math.Cos(50*math.Pi/180), p.Lat-50); {
		case d < 0.1:
			near++
		case d > 1:
			far++
		}
	}
	if far == 0 || near < 5*far {
		t.Errorf("core %d vs edge %d: not a dense core with sparse edges", near, far)
	}
}

func TestPointsWrapTheAntimeridian(t *testing.T) {
	east, west := 0, 0
	for _, p := range collect(testCities[2:3], 2000, 1) {
		if p.Lon > 170 {
			east++
		} else if p.Lon < -170 {
			west++
		}
	}
	if east == 0 || west == 0 || east+west != 2000 {
		t.Errorf("a town at 179.99°: %d points east and %d west of the antimeridian", east, west)
	}
}

func TestPointsEmpty(t *testing.T) {
	if pts := collect(nil, 10, 1); len(pts) != 0 {
		t.Errorf("no cities gave %d points", len(pts))
	}
	if pts := collect(testCities, 0, 1); len(pts) != 0 {
		t.Errorf("n=0 gave %d points", len(pts))
	}
}
