// Package demo generates geotoll's deterministic synthetic demo data and
// loads it into the migrated schema: points clustered around real cities
// (dense cores and sparse edges, so tile cost varies by zoom and by place),
// a polygon layer of districts, and a few hundred geofences.
//
// Nothing is downloaded: the city list is compiled in and every coordinate
// comes from a seeded PCG generator, so the same seed gives the same data.
package demo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkt"
)

// City is a real city location with a relative weight (share of points).
type City struct {
	Name     string
	Lon, Lat float64
	Weight   float64
}

// Cities are the cluster centres. Coordinates are the cities' centres.
var Cities = []City{
	{"Berlin", 13.405, 52.52, 3}, {"London", -0.1276, 51.5072, 4}, {"Paris", 2.3522, 48.8566, 4},
	{"Madrid", -3.7038, 40.4168, 2}, {"Rome", 12.4964, 41.9028, 2}, {"Amsterdam", 4.9041, 52.3676, 1.5},
	{"Vienna", 16.3738, 48.2082, 1.5}, {"Warsaw", 21.0122, 52.2297, 1.5}, {"Stockholm", 18.0686, 59.3293, 1},
	{"Oslo", 10.7522, 59.9139, 1}, {"Helsinki", 24.9384, 60.1699, 1}, {"Tromsø", 18.9553, 69.6492, 0.3},
	{"Istanbul", 28.9784, 41.0082, 3}, {"Cairo", 31.2357, 30.0444, 3}, {"Lagos", 3.3792, 6.5244, 3},
	{"Nairobi", 36.8219, -1.2921, 1.5}, {"Johannesburg", 28.0473, -26.2041, 1.5}, {"Dubai", 55.2708, 25.2048, 1.5},
	{"Mumbai", 72.8777, 19.076, 4}, {"Delhi", 77.209, 28.6139, 4}, {"Bangalore", 77.5946, 12.9716, 2},
	{"Singapore", 103.8198, 1.3521, 2}, {"Jakarta", 106.8456, -6.2088, 3}, {"Bangkok", 100.5018, 13.7563, 2.5},
	{"Shanghai", 121.4737, 31.2304, 4}, {"Beijing", 116.4074, 39.9042, 3.5}, {"Tokyo", 139.6503, 35.6762, 4},
	{"Seoul", 126.978, 37.5665, 3}, {"Sydney", 151.2093, -33.8688, 2}, {"Melbourne", 144.9631, -37.8136, 1.5},
	{"Auckland", 174.7633, -36.8485, 0.8}, {"New York", -74.006, 40.7128, 4}, {"Los Angeles", -118.2437, 34.0522, 3},
	{"Chicago", -87.6298, 41.8781, 2}, {"Toronto", -79.3832, 43.6532, 2}, {"Mexico City", -99.1332, 19.4326, 3},
	{"Bogotá", -74.0721, 4.711, 2}, {"Lima", -77.0428, -12.0464, 2}, {"São Paulo", -46.6333, -23.5505, 4},
	{"Buenos Aires", -58.3816, -34.6037, 2.5}, {"Anchorage", -149.9003, 61.2181, 0.3}, {"Reykjavík", -21.9426, 64.1466, 0.3},
	{"Suva", 178.4419, -18.1416, 0.2}, {"Quito", -78.4678, -0.1807, 0.8},
}

// Options size the data set.
type Options struct {
	Seed      uint64 // same seed, same data
	Points    int    // clustered points, default 240000
	Districts int    // grid cells per side around each city, default 6 (36 per city)
	Fences    int    // geofences, default 300
}

// Validate refuses negative sizes (0 takes the default).
func (o Options) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		n    int
	}{{"points", o.Points}, {"districts", o.Districts}, {"fences", o.Fences}} {
		if f.n < 0 {
			errs = append(errs, fmt.Errorf("demo: %s %d must not be negative", f.name, f.n))
		}
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Points == 0 {
		o.Points = 240000
	}
	if o.Districts == 0 {
		o.Districts = 6
	}
	if o.Fences == 0 {
		o.Fences = 300
	}
	return o
}

