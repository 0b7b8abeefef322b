package density_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/density"
)

// probe is one query area: how the model estimates it and how PostGIS
// counts it exactly (count(*) and sum(ST_NPoints) of what the filter reads).
type probe struct {
	kind  string // tile, bbox, circle, point
	label string
	where string // the filter on t.<geom>, with $n arguments
	args  []any
	est   func(*density.Model) density.Estimate
}

// halfWorld is EPSG:3857's half width in metres.
const halfWorld = 20037508.342789244

// tileBound is tile z/x/y's EPSG:3857 envelope expanded by buffer/extent of
// its width (the tile query's ST_Expand(envelope, buffer metres)).
func tileBound(z, x, y int, buffer float64) orb.Bound {
	size := 2 * halfWorld / float64(uint(1)<<z)
	b := size * buffer
	minx := -halfWorld + float64(x)*size
	maxy := halfWorld - float64(y)*size
	return orb.Bound{Min: orb.Point{minx - b, maxy - size - b}, Max: orb.Point{minx + size + b, maxy + b}}
}

// tileAt is the tile of zoom z holding lon/lat.
func tileAt(z int, lon, lat float64) (x, y int) {
	n := float64(uint(1) << z)
	lat = math.Max(-85.0511, math.Min(85.0511, lat))
	x = int(math.Floor((lon + 180) / 360 * n))
	y = int(math.Floor((1 - math.Asinh(math.Tan(lat*math.Pi/180))/math.Pi) / 2 * n))
	return min(max(x, 0), int(n)-1), min(max(y, 0), int(n)-1)
}

// tileProbe is tile z/x/y with the default 64/4096 buffer, filtered as the
// tile query does for the relation's SRID.
func tileProbe(rel density.Relation, z, x, y int, label string) probe {
	b := tileBound(z, x, y, 64.0/4096)
	env := "ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857)"
	if rel.SRID == density.SRIDLonLat { // its x range cut at the world's edges first, as the tile query does
		env = "ST_Transform(ST_MakeEnvelope(greatest($1::float8, -20037508.342789244), $2::float8, least($3::float8, 20037508.342789244), $4::float8, 3857), 4326)"
	}
	return probe{
		kind: "tile", label: fmt.Sprintf("%s z%d/%d/%d", label, z, x, y),
		where: "t.%s && " + env, args: []any{b.Min[0], b.Min[1], b.Max[0], b.Max[1]},
		est: func(m *density.Model) density.Estimate { return m.Rect(b) },
	}
}

// bboxProbe is a lon/lat box; west > east crosses the antimeridian (both
// parts are read). A box on an EPSG:3857 relation is transformed, its
// latitudes clamped to the square world.
func bboxProbe(rel density.Relation, w, s, e, n float64, label string) probe {
	env := "ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 4326)"
	env2 := "ST_MakeEnvelope($5::float8, $2::float8, $6::float8, $4::float8, 4326)"
	if rel.SRID == density.SRIDWebMercator {
		s, n = max(s, -85.0511), min(n, 85.0511)
		env, env2 = "ST_Transform("+env+", 3857)", "ST_Transform("+env2+", 3857)"
	}
	args := []any{w, s, e, n, nil, nil}
	if w > e {
		args = []any{w, s, 180.0, n, -180.0, e}
	}
	b := orb.Bound{Min: orb.Point{w, s}, Max: orb.Point{e, n}}
	return probe{
		kind: "bbox", label: fmt.Sprintf("%s bbox %.4f,%.4f,%.4f,%.4f", label, w, s, e, n),
		where: "(t.%[1]s && " + env + " OR t.%[1]s && " + env2 + ")", args: args,
		est: func(m *density.Model) density.Estimate { return m.BBox(b) },
	}
}

// circleProbe is a radius around lon/lat (EPSG:4326 relations only): the
// features whose bounding box comes within the radius on the ground. For
// points that is what ST_DWithin on geography finds; for other geometries
// it is their envelope (densified, so that its edges follow parallels) that
// must come within reach — the whole geometry is read either way.
func circleProbe(rel density.Relation, lon, lat, r float64, label string) probe {
	target := "t.%s::geography"
	if rel.Kind != density.Point {
		target = "ST_Segmentize(ST_Envelope(t.%s), 0.1)::geography"
	}
	return probe{
		kind: "circle", label: fmt.Sprintf("%s circle %.4f,%.4f r=%.0fm", label, lon, lat, r),
		where: "ST_DWithin(" + target + ", ST_MakePoint($1::float8, $2::float8)::geography, $3::float8)",
		args:  []any{lon, lat, r},
		est:   func(m *density.Model) density.Estimate { return m.Circle(orb.Point{lon, lat}, r) },
	}
}

