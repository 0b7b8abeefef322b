package density_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// benchQueries is a realistic mix of one kind of query, half of them where
// the data is.
func benchQueries(rng *rand.Rand, kind string, at []orb.Point) []func(*density.Model) density.Estimate {
	out := make([]func(*density.Model) density.Estimate, 1024)
	for i := range out {
		a := at[rng.IntN(len(at))]
		if i%2 == 1 {
			a = orb.Point{rng.Float64()*360 - 180, rng.Float64()*160 - 80}
		}
		switch kind {
		case "tile":
			b := benchTile(rng, a)
			out[i] = func(m *density.Model) density.Estimate { return m.Rect(b) }
		case "bbox": // viewports of 0.01°–20°
			w := logUniform(rng, 0.01, 20)
			b := orb.Bound{Min: orb.Point{a[0] - w, a[1] - w/2}, Max: orb.Point{a[0] + w, a[1] + w/2}}
			out[i] = func(m *density.Model) density.Estimate { return m.BBox(b) }
		case "circle": // radii of 50 m – 50 km
			r := logUniform(rng, 50, 50_000)
			out[i] = func(m *density.Model) density.Estimate { return m.Circle(a, r) }
		case "point":
			out[i] = func(m *density.Model) density.Estimate { return m.Point(a) }
		}
	}
	return out
}

// benchTile is the envelope, with the default buffer, of the tile holding a
// at a zoom drawn from 0–16.
func benchTile(rng *rand.Rand, a orb.Point) orb.Bound {
	z := rng.IntN(17)
	x, y := tileAt(z, a[0], a[1])
	return tileBound(z, x, y, 64.0/4096)
}

// BenchmarkEstimate estimates tiles, bboxes, circles and points on the
// models of the demo relations.
func BenchmarkEstimate(b *testing.B) {
	pool := testenv.ReadPool(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range demoRelations {
		if d.name == "districts_4326" || d.name == "places_4326" {
			continue // the same data as their EPSG:3857 twins
		}
		m, err := density.Build(ctx, pool, d.rel, density.Options{})
		if err != nil {
			b.Fatal(err)
		}
		at := anchors(ctx, b, pool, d.rel, 500)
		for _, kind := range []string{"tile", "bbox", "circle", "point"} {
			b.Run(kind+"/"+d.name, func(b *testing.B) {
				queries := benchQueries(rand.New(rand.NewPCG(3, 4)), kind, at)
				var sink float64
				b.ReportAllocs()
				// The loop's own thread's CPU time, which other processes on a
				// busy machine do not inflate as they do wall time.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := testenv.ThreadCPU()
				for i := 0; b.Loop(); i++ {
					sink += queries[i&1023](m).Features
				}
				if end := testenv.ThreadCPU(); start >= 0 && end >= start {
					b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
				}
				if math.IsNaN(sink) {
					b.Fatal("NaN estimate")
				}
			})
		}
	}
}

// BenchmarkExactCount is the baseline of BenchmarkEstimate/tile: asking
// PostGIS instead — count(*) and sum(ST_NPoints) of what the tile's &&
// reads — for the same mix of tiles, on the read role's pool.
func BenchmarkExactCount(b *testing.B) {
	pool := testenv.ReadPool(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, d := range demoRelations {
		if d.name != "places_3857" && d.name != "districts_3857" {
			continue
		}
		at := anchors(ctx, b, pool, d.rel, 500)
		b.Run("tile/"+d.name, func(b *testing.B) {
			// The same tiles as BenchmarkEstimate/tile draws.
			rng := rand.New(rand.NewPCG(3, 4))
			bounds := make([]orb.Bound, 1024)
			for i := range bounds {
				a := at[rng.IntN(len(at))]
				if i%2 == 1 {
					a = orb.Point{rng.Float64()*360 - 180, rng.Float64()*160 - 80}
				}
				bounds[i] = benchTile(rng, a)
			}
			sql := "SELECT count(*)::float8, coalesce(sum(ST_NPoints(t." + d.rel.GeometryColumn + ")), 0)::float8 FROM " +
				d.rel.Table.Sanitize() + " AS t WHERE t." + d.rel.GeometryColumn + " && ST_MakeEnvelope($1, $2, $3, $4, 3857)"
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				bd := bounds[i&1023]
				var n, v float64
				if err := pool.QueryRow(ctx, sql, bd.Min[0], bd.Min[1], bd.Max[0], bd.Max[1]).Scan(&n, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuild builds the models of the demo relations and of a million
// points — clustered around the demo's cities, and spread evenly — in
// scratch tables (EPSG:3857) dropped afterwards. Metrics: cells, the
// model's bytes, and the rows it holds; B/op is what the build allocates.
func BenchmarkBuild(b *testing.B) {
	pool := testenv.ReadPool(b)
	type target struct {
		name string
		rel  density.Relation
		opts density.Options
	}
	var targets []target
	for _, d := range demoRelations {
		targets = append(targets, target{d.name, d.rel, density.Options{}})
	}
	clustered := millionPoints(b, "density_bench_clustered", `
		SELECT ST_Transform(ST_SetSRID(ST_MakePoint(
			ST_X(p.geom) + 0.01 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()),
			greatest(-85, least(85, ST_Y(p.geom) + 0.01 * sqrt(-2 * ln(1 - random())) * sin(2 * pi() * random())))), 4326), 3857)
		FROM geotoll.places AS p, generate_series(1, 5) AS k
		LIMIT 1000000`)
	even := millionPoints(b, "density_bench_even", `
		SELECT ST_Transform(ST_SetSRID(ST_MakePoint(random() * 360 - 180, random() * 170 - 85), 4326), 3857)
		FROM generate_series(1, 1000000)`)
	targets = append(targets,
		target{"points_1M_clustered", clustered, density.Options{}},
		target{"points_1M_clustered_sampled_10pct", clustered, density.Options{SampleRows: 100_000}},
		target{"points_1M_even", even, density.Options{}},
	)
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			var s density.Summary
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				m, err := density.Build(ctx, pool, tg.rel, tg.opts)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				s = m.Summary()
			}
			b.ReportMetric(float64(s.Cells), "cells")
			b.ReportMetric(float64(s.Bytes), "model-B")
			b.ReportMetric(s.Rows, "rows")
			b.ReportMetric(float64(s.Level), "level")
		})
	}
}

// millionPoints fills a scratch point table (EPSG:3857) with the rows of
// query and analyses it.
func millionPoints(b *testing.B, prefix, query string) density.Relation {
	b.Helper()
	rel, owner := scratchTableSRID(b, prefix, "Point", 3857, density.Point)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, stmt := range []string{"INSERT INTO " + rel.Table.Sanitize() + " (geom) " + query, "ANALYZE " + rel.Table.Sanitize()} {
		if _, err := owner.Exec(ctx, stmt); err != nil {
			b.Fatalf("%s: %v", stmt, err)
		}
	}
	return rel
}
