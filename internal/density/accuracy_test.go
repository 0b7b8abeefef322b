package density_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// minRho is the rank correlation every relation's estimates must reach
// against PostGIS's exact counts.
const minRho = 0.95

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
			checkFidelity(ctx, t, pool, d.rel, m, tileProbes(rng, d.rel, at, 6, 6), "tiles")
			checkFidelity(ctx, t, pool, d.rel, m, areaProbes(rng, d.rel, at, 60), "areas")
		})
	}
}

// checkFidelity measures probes and requires minRho on features and
// vertices, and estimates of at most 0.5 feature where PostGIS reads nothing.
func checkFidelity(ctx context.Context, t *testing.T, pool interface{}, rel density.Relation, m *density.Model, probes []probe, what string) {
	t.Helper()
	f := measure(ctx, t, testenv.ReadPool(t), rel, m, probes)
	t.Logf("%s: %s", what, f)
	if f.rhoN < minRho || f.rhoV < minRho {
		t.Errorf("%s: ρ(features) %.3f, ρ(vertices) %.3f: want ≥ %.2f", what, f.rhoN, f.rhoV, minRho)
	}
}
