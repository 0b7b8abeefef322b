package density_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// minRho is the rank correlation every relation's estimates must reach
// against PostGIS's exact counts.
const minRho = 0.95

// maxPointError is the mean absolute error, in features, allowed on points.
const maxPointError = 0.5

// demoRelations are the demo tables `make testdb` seeds, in both columns
// where a table has both.
var demoRelations = []struct {
	name string
	rel  density.Relation
}{
	{"places_3857", density.Relation{Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Point}},
	{"places_4326", density.Relation{Table: pgx.Identifier{"geotoll", "places"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}},
	{"districts_3857", density.Relation{Table: pgx.Identifier{"geotoll", "districts"}, GeometryColumn: "geom_3857", SRID: 3857, Kind: density.Polygon}},
	{"districts_4326", density.Relation{Table: pgx.Identifier{"geotoll", "districts"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Polygon}},
	{"geofences_4326", density.Relation{Table: pgx.Identifier{"geotoll", "geofences"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Polygon}},
}

// Estimates rank like PostGIS's exact counts for tiles at every zoom (near
// data and anywhere), bboxes, circles and points, on every demo relation.
func TestAccuracyDemo(t *testing.T) {
	pool := testenv.ReadPool(t)
	for _, d := range demoRelations {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			m, err := density.Build(ctx, pool, d.rel, density.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("model: %+v", m.Summary())
			rng := rand.New(rand.NewPCG(1, 2))
			at := anchors(ctx, t, pool, d.rel, 500)
			checkFidelity(ctx, t, pool, d.rel, m, slices.Concat(tileProbes(rng, d.rel, at, 6, 6), edgeTileProbes(rng, d.rel, at), areaProbes(rng, d.rel, at, 60)))
		})
	}
}

// checkFidelity measures probes per kind and all together. Tiles, bboxes
// and circles must rank like PostGIS: ρ ≥ minRho on features and vertices.
// A point's exact answer is a small integer (the boxes that contain it), so
// points must instead be right on average: a mean absolute error of at most
// maxPointError features.
func checkFidelity(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rel density.Relation, m *density.Model, probes []probe) {
	t.Helper()
	byKind := map[string][]probe{"all": probes}
	for _, p := range probes {
		byKind[p.kind] = append(byKind[p.kind], p)
	}
	for _, kind := range []string{"tile", "bbox", "circle", "point", "all"} {
		if len(byKind[kind]) == 0 {
			continue
		}
		f := measure(ctx, t, pool, rel, m, byKind[kind])
		t.Logf("%-6s %s", kind, f)
		switch {
		case kind == "point" && f.maeN > maxPointError:
			t.Errorf("point: mean absolute error %.3f features: want ≤ %.2f", f.maeN, maxPointError)
		case kind != "point" && (f.rhoN < minRho || f.rhoV < minRho):
			t.Errorf("%s: ρ(features) %.3f, ρ(vertices) %.3f: want ≥ %.2f", kind, f.rhoN, f.rhoV, minRho)
		}
	}
}

// scratchTable creates an empty table geotoll.<prefix>_<random> (id serial,
// geom geometry(<geomType>, 4326)) that the read role may read, dropped when
// the test ends, and returns it with the owner's pool.
func scratchTable(t testing.TB, prefix, geomType string, kind density.Kind) (density.Relation, *pgxpool.Pool) {
	return scratchTableSRID(t, prefix, geomType, 4326, kind)
}

// scratchTableSRID is scratchTable with geometries in srid.
func scratchTableSRID(t testing.TB, prefix, geomType string, srid int, kind density.Kind) (density.Relation, *pgxpool.Pool) {
	t.Helper()
	owner := testenv.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := prefix + "_" + strings.TrimPrefix(testenv.Prefix(t), "geotoll-test-")
	rel := density.Relation{Table: pgx.Identifier{"geotoll", name}, GeometryColumn: "geom", SRID: srid, Kind: kind}
	table := rel.Table.Sanitize()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	for _, stmt := range []string{
		"CREATE TABLE " + table + " (id serial PRIMARY KEY, geom geometry(" + geomType + ", " + strconv.Itoa(srid) + ") NOT NULL)",
		"GRANT SELECT ON " + table + " TO geotoll_reader",
	} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return rel, owner
}

// heavyTable creates a polygon table (EPSG:4326) the read role may read,
// dropped when the test ends: a few polygons of 10^4–10^5 vertices — some
// spanning many cells at every level, one beside the antimeridian, some
// tiny — among a few hundred ordinary ones.
func heavyTable(t *testing.T) density.Relation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rel, owner := scratchTable(t, "density_heavy", "Polygon", density.Polygon)
	table := rel.Table.Sanitize()
	// Star-shaped rings (radius 1 + 0.2 sin 13a, in degrees of latitude):
	// always simple, so always valid.
	var lon, lat, r []float64
	var n []int32
	add := func(x, y, radius float64, vertices int) {
		lon, lat, r, n = append(lon, x), append(lat, y), append(r, radius), append(n, int32(vertices))
	}
	add(10, 50, 12, 100_000)
	add(-100, 40, 15, 80_000)
	add(135, -25, 10, 60_000)
	add(175, -40, 3, 50_000)
	rng := rand.New(rand.NewPCG(7, 8))
	spot := func() (float64, float64) { return rng.Float64()*340 - 170, rng.Float64()*120 - 60 }
	for i := 0; i < 6; i++ {
		x, y := spot()
		add(x, y, 0.3+rng.Float64()*1.7, 20_000)
	}
	for i := 0; i < 20; i++ {
		x, y := spot()
		add(x, y, 0.002+rng.Float64()*0.008, 10_000)
	}
	for i := 0; i < 400; i++ {
		x, y := spot()
		add(x, y, 0.01+rng.Float64()*0.19, 8+rng.IntN(32))
	}
	_, err := owner.Exec(ctx, `INSERT INTO `+table+` (geom)
		SELECT ST_MakePolygon(ST_AddPoint(ST_MakeLine(array_agg(pt ORDER BY k)), (array_agg(pt ORDER BY k))[1]))
		FROM (
			SELECT c.id, k, ST_SetSRID(ST_MakePoint(
				c.lon + c.r * (1 + 0.2 * sin(13 * a)) * cos(a) / cos(radians(c.lat)),
				c.lat + c.r * (1 + 0.2 * sin(13 * a)) * sin(a)), 4326) AS pt
			FROM unnest($1::float8[], $2::float8[], $3::float8[], $4::int[]) WITH ORDINALITY AS c(lon, lat, r, n, id),
				LATERAL generate_series(0, c.n - 1) AS k,
				LATERAL (SELECT 2 * pi() * k / c.n AS a) AS s
		) AS p
		GROUP BY id`, lon, lat, r, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE INDEX ON " + table + " USING gist (geom)",
		"CREATE INDEX ON " + table + " USING gist ((geom::geography))",
		"ANALYZE " + table,
	} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return rel
}

// Big polygons count whole wherever their box reaches, tiny heavy ones
// count their vertices where they are, and empty places estimate zero.
func TestAccuracyHeavy(t *testing.T) {
	rel := heavyTable(t)
	pool := testenv.ReadPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := density.Build(ctx, pool, rel, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("model: %+v", m.Summary())
	rng := rand.New(rand.NewPCG(5, 6))
	at := anchors(ctx, t, pool, rel, 500)
	probes := slices.Concat(tileProbes(rng, rel, at, 6, 6), edgeTileProbes(rng, rel, at), areaProbes(rng, rel, at, 60))
	checkFidelity(ctx, t, pool, rel, m, probes)

	// Sampled to 12% of its 430 rows, the table still counts every heavy
	// polygon whole: they are never sampled out, and live in their own
	// grids. Wherever heavy polygons are read (10^4 vertices or more), the
	// vertex estimate is within 2% of PostGIS's count in the full model;
	// in the sampled one, within 2% plus what the light polygons there could
	// add or take away (each kept one weighs 1/0.12).
	opts := density.Options{SampleRows: 50}
	sampled, err := density.Build(ctx, pool, rel, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := sampled.Summary()
	t.Logf("sampled model: %+v", s)
	heavy, worst := 0, [2]float64{}
	for _, p := range append(probes, tileProbe(rel, 0, 0, 0, "world")) {
		x := exact(ctx, t, pool, rel, p)
		if x.Vertices < 1e4 {
			continue
		}
		heavy++
		light := exactWhere(ctx, t, pool, rel, p, "pg_column_size(t.%s) < "+strconv.Itoa(density.DefaultHeavyBytes))
		for i, model := range []*density.Model{m, sampled} {
			e := p.est(model)
			worst[i] = max(worst[i], relErr(e.Vertices, x.Vertices))
			bound := 0.02 * x.Vertices
			if i == 1 {
				bound += light.Vertices / s.Sampled
			}
			if math.Abs(e.Vertices-x.Vertices) > bound {
				t.Errorf("%s (model %d): estimate %.0f vertices, exact %.0f (%.0f of them light)", p.label, i, e.Vertices, x.Vertices, light.Vertices)
			}
		}
	}
	t.Logf("%d probes read 10^4 vertices or more; the worst vertex error is %.4f (full), %.4f (sampled)", heavy, worst[0], worst[1])
	if heavy < 50 {
		t.Errorf("only %d probes read 10^4 vertices or more", heavy)
	}
}

// A build sampled to a tenth of the demo points still ranks tiles and boxes
// like PostGIS; its totals are within 5%.
func TestAccuracySampled(t *testing.T) {
	pool := testenv.ReadPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rel := demoRelations[0].rel
	m, err := density.Build(ctx, pool, rel, density.Options{SampleRows: 24_000})
	if err != nil {
		t.Fatal(err)
	}
	s := m.Summary()
	t.Logf("model: %+v", s)
	if math.Abs(s.Sampled-0.1) > 0.01 || relErr(s.Rows, 240_000) > 0.05 {
		t.Errorf("sampled %.3f of the rows, scaled back to %.0f: want 0.1 and 240000", s.Sampled, s.Rows)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	at := anchors(ctx, t, pool, rel, 500)
	checkFidelity(ctx, t, pool, rel, m, slices.Concat(tileProbes(rng, rel, at, 6, 6), edgeTileProbes(rng, rel, at), areaProbes(rng, rel, at, 60)))
}