// pointProbe is the features whose box contains lon/lat (EPSG:4326
// relations only).
func pointProbe(lon, lat float64, label string) probe {
	return probe{
		kind: "point", label: fmt.Sprintf("%s point %.5f,%.5f", label, lon, lat),
		where: "t.%s && ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326)", args: []any{lon, lat},
		est: func(m *density.Model) density.Estimate { return m.Point(orb.Point{lon, lat}) },
	}
}

// exact counts a probe in PostGIS.
func exact(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rel density.Relation, p probe) density.Estimate {
	t.Helper()
	return exactWhere(ctx, t, pool, rel, p, "true")
}

// exactWhere counts a probe's features that also meet extra (a condition
// on t.geom, written %s).
func exactWhere(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rel density.Relation, p probe, extra string) density.Estimate {
	t.Helper()
	geom := pgx.Identifier{rel.GeometryColumn}.Sanitize()
	where := strings.ReplaceAll(p.where, "%[1]s", geom)
	where = strings.ReplaceAll(where, "%s", geom) + " AND " + strings.ReplaceAll(extra, "%s", geom)
	sql := "SELECT count(*)::float8, coalesce(sum(ST_NPoints(t." + geom + ")), 0)::float8 FROM " +
		rel.Table.Sanitize() + " AS t WHERE " + where
	var e density.Estimate
	if err := pool.QueryRow(ctx, sql, p.args...).Scan(&e.Features, &e.Vertices); err != nil {
		t.Fatalf("%s: %v", p.label, err)
	}
	return e
}

// anchors returns n lon/lat positions of features of rel (their box
// centres), drawn with a fixed seed: places where data is.
func anchors(ctx context.Context, t testing.TB, pool *pgxpool.Pool, rel density.Relation, n int) []orb.Point {
	t.Helper()
	geom := pgx.Identifier{rel.GeometryColumn}.Sanitize()
	sql := "SELECT ST_X(c), ST_Y(c) FROM (SELECT ST_Transform(ST_SetSRID(ST_Centroid(t." + geom + "::box2d), $1::int), 4326) AS c FROM " +
		rel.Table.Sanitize() + " AS t ORDER BY md5(ST_AsEWKB(t." + geom + ")::text) LIMIT $2) AS s"
	rows, err := pool.Query(ctx, sql, rel.SRID, n)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (orb.Point, error) {
		var p orb.Point
		err := r.Scan(&p[0], &p[1])
		return p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) == 0 {
		t.Fatalf("%s has no features", rel)
	}
	return pts
}

// tileProbes: per zoom 0..16, `near` tiles holding an anchor and `far`
// tiles drawn anywhere.
func tileProbes(rng *rand.Rand, rel density.Relation, at []orb.Point, near, far int) []probe {
	var out []probe
	for z := 0; z <= 16; z++ {
		n := 1 << z
		for i := 0; i < near; i++ {
			a := at[rng.IntN(len(at))]
			x, y := tileAt(z, a[0], a[1])
			out = append(out, tileProbe(rel, z, x, y, "near"))
		}
		for i := 0; i < far; i++ {
			out = append(out, tileProbe(rel, z, rng.IntN(n), rng.IntN(n), "far"))
		}
	}
	return out
}

// edgeTileProbes: per zoom 1..16, the tiles at the world's west and east
// edges in the row of an anchor. Their buffers overhang the antimeridian,
// which an EPSG:4326 relation's tile query cuts off.
func edgeTileProbes(rng *rand.Rand, rel density.Relation, at []orb.Point) []probe {
	var out []probe
	for z := 1; z <= 16; z++ {
		a := at[rng.IntN(len(at))]
		_, y := tileAt(z, a[0], a[1])
		out = append(out, tileProbe(rel, z, 0, y, "west edge"), tileProbe(rel, z, 1<<z-1, y, "east edge"))
	}
	return out
}

// logUniform draws from [lo, hi] evenly in log scale.
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return lo * math.Pow(hi/lo, rng.Float64())
}

