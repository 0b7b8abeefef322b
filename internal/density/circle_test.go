package density

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/paulmach/orb"
)

func TestCircleHalfWidth(t *testing.T) {
	deg := func(hw float64) float64 { return hw * 360 } // normalised half width in degrees of longitude
	// 111.2 km on the ground is 1° of arc.
	arc := groundR * degree
	for _, tc := range []struct {
		name        string
		lon, lat, r float64
		at          float64 // latitude of the chord, degrees
		want, tol   float64 // half width, degrees of longitude
	}{
		{"equator, at the centre", 0, 0, arc, 0, 1, 1e-6},
		{"equator, at the top", 0, 0, arc, 1, 0, 1e-6},
		{"equator, beyond the top", 0, 0, arc, 1.5, 0, 0},
		{"60°N: twice as wide", 0, 60, arc, 60, 2, 1e-3},
		{"north pole: every longitude", 0, 90, 5 * arc, 86, 180, 0},
		{"north pole: beyond reach", 0, 90, 5 * arc, 84, 0, 0},
		{"south pole", 30, -90, 5 * arc, -86, 180, 0},
		{"covers the pole", 0, 88, 5 * arc, 89.5, 180, 0},
		{"the whole Earth", 0, 0, 21000e3, -70, 180, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := newCircle(tc.lon, tc.lat, tc.r)
			if !ok {
				t.Fatal("circle refused")
			}
			if got := math.Min(deg(c.halfWidth(tc.at*degree)), 180); math.Abs(got-tc.want) > tc.tol {
				t.Errorf("half width at %g° = %.9f°, want %g°", tc.at, got, tc.want)
			}
		})
	}
	for _, bad := range [][3]float64{{0, 0, -1}, {0, 91, 1}, {181, 0, 1}, {0, 0, math.Inf(1)}, {math.NaN(), 0, 1}, {0, 0, math.NaN()}} {
		if _, ok := newCircle(bad[0], bad[1], bad[2]); ok {
			t.Errorf("newCircle(%v) accepted", bad)
		}
	}
}

func TestNormSin(t *testing.T) {
	if got := math.Tanh(math.Pi); got != sinMaxLat {
		t.Errorf("tanh π = %.17g, sinMaxLat %.17g", got, sinMaxLat)
	}
	for lat := -90.0; lat <= 90; lat += 0.25 {
		if got, want := normSin(math.Sin(lat*degree)), normLat(lat); math.Abs(got-want) > 1e-12 {
			t.Fatalf("normSin(sin %g°) = %.15f, normLat %.15f", lat, got, want)
		}
	}
}

func TestAcos(t *testing.T) {
	for x := -1.0; x <= 1; x += 1.0 / 4096 {
		if got, want := acos(x), math.Acos(x); math.Abs(got-want) > 2.2e-8 {
			t.Fatalf("acos(%g) = %.12f, math.Acos %.12f", x, got, want)
		}
	}
}

// halfWidthAt (from normalised y, one exp) agrees with halfWidth (from the
// latitude).
func TestHalfWidthAt(t *testing.T) {
	for _, ctr := range [][3]float64{{0, 0, 5e5}, {10, 60, 2e6}, {-170, -45, 3e4}, {0, 89, 4e5}, {0, -90, 1e6}} {
		c, _ := newCircle(ctr[0], ctr[1], ctr[2])
		for y := 0.0; y <= 1; y += 1.0 / 1024 {
			if a, b := c.halfWidthAt(y), c.halfWidth(latOf(y)*degree); math.Abs(a-b) > 1e-9 {
				t.Fatalf("circle %v at y %g: halfWidthAt %g, halfWidth %g", ctr, y, a, b)
			}
		}
	}
}

// point is a point feature at lon/lat.
func point(lon, lat float64) feature {
	x, y := normLon(lon), normLat(lat)
	return feature{box: rect{x, y, x, y}, vertices: 1}
}