// Place is one point of the places layer.
type Place struct {
	ID   int64
	Name string
	Kind string
	City string
	Rank int
	Lon  float64
	Lat  float64
}

// Polygon is one district or geofence.
type Polygon struct {
	ID         int64
	Name       string
	City       string
	Kind       string
	Population int
	Geom       orb.Polygon
}

// Data is a whole generated data set.
type Data struct {
	Places    []Place
	Districts []Polygon
	Fences    []Polygon
}

var kinds = []string{"cafe", "shop", "school", "depot", "clinic", "park", "station", "office"}

// Generate builds the data set for opts; it is a pure function of opts.
// It panics on options Validate refuses.
func Generate(opts Options) Data {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	var total float64
	for _, c := range Cities {
		total += c.Weight
	}
	d := Data{Places: make([]Place, 0, opts.Points)}
	id := int64(0)
	for ci, c := range Cities {
		n := int(math.Round(float64(opts.Points) * c.Weight / total))
		if ci == len(Cities)-1 {
			n = opts.Points - len(d.Places) // exact total
		}
		cosLat := math.Cos(c.Lat * math.Pi / 180)
		for i := 0; i < n; i++ {
			// 60% dense core (σ≈2 km), 30% suburbs (σ≈10 km), 10% sparse edge (σ≈50 km).
			sigma := 0.02
			switch u := rng.Float64(); {
			case u > 0.9:
				sigma = 0.5
			case u > 0.6:
				sigma = 0.1
			}
			lat := clamp(c.Lat+rng.NormFloat64()*sigma, -85, 85)
			lon := wrapLon(c.Lon + rng.NormFloat64()*sigma/cosLat)
			id++
			k := kinds[rng.IntN(len(kinds))]
			d.Places = append(d.Places, Place{
				ID: id, Name: fmt.Sprintf("%s %s %d", c.Name, k, i+1), Kind: k, City: c.Name,
				Rank: 1 + rng.IntN(100), Lon: lon, Lat: lat,
			})
		}
	}
	// Districts: an n×n grid of ~3 km cells centred on each city.
	id = 0
	const cell = 0.03 // degrees of latitude
	for _, c := range Cities {
		cosLat := math.Cos(c.Lat * math.Pi / 180)
		w := cell / cosLat
		half := float64(opts.Districts) / 2
		for i := 0; i < opts.Districts; i++ {
			for j := 0; j < opts.Districts; j++ {
				minx := c.Lon + (float64(i)-half)*w
				miny := c.Lat + (float64(j)-half)*cell
				id++
				d.Districts = append(d.Districts, Polygon{
					ID: id, Name: fmt.Sprintf("%s %c%d", c.Name, 'A'+rune(i), j+1), City: c.Name,
					Population: 1000 + rng.IntN(50000),
					Geom:       orb.Polygon{{{minx, miny}, {minx + w, miny}, {minx + w, miny + cell}, {minx, miny + cell}, {minx, miny}}},
				})
			}
		}
	}
	// Fences: irregular circles (24-gons with jittered radii, 200 m – 5 km)
	// around cluster points, spread over the cities by weight.
	fkinds := []string{"depot", "customer", "restricted", "city-zone"}
	for i := 0; i < opts.Fences; i++ {
		c := pickCity(rng, total)
		cosLat := math.Cos(c.Lat * math.Pi / 180)
		clat := clamp(c.Lat+rng.NormFloat64()*0.05, -85, 85)
		clon := wrapLonInside(c.Lon+rng.NormFloat64()*0.05/cosLat, 0.1)
		radiusM := 200 + rng.Float64()*4800
		d.Fences = append(d.Fences, Polygon{
			ID: int64(i + 1), Name: fmt.Sprintf("%s fence %d", c.Name, i+1), City: c.Name,
			Kind: fkinds[rng.IntN(len(fkinds))], Geom: blob(rng, clon, clat, radiusM),
		})
	}
	return d
}