// areaProbes: n bboxes (some across the antimeridian) and n circles, half
// near anchors and half anywhere, and n points near anchors.
func areaProbes(rng *rand.Rand, rel density.Relation, at []orb.Point, n int) []probe {
	var out []probe
	centre := func(i int) (float64, float64, string) {
		if i%2 == 0 {
			a := at[rng.IntN(len(at))]
			return a[0] + rng.NormFloat64()*0.05, a[1] + rng.NormFloat64()*0.05, "near"
		}
		return rng.Float64()*360 - 180, rng.Float64()*160 - 80, "far"
	}
	for i := 0; i < n; i++ {
		lon, lat, label := centre(i)
		if i%10 == 9 {
			lon, label = 180-rng.Float64()*2, "antimeridian" // crosses it
		}
		hw, hh := logUniform(rng, 0.001, 40), logUniform(rng, 0.001, 30)
		w, e := lon-hw, lon+hw
		if w < -180 {
			w += 360
		}
		if e > 180 {
			e -= 360
		}
		s, nn := math.Max(lat-hh, -90), math.Min(lat+hh, 90)
		out = append(out, bboxProbe(rel, w, s, e, nn, label))
	}
	if rel.SRID != density.SRIDLonLat {
		return out
	}
	for i := 0; i < n; i++ {
		lon, lat, label := centre(i)
		lon = math.Max(-180, math.Min(180, lon))
		out = append(out, circleProbe(rel, lon, lat, logUniform(rng, 50, 500_000), label))
	}
	for i := 0; i < n; i++ {
		a := at[rng.IntN(len(at))]
		out = append(out, pointProbe(a[0]+rng.NormFloat64()*0.01, a[1]+rng.NormFloat64()*0.01, "near"))
	}
	return out
}

// spearman is the rank correlation of x and y, ties taking their mean rank.
func spearman(x, y []float64) float64 {
	rx, ry := ranks(x), ranks(y)
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx /= float64(len(rx))
	my /= float64(len(ry))
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mx, ry[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			r[idx[k]] = float64(i+j)/2 + 1
		}
		i = j + 1
	}
	return r
}

// relErr is |est − exact| / max(exact, 1).
func relErr(est, exact float64) float64 { return math.Abs(est-exact) / math.Max(exact, 1) }

// quantile is the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// fidelity compares estimates with exact counts.
type fidelity struct {
	n                      int
	rhoN, rhoV             float64
	medN, p90N, medV, p90V float64
	maeN                   float64 // mean absolute error, features
	emptyMax               float64 // the largest feature estimate where PostGIS reads nothing
}

func (f fidelity) String() string {
	return fmt.Sprintf("n=%d ρ(features)=%.3f ρ(vertices)=%.3f rel.err features median %.3f p90 %.3f, vertices median %.3f p90 %.3f; mean abs.err %.3g features; max estimate where empty %.3g",
		f.n, f.rhoN, f.rhoV, f.medN, f.p90N, f.medV, f.p90V, f.maeN, f.emptyMax)
}

// measure runs every probe against the model and PostGIS.
func measure(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rel density.Relation, m *density.Model, probes []probe) fidelity {
	t.Helper()
	var en, xn, ev, xv, errN, errV []float64
	var f fidelity
	for _, p := range probes {
		e := p.est(m)
		x := exact(ctx, t, pool, rel, p)
		if math.IsNaN(e.Features) || e.Features < 0 || math.IsNaN(e.Vertices) || e.Vertices < 0 {
			t.Errorf("%s: estimate %+v", p.label, e)
		}
		en, xn, ev, xv = append(en, e.Features), append(xn, x.Features), append(ev, e.Vertices), append(xv, x.Vertices)
		errN, errV = append(errN, relErr(e.Features, x.Features)), append(errV, relErr(e.Vertices, x.Vertices))
		f.maeN += math.Abs(e.Features-x.Features) / float64(len(probes))
		if x.Features == 0 {
			f.emptyMax = max(f.emptyMax, e.Features)
		}
		if testing.Verbose() && relErr(e.Features, x.Features) > 1 {
			t.Logf("%s: estimate %.1f features %.0f vertices, exact %.0f / %.0f", p.label, e.Features, e.Vertices, x.Features, x.Vertices)
		}
	}
	f.n = len(probes)
	f.rhoN, f.rhoV = spearman(en, xn), spearman(ev, xv)
	f.medN, f.p90N = quantile(errN, 0.5), quantile(errN, 0.9)
	f.medV, f.p90V = quantile(errV, 0.5), quantile(errV, 0.9)
	return f
}
