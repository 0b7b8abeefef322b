package serving_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// coasts are five coasts of large, detailed and (but Chile) invalid
// country borders of opendata.countries: Norway, Chile, Canada, Greece,
// Alaska.
var coasts = []orb.Point{{5.3, 60.4}, {-73.5, -45.5}, {-127.5, 52.0}, {23.5, 38.0}, {-150, 60.5}}

// BenchmarkCountriesPerZoom times, per zoom z0–z14, the tiles over five
// coasts of layer countries (opendata.countries, loadtest/opendata.yaml,
// after `geotoll opendata` and `geotoll prepare`) as served — overviews
// up to z7, pieces above — and read from the table, in the same run, as
// the read role given by GEOTOLL_BENCH_READ_DATABASE_URL (skipped
// without). The table is read from z5 on only: its z0–z4 tiles run for
// minutes and cannot be cancelled. Run with -benchtime=1x; ms/tile is the
// metric.
func BenchmarkCountriesPerZoom(b *testing.B) {
	pool, served, table := countriesBench(b)
	store := tiles.NewStore(pool)
	for z := maptile.Zoom(0); z <= 14; z++ {
		for _, c := range []struct {
			name string
			cat  *tiles.Catalog
		}{{"served", served}, {"table", table}} {
			if c.name == "table" && z < 5 {
				continue
			}
			l := c.cat.Layer("countries")
			b.Run(fmt.Sprintf("z%02d/%s", z, c.name), func(b *testing.B) {
				start := time.Now()
				n := 0
				for b.Loop() {
					for _, p := range coasts {
						if _, err := store.Render(b.Context(), []*tiles.Layer{l}, maptile.At(p, z)); err != nil {
							b.Fatalf("%v from %s: %v", maptile.At(p, z), l.Source(z).Relation.Sanitize(), err)
						}
						n++
					}
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(n), "ms/tile")
			})
		}
	}
}

// countriesBench connects as the read role GEOTOLL_BENCH_READ_DATABASE_URL
// names (skipping b without it) and returns the pool, closed when b ends,
// and layer countries of loadtest/opendata.yaml twice: served, reading
// the storage `geotoll prepare` registered, and table, reading its table.
func countriesBench(b *testing.B) (pool *pgxpool.Pool, served, table *tiles.Catalog) {
	url := os.Getenv("GEOTOLL_BENCH_READ_DATABASE_URL")
	if url == "" {
		b.Skip("GEOTOLL_BENCH_READ_DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	layer := func() *tiles.Catalog {
		c, err := tiles.NewCatalog([]tiles.Layer{{
			Name: "countries", Table: "opendata.countries", GeometryColumn: "geom_3857", SRID: 3857,
			Properties: []string{"a3", "vertices", "valid"}, MaxFeatures: 5000, GeometryKind: tiles.KindPolygon,
			StatementTimeout: time.Minute,
		}})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	served, table = layer(), layer()
	if _, err := served.Refresh(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	return pool, served, table
}