func pickCity(rng *rand.Rand, total float64) City {
	u := rng.Float64() * total
	for _, c := range Cities {
		if u < c.Weight {
			return c
		}
		u -= c.Weight
	}
	return Cities[len(Cities)-1]
}

// blob is a counter-clockwise 24-gon of roughly radiusM metres.
func blob(rng *rand.Rand, lon, lat, radiusM float64) orb.Polygon {
	const n = 24
	ring := make(orb.Ring, 0, n+1)
	mPerDegLat := 111320.0
	mPerDegLon := mPerDegLat * math.Cos(lat*math.Pi/180)
	for k := 0; k < n; k++ {
		a := 2 * math.Pi * float64(k) / n
		r := radiusM * (0.8 + 0.4*rng.Float64())
		ring = append(ring, orb.Point{lon + r*math.Cos(a)/mPerDegLon, lat + r*math.Sin(a)/mPerDegLat})
	}
	ring = append(ring, ring[0])
	return orb.Polygon{ring}
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

func wrapLon(lon float64) float64 {
	for lon > 180 {
		lon -= 360
	}
	for lon < -180 {
		lon += 360
	}
	return lon
}

// wrapLonInside keeps a fence centre far enough from the antimeridian that
// the fence itself never crosses it.
func wrapLonInside(lon, margin float64) float64 {
	return clamp(wrapLon(lon), -180+margin, 180-margin)
}

// Empty reports whether the places table holds no rows.
func Empty(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM geotoll.places)`).Scan(&exists)
	return !exists, err
}

// Load replaces the demo tables' contents with d in one transaction and
// analyzes them. pool must connect as the schema owner.
func Load(ctx context.Context, pool *pgxpool.Pool, d Data) error {
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE geotoll.places, geotoll.districts, geotoll.geofences, geotoll.geofence_pieces RESTART IDENTITY`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE seed_places (id bigint, name text, kind text, city text, rank int, lon float8, lat float8) ON COMMIT DROP;
CREATE TEMP TABLE seed_polys (id bigint, name text, city text, kind text, population int, wkt text) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"seed_places"},
			[]string{"id", "name", "kind", "city", "rank", "lon", "lat"},
			pgx.CopyFromSlice(len(d.Places), func(i int) ([]any, error) {
				p := d.Places[i]
				return []any{p.ID, p.Name, p.Kind, p.City, p.Rank, p.Lon, p.Lat}, nil
			})); err != nil {
			return fmt.Errorf("copy places: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO geotoll.places (id, name, kind, city, rank, geom)
SELECT id, name, kind, city, rank, ST_SetSRID(ST_MakePoint(lon, lat), 4326) FROM seed_places`); err != nil {
			return fmt.Errorf("insert places: %w", err)
		}
		for _, set := range []struct {
			polys  []Polygon
			insert string
		}{
			{d.Districts, `INSERT INTO geotoll.districts (id, name, city, population, geom)
SELECT id, name, city, population, ST_GeomFromText(wkt, 4326) FROM seed_polys`},
			{d.Fences, `INSERT INTO geotoll.geofences (id, name, kind, geom)
SELECT id, name, kind, ST_Multi(ST_ForcePolygonCCW(ST_GeomFromText(wkt, 4326))) FROM seed_polys`},
		} {
			if _, err := tx.Exec(ctx, `TRUNCATE seed_polys`); err != nil {
				return err
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"seed_polys"},
				[]string{"id", "name", "city", "kind", "population", "wkt"},
				pgx.CopyFromSlice(len(set.polys), func(i int) ([]any, error) {
					p := set.polys[i]
					return []any{p.ID, p.Name, p.City, p.Kind, p.Population, wkt.MarshalString(p.Geom)}, nil
				})); err != nil {
				return fmt.Errorf("copy polygons: %w", err)
			}
			if _, err := tx.Exec(ctx, set.insert); err != nil {
				return fmt.Errorf("insert polygons: %w", err)
			}
		}
		_, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('geotoll.geofences', 'id'), (SELECT max(id) FROM geotoll.geofences))`)
		return err
	})
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `ANALYZE geotoll.places, geotoll.districts, geotoll.geofences`)
	return err
}
