package density

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
)

// feature is a test feature: its bounding box in normalised coordinates.
type feature struct {
	box      rect
	vertices float64
	heavy    bool
}

// modelOf builds the model of features (normalised boxes) through
// groupRows, as NewModel does.
func modelOf(t testing.TB, kind Kind, srid int, features []feature, opts Options) *Model {
	t.Helper()
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	in := make([]cellInput, len(features))
	for i, f := range features {
		in[i] = cellInput(f)
	}
	rel := Relation{Table: pgx.Identifier{"test", "features"}, GeometryColumn: "geom", SRID: srid, Kind: kind}
	return newModel(rel, groupRows(in, opts.MaxLevel), tallies{}, 1, opts)
}

// bruteForce counts the features whose box meets r (normalised).
func bruteForce(features []feature, r rect) (n, v float64) {
	for _, ft := range features {
		b := ft.box
		if b.x0 <= r.x1 && b.x1 >= r.x0 && b.y0 <= r.y1 && b.y1 >= r.y0 {
			n++
			v += ft.vertices
		}
	}
	return n, v
}

// clustered draws n points around a few centres (σ from 0.00001 to 0.01 of
// the world) and a sparse background.
func clustered(rng *rand.Rand, n int) []feature {
	var centres [][2]float64
	for i := 0; i < 12; i++ {
		centres = append(centres, [2]float64{0.1 + 0.8*rng.Float64(), 0.1 + 0.8*rng.Float64()})
	}
	out := make([]feature, 0, n)
	for i := 0; i < n; i++ {
		x, y := rng.Float64(), rng.Float64()
		if i%10 != 0 {
			c := centres[rng.IntN(len(centres))]
			s := math.Pow(10, -5+3*rng.Float64())
			x, y = c[0]+rng.NormFloat64()*s, c[1]+rng.NormFloat64()*s
		}
		x, y = min(max(x, 0), 1), min(max(y, 0), 1)
		out = append(out, feature{box: rect{x, y, x, y}, vertices: 1})
	}
	return out
}

// A rectangle made of whole cells (a tile without buffer) counts points
// exactly, at every zoom down to the model's finest level.
func TestAlignedTilesCountPointsExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	pts := clustered(rng, 20000)
	m := modelOf(t, Point, SRIDWebMercator, pts, Options{MaxLevel: 14})
	for z := 0; z <= 14; z++ {
		n := 1 << z
		for k := 0; k < 40; k++ {
			p := pts[rng.IntN(len(pts))].box
			x, y := min(int(p.x0*float64(n)), n-1), min(int(p.y0*float64(n)), n-1)
			if k%2 == 1 {
				x, y = rng.IntN(n), rng.IntN(n)
			}
			r := rect{float64(x) / float64(n), float64(y) / float64(n), float64(x+1) / float64(n), float64(y+1) / float64(n)}
			var acc sum
			m.addRect(r, &acc)
			want, _ := bruteForce(pts, r)
			if math.Abs(acc.n-want) > 1e-6*max(want, 1) {
				t.Fatalf("z%d tile %d/%d: estimate %.6f, exact %.0f", z, x, y, acc.n, want)
			}
			if acc.v != acc.n {
				t.Fatalf("a point relation's vertices %.3f differ from its features %.3f", acc.v, acc.n)
			}
		}
	}
}

// The world counts every feature and vertex, light and heavy, whatever the
// level the cell cap leaves; the cap holds.
func TestWorldCountsEverythingAtEveryCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	fs := clustered(rng, 5000)
	for i := 0; i < 500; i++ { // polygons of every size, a few heavy
		x, y, s := rng.Float64(), rng.Float64(), math.Pow(10, -6+5.5*rng.Float64())
		fs = append(fs, feature{box: rect{x, y, min(x+s, 1), min(y+s*(0.2+rng.Float64()), 1)}, vertices: 5 + float64(rng.IntN(50)), heavy: i%50 == 0})
	}
	var total float64
	for _, f := range fs {
		total += f.vertices
	}
	world := orb.Bound{Min: orb.Point{-halfWorld, -halfWorld}, Max: orb.Point{halfWorld, halfWorld}}
	prevLevel := 99
	for _, cap := range []int{1 << 20, 20000, 5000, 1024} {
		m := modelOf(t, Polygon, SRIDWebMercator, fs, Options{MaxCells: cap})
		s := m.Summary()
		if s.Cells > cap || s.Level > prevLevel {
			t.Errorf("cap %d: %d cells at level %d", cap, s.Cells, s.Level)
		}
		prevLevel = s.Level
		got := m.Rect(world)
		if math.Abs(got.Features-float64(len(fs))) > 1e-6 || math.Abs(got.Vertices-total) > 1e-6 {
			t.Errorf("cap %d (level %d): world estimates %+v, want %d features, %.0f vertices", cap, s.Level, got, len(fs), total)
		}
		t.Logf("cap %d: level %d, %d cells, %d bytes", cap, s.Level, s.Cells, s.Bytes)
	}
}

