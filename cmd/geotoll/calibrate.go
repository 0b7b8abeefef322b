package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// calibrate times real tile queries per zoom against the database and
// suggests an area_weight that makes a tile's price proportional to its
// database time: a query that runs 10×
// longer should cost roughly 10× the tokens.
func (c *cli) calibrateCommand() *ffcli.Command {
	var (
		layerName           string
		samples, minZ, maxZ int
	)
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&layerName, "layer", "places", "tile layer to calibrate")
		fs.IntVar(&samples, "samples", 8, "tiles per zoom (around the first N demo cities)")
		fs.IntVar(&minZ, "minzoom", 4, "lowest zoom timed")
		fs.IntVar(&maxZ, "maxzoom", 16, "highest zoom timed")
	}
	return c.command("calibrate", "time tile queries per zoom and suggest cost weights", "", flags, func(ctx context.Context, _ []string) error {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		return calibrate(ctx, cfg, calibration{layerName, samples, minZ, maxZ}, c.stdout, c.stderr)
	})
}

// calibration is what `geotoll calibrate` times: a layer, the cities
// sampled per zoom, the zooms.
type calibration struct {
	layer               string
	samples, minZ, maxZ int
}

func calibrate(ctx context.Context, cfg Config, o calibration, stdout, stderr io.Writer) error {
	layerName, samples, minZ, maxZ := &o.layer, &o.samples, &o.minZ, &o.maxZ
	if *samples < 1 || *samples > len(demo.Cities) || *minZ < 0 || *maxZ > int(tiles.MaxZoom) || *minZ > *maxZ {
		return fmt.Errorf("calibrate: -samples 1..%d, 0 <= -minzoom <= -maxzoom <= %d", len(demo.Cities), tiles.MaxZoom)
	}
	catalog, weights, err := cfg.catalog()
	if err != nil {
		return err
	}
	layer := catalog.Layer(*layerName)
	if layer == nil {
		return fmt.Errorf("calibrate: unknown layer %q", *layerName)
	}
	if cfg.Database.URL == "" {
		return errors.New("calibrate: set DATABASE_URL (the read role)")
	}
	pool, err := pgxpool.New(ctx, cfg.Database.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Time what serve runs: the overviews `geotoll prepare` built, if any.
	if _, err := catalog.Refresh(ctx, pool); err != nil {
		fmt.Fprintf(stderr, "calibrate: serving registry not read, timing the layer's table at every zoom: %v\n", err)
	}
	store := tiles.NewStore(pool)
	w := weights[layer.Name]

	var rows []calibrationRow
	for z := max(*minZ, layer.MinZoom); z <= min(*maxZ, layer.MaxZoom); z++ {
		row := calibrationRow{Zoom: z}
		var times []float64
		for _, c := range demo.Cities[:*samples] {
			t := maptile.At(orb.Point{c.Lon, c.Lat}, maptile.Zoom(z))
			_, _ = store.Tile(ctx, []*tiles.Layer{layer}, t) // warm the page cache and the plan
			start := time.Now()
			b, err := store.Tile(ctx, []*tiles.Layer{layer}, t)
			if problem.From(err).Code == problem.Timeout {
				row.Timeouts++ // counted at the timeout: a lower bound of its real time
			} else if err != nil {
				return fmt.Errorf("calibrate: z%d: %w", z, err)
			}
			times = append(times, float64(time.Since(start).Microseconds())/1000)
			row.Bytes += len(b)
			row.Area += areaOf(t)
			row.Price += w.Tile(t)
		}
		n := float64(len(times))
		row.Area /= n
		row.Price /= n
		row.Bytes /= len(times)
		slices.Sort(times)
		row.MedianMS = times[len(times)/2]
		rows = append(rows, row)
	}
	writeCalibration(stdout, layer.Name, w, rows)
	return nil
}

type calibrationRow struct {
	Zoom     int
	Area     float64 // mean square degrees
	MedianMS float64
	Bytes    int
	Price    float64
	Timeouts int // queries that hit the layer's statement_timeout
}

func areaOf(t maptile.Tile) float64 {
	b := t.Bound()
	return (b.Max[0] - b.Min[0]) * (b.Max[1] - b.Min[1])
}

// suggestAreaWeight fits ms = a + b × area over the rows whose price is not
// clamped at max_cost, and returns the area weight that prices a tile in
// proportion to its time: base tokens buy a ms, so area_weight = base × b / a.
// ok is false when there are fewer than two usable rows or the fit is not
// increasing.
func suggestAreaWeight(rows []calibrationRow, w throttle.Weights) (weight float64, ok bool) {
	var xs, ys []float64
	for _, r := range rows {
		if r.Price < w.MaxCost {
			xs = append(xs, r.Area)
			ys = append(ys, r.MedianMS)
		}
	}
	a, b, ok := fitLine(xs, ys)
	if !ok || a <= 0 || b <= 0 {
		return 0, false
	}
	return w.Base * b / a, true
}

// fitLine is ordinary least squares of y = a + b·x.
func fitLine(xs, ys []float64) (a, b float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 || math.IsNaN(den) {
		return 0, 0, false
	}
	b = (n*sxy - sx*sy) / den
	a = (sy - b*sx) / n
	return a, b, true
}

func writeCalibration(out io.Writer, layer string, w throttle.Weights, rows []calibrationRow) {
	fmt.Fprintf(out, "layer %s: base %g, area_weight %g, max_cost %g\n\n", layer, w.Base, w.AreaWeight, w.MaxCost)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "zoom\tarea deg²\tmedian ms\tbytes\tprice\tms per token\ttimeouts\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.4g\t%.2f\t%d\t%.2f\t%.3f\t%d\t\n", r.Zoom, r.Area, r.MedianMS, r.Bytes, r.Price, r.MedianMS/r.Price, r.Timeouts)
	}
	tw.Flush()
	if s, ok := suggestAreaWeight(rows, w); ok {
		fmt.Fprintf(out, "\nsuggested area_weight: %.4g (tiles priced in proportion to their database time; now %g)\n", s, w.AreaWeight)
	} else {
		fmt.Fprintln(out, "\nno suggestion: too few unclamped zooms, or time does not grow with area here")
	}
}