// Boxes and circles over the antimeridian count both sides; circles over a
// pole reach the features beyond ±85.0511°; areas outside the world or not
// numbers estimate zero.
func TestAntimeridianAndPoles(t *testing.T) {
	fs := []feature{
		point(179.995, 0.001), point(-179.995, -0.001), // either side of the antimeridian
		point(0, 86), point(180, 86.5), point(-120, -87), // beyond the square world
		point(10, 84), point(40, 84),
		point(13.4, 52.5), point(0, 0.01),
	}
	m := modelOf(t, Point, SRIDLonLat, fs, Options{})
	for _, tc := range []struct {
		name string
		est  func() Estimate
		want float64
	}{
		{"bbox over the antimeridian", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{179, -1}, Max: orb.Point{-179, 1}}) }, 2},
		{"bbox up to the antimeridian, west side", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{179, -1}, Max: orb.Point{180, 1}}) }, 1},
		{"the same box, not crossing", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{-179, -1}, Max: orb.Point{179, 1}}) }, 1},
		{"circle over the antimeridian", func() Estimate { return m.Circle(orb.Point{180, 0}, 5000) }, 2},
		{"circle over the antimeridian, west of it", func() Estimate { return m.Circle(orb.Point{-179.99, 0}, 2000) }, 2},
		{"circle at the north pole", func() Estimate { return m.Circle(orb.Point{0, 90}, 600e3) }, 2},
		{"circle at the south pole", func() Estimate { return m.Circle(orb.Point{77, -90}, 400e3) }, 1},
		{"circle near the pole, not over it", func() Estimate { return m.Circle(orb.Point{0, 84}, 300e3) }, 2},
		{"bbox wholly beyond 85.0511°N", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{-180, 85.5}, Max: orb.Point{180, 90}}) }, 2},
		{"bbox over 85.0511°N", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{-180, 80}, Max: orb.Point{180, 90}}) }, 4},
		// Cut at the world's edge: the box read is 179.1°E..180°, which holds
		// the point east of the antimeridian, not the one west of it.
		{"EPSG:3857 rectangle over the antimeridian is cut there (EPSG:4326 column)",
			func() Estimate {
				return m.Rect(orb.Bound{Min: orb.Point{halfWorld - 1e5, -1e4}, Max: orb.Point{halfWorld + 1e5, 1e4}})
			}, 1},
		{"rectangle outside the world", func() Estimate { return m.Rect(orb.Bound{Min: orb.Point{3e7, 0}, Max: orb.Point{4e7, 1}}) }, 0},
		{"inverted rectangle", func() Estimate { return m.Rect(orb.Bound{Min: orb.Point{1, 1}, Max: orb.Point{0, 0}}) }, 0},
		{"bbox of NaN", func() Estimate { return m.BBox(orb.Bound{Min: orb.Point{math.NaN(), 0}, Max: orb.Point{1, 1}}) }, 0},
		{"circle of negative radius", func() Estimate { return m.Circle(orb.Point{13.4, 52.5}, -1) }, 0},
		{"point off the Earth", func() Estimate { return m.Point(orb.Point{200, 0}) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.est()
			if math.Abs(got.Features-tc.want) > 0.01 || got.Vertices != got.Features {
				t.Errorf("estimate %+v, want %g features", got, tc.want)
			}
		})
	}
}

// groundDistance is the great-circle distance (metres, mean radius) between
// two lon/lat points.
func groundDistance(lon1, lat1, lon2, lat2 float64) float64 {
	p1, p2, dl := lat1*degree, lat2*degree, (lon2-lon1)*degree
	h := math.Sin((p2-p1)/2)*math.Sin((p2-p1)/2) + math.Cos(p1)*math.Cos(p2)*math.Sin(dl/2)*math.Sin(dl/2)
	return 2 * groundR * math.Asin(math.Min(1, math.Sqrt(h)))
}

// Circle estimates of points track a brute-force count by ground distance.
func TestCirclesTrackBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	var fs []feature
	var lons, lats []float64
	for i := 0; i < 20000; i++ {
		lon, lat := rng.Float64()*360-180, rng.Float64()*160-80
		if i%4 != 0 { // clusters
			k := float64(i % 7)
			lon, lat = -150+k*45+rng.NormFloat64()*0.05, -60+k*17+rng.NormFloat64()*0.05
		}
		fs, lons, lats = append(fs, point(lon, lat)), append(lons, lon), append(lats, lat)
	}
	m := modelOf(t, Point, SRIDLonLat, fs, Options{})
	var est, want []float64
	var sumErr, sumWant float64
	for k := 0; k < 400; k++ {
		i := rng.IntN(len(fs))
		lon, lat, r := lons[i]+rng.NormFloat64()*0.02, lats[i]+rng.NormFloat64()*0.02, math.Pow(10, 2+3*rng.Float64())
		n := 0.0
		for j := range lons {
			if groundDistance(lon, lat, lons[j], lats[j]) <= r {
				n++
			}
		}
		e := m.Circle(orb.Point{lon, lat}, r).Features
		est, want = append(est, e), append(want, n)
		sumErr, sumWant = sumErr+math.Abs(e-n), sumWant+n
	}
	rho := rankCorrelation(est, want)
	t.Logf("ρ %.4f, total absolute error %.1f of %.0f points", rho, sumErr, sumWant)
	if rho < 0.97 || sumErr > 0.1*sumWant {
		t.Errorf("ρ %.4f, total absolute error %.1f of %.0f: want ρ ≥ 0.97 and error ≤ 10%%", rho, sumErr, sumWant)
	}
}