// A model of nothing estimates zero everywhere.
func TestEmptyModel(t *testing.T) {
	rel := Relation{Table: pgx.Identifier{"t"}, GeometryColumn: "g", SRID: SRIDLonLat, Kind: Polygon}
	m, err := NewModel(rel, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	world := orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}
	for _, e := range []Estimate{m.BBox(world), m.Rect(orb.Bound{Min: orb.Point{-halfWorld, -halfWorld}, Max: orb.Point{halfWorld, halfWorld}}),
		m.Circle(orb.Point{0, 0}, 1e7), m.Point(orb.Point{0, 0})} {
		if e != (Estimate{}) {
			t.Errorf("empty model estimates %+v", e)
		}
	}
	if s := m.Summary(); s.Rows != 0 || s.Cells != 0 || s.Bytes > 1024 {
		t.Errorf("empty model: %+v", s)
	}
}

// NewModel reads bounds in the relation's SRID: the same places, in EPSG:3857
// metres or in degrees, give the same estimates; invalid input is refused.
func TestNewModel(t *testing.T) {
	lonLat := Relation{Table: pgx.Identifier{"t"}, GeometryColumn: "g", SRID: SRIDLonLat, Kind: Line}
	merc := lonLat
	merc.SRID = SRIDWebMercator
	toMerc := func(lon, lat float64) orb.Point {
		return orb.Point{lon / 180 * halfWorld, (normLat(lat) - 0.5) * worldWidth}
	}
	var a, b []Feature
	for i := 0; i < 100; i++ {
		lon, lat := -120+float64(i)*2.3, -50+float64(i)
		a = append(a, Feature{Bound: orb.Bound{Min: orb.Point{lon, lat}, Max: orb.Point{lon + 0.5, lat + 0.2}}, Vertices: 3 + i})
		b = append(b, Feature{Bound: orb.Bound{Min: toMerc(lon, lat), Max: toMerc(lon+0.5, lat+0.2)}, Vertices: 3 + i})
	}
	a = append(a, Feature{Bound: orb.Bound{Min: orb.Point{0, 0}, Max: orb.Point{90, 60}}, Vertices: 100_000}) // heavy
	b = append(b, Feature{Bound: orb.Bound{Min: toMerc(0, 0), Max: toMerc(90, 60)}, Vertices: 100_000})
	ma, err := NewModel(lonLat, a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := NewModel(merc, b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, box := range []orb.Bound{
		{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}},
		{Min: orb.Point{-30, -10}, Max: orb.Point{40, 20}},
		{Min: orb.Point{10, 10}, Max: orb.Point{11, 11}},
	} {
		ea, eb := ma.BBox(box), mb.BBox(box)
		if math.Abs(ea.Features-eb.Features) > 1e-6 || math.Abs(ea.Vertices-eb.Vertices) > 1e-3 {
			t.Errorf("%v: lon/lat model %+v, EPSG:3857 model %+v", box, ea, eb)
		}
	}
	if got := ma.BBox(orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}); got.Vertices != 100_000+100*3+99*100/2 {
		t.Errorf("world: %+v", got)
	}
	if _, err := NewModel(Relation{SRID: 2154, Kind: Point}, nil, Options{}); err == nil {
		t.Error("a relation without a table, in EPSG:2154, was accepted")
	}
	if _, err := NewModel(lonLat, nil, Options{MaxLevel: 17}); err == nil {
		t.Error("MaxLevel 17 was accepted")
	}
}

// Estimates track brute-force counts of random boxes over random data, and
// never leave [0, total].
func TestRandomRectsTrackBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	fs := clustered(rng, 20000)
	for i := 0; i < 3000; i++ {
		x, y, s := rng.Float64(), rng.Float64(), math.Pow(10, -6+4*rng.Float64())
		fs = append(fs, feature{box: rect{x, y, min(x+s, 1), min(y+s, 1)}, vertices: 10})
	}
	m := modelOf(t, Polygon, SRIDWebMercator, fs, Options{})
	var est, want []float64
	for k := 0; k < 2000; k++ {
		x, y := rng.Float64(), rng.Float64()
		if k%2 == 0 {
			b := fs[rng.IntN(len(fs))].box
			x, y = b.x0, b.y0
		}
		w, h := math.Pow(10, -6+5*rng.Float64()), math.Pow(10, -6+5*rng.Float64())
		r := rect{x - w, y - h, x + w, y + h}
		var acc sum
		m.addRect(r, &acc)
		n, _ := bruteForce(fs, r)
		if !(acc.n >= 0 && acc.n <= float64(len(fs))+1e-6) {
			t.Fatalf("%+v: estimate %g out of [0, %d]", r, acc.n, len(fs))
		}
		est, want = append(est, acc.n), append(want, n)
	}
	if rho := rankCorrelation(est, want); rho < 0.95 {
		t.Errorf("ρ(estimate, brute force) = %.3f over %d boxes", rho, len(est))
	}
}

// rankCorrelation is Spearman's ρ without tie correction (enough for a
// bound), by Pearson correlation of the values' ranks.
func rankCorrelation(x, y []float64) float64 {
	rank := func(v []float64) []float64 {
		r := make([]float64, len(v))
		for i := range v {
			for j := range v {
				if v[j] < v[i] {
					r[i]++
				} else if v[j] == v[i] && j != i {
					r[i] += 0.5
				}
			}
		}
		return r
	}
	rx, ry := rank(x), rank(y)
	var mx, my, sxy, sxx, syy float64
	for i := range rx {
		mx, my = mx+rx[i], my+ry[i]
	}
	mx, my = mx/float64(len(rx)), my/float64(len(ry))
	for i := range rx {
		sxy += (rx[i] - mx) * (ry[i] - my)
		sxx += (rx[i] - mx) * (rx[i] - mx)
		syy += (ry[i] - my) * (ry[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}
