package opendata

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Point is one generated point of the points layer.
type Point struct {
	ID         int64
	Name       string
	Kind       string
	City       string
	Country    string
	Rank       int // 1..100, a priority column for generalisation
	Population int // of the point's city
	Lon, Lat   float64
}

// minPopulation is the weight of a city whose population is unknown: the
// package lists places of at least 1,000 inhabitants.
const minPopulation = 1000

var kinds = []string{"cafe", "shop", "school", "depot", "clinic", "park", "station", "office"}

// Points generates n points around cities, deterministically from seed.
// Each city gets its share of n in proportion to its population
// (systematic sampling along the cumulative population, so a city's count
// is the floor or the ceiling of its share, and towns with a share below
// one point get one or none). Around its city a point falls in the dense
// core (60 %), the suburbs (30 %) or the sparse edge (10 %), with normal
// offsets whose spread grows with the city's population: a town of 1,000
// has a core of ~200 m, a city of 20 million one of ~6 km and an edge of
// ~70 km.
type Points struct {
	cities []City
	n      int
	rng    *rand.Rand
	step   float64 // population per point
	next   float64 // cumulative population of the next point
	cum    float64 // cumulative population up to and including cities[ci]
	ci     int     // current city
	inCity int     // points so far in the current city
	cur    Point
}

// NewPoints returns the generator of n points over cities (which must not
// change while it runs).
func NewPoints(cities []City, n int, seed uint64) *Points {
	var total float64
	for _, c := range cities {
		total += float64(max(c.Population, minPopulation))
	}
	p := &Points{cities: cities, n: n, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ci: -1}
	if n > 0 && total > 0 {
		p.step = total / float64(n)
		p.next = p.rng.Float64() * p.step
	}
	return p
}

// Next advances to the next point; false when all n are out.
func (p *Points) Next() bool {
	if p.cur.ID >= int64(p.n) || p.step == 0 {
		return false
	}
	for p.next >= p.cum {
		p.ci++
		if p.ci >= len(p.cities) { // rounding at the very end
			p.ci = len(p.cities) - 1
			break
		}
		p.cum += float64(max(p.cities[p.ci].Population, minPopulation))
		p.inCity = 0
	}
	p.next += p.step
	p.inCity++
	p.cur = p.around(p.cities[p.ci], p.cur.ID+1)
	return true
}

// Point is the current point (after Next returned true).
func (p *Points) Point() Point { return p.cur }

func (p *Points) around(c City, id int64) Point {
	pop := float64(max(c.Population, minPopulation))
	coreKM := 0.4 * math.Pow(pop/1e4, 0.35)
	sigma := coreKM
	switch u := p.rng.Float64(); {
	case u > 0.9:
		sigma *= 12
	case u > 0.6:
		sigma *= 4
	}
	const kmPerDegree = 111.32
	cosLat := math.Max(math.Cos(c.Lat*math.Pi/180), 0.05)
	lat := math.Max(-85, math.Min(85, c.Lat+p.rng.NormFloat64()*sigma/kmPerDegree))
	lon := math.Remainder(c.Lon+p.rng.NormFloat64()*sigma/kmPerDegree/cosLat, 360) // within ±180
	k := kinds[p.rng.IntN(len(kinds))]
	return Point{
		ID: id, Name: fmt.Sprintf("%s %s %d", c.Name, k, p.inCity), Kind: k,
		City: c.Name, Country: c.Country, Rank: 1 + p.rng.IntN(100), Population: c.Population,
		Lon: lon, Lat: lat,
	}
}
