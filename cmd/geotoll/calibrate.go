package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/calibrate"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/loadtest"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// calibrateFlags are the options of `geotoll calibrate`.
type calibrateFlags struct {
	layers          string
	geofence        bool
	perZoom         int
	queries         int
	runs            int
	minZoom         int
	maxZoom         int
	seed            uint64
	out             string
	verbose         bool
	anchorsPerLayer int
}

// calibrateCommand is `geotoll calibrate`: it fits the work models that
// price requests to this database (see runCalibrate).
func (c *cli) calibrateCommand() *ffcli.Command {
	var f calibrateFlags
	flags := func(fs *flag.FlagSet) { f.register(fs) }
	return c.command("calibrate", "time a sample of requests per layer and fit the work models that price them", "", flags,
		noArgs("calibrate", func(ctx context.Context) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if err := f.validate(); err != nil {
				return usageError{err.Error()}
			}
			return runCalibrate(ctx, cfg, f, c.stdout, c.stderr)
		}))
}

func (f *calibrateFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.layers, "layers", "", "tile layers to calibrate, comma-separated (default: every layer)")
	fs.BoolVar(&f.geofence, "geofence", true, "calibrate the geofence layers and the fences too")
	fs.IntVar(&f.perZoom, "per-zoom", 8, "tiles per zoom and layer (half where the layer has data)")
	fs.IntVar(&f.queries, "queries", 24, "geofence requests per kind and layer")
	fs.IntVar(&f.runs, "runs", 3, "timed runs of each request after the first")
	fs.IntVar(&f.minZoom, "minzoom", 0, "lowest zoom timed")
	fs.IntVar(&f.maxZoom, "maxzoom", 16, "highest zoom timed")
	fs.Uint64Var(&f.seed, "seed", 1, "sample seed")
	fs.StringVar(&f.out, "out", "", "weights file to write (default: throttle.weights_file of the config; '-' for standard output)")
	fs.BoolVar(&f.verbose, "v", false, "one line per timed request")
}

func (f *calibrateFlags) validate() error {
	if f.perZoom < 1 || f.queries < 1 || f.runs < 1 || f.minZoom < 0 || f.maxZoom > int(tiles.MaxZoom) || f.minZoom > f.maxZoom {
		return fmt.Errorf("calibrate: -per-zoom, -queries and -runs at least 1, 0 <= -minzoom <= -maxzoom <= %d", tiles.MaxZoom)
	}
	f.anchorsPerLayer = 500
	return nil
}

// runCalibrate fits the work models that price requests to this database:
// see internal/calibrate. It writes them to the weights file that serve,
// with the same config, reads.
// keptModels are the models of the weights file out that a run keeps. The
// fit replaces the work models of what it fits: it neither needs nor
// trusts the file it is about to write for them. The file's models of what
// it does not fit are kept (read now: an unreadable file fails before the
// fit, not after), but for those of layers the config no longer has, which
// are named on stderr: serve refuses a file that names one
// (calibrate.File.Within).
func keptModels(cfg Config, out string, stderr io.Writer) (calibrate.File, error) {
	var kept calibrate.File
	if out == "-" {
		return kept, nil
	}
	if _, err := os.Stat(out); err == nil {
		if kept, err = readWeightsFile(out); err != nil {
			return kept, fmt.Errorf("calibrate: %w (its models of the layers not fitted now would be kept: fix it, remove it, or write elsewhere with -out)", err)
		}
	}
	kept, dropped := kept.Within(cfg.hasTileLayer, cfg.hasFenceLayer)
	if len(dropped) > 0 {
		fmt.Fprintf(stderr, "calibrate: %s drops the models of %s: not in the config\n", out, strings.Join(dropped, ", "))
	}
	return kept, nil
}

// checkWeightsOut fails, before the run, when the weights file out
// ("-": standard output) cannot be written; flag tells whether -out named
// it (a usage error) or throttle.weights_file.
func checkWeightsOut(out string, flag bool) error {
	if out == "-" {
		return nil
	}
	err := checkOutFile(out)
	switch {
	case err == nil:
		return nil
	case flag:
		return usageError{"calibrate: -out: " + err.Error()}
	}
	return fmt.Errorf("calibrate: throttle.weights_file: %w", err)
}

func runCalibrate(ctx context.Context, cfg Config, f calibrateFlags, stdout, stderr io.Writer) error {
	out := f.out
	if out == "" {
		out = cfg.Throttle.WeightsFile
	}
	if out == "" {
		out = "-"
	}
	if err := checkWeightsOut(out, f.out != ""); err != nil {
		return err
	}
	kept, err := keptModels(cfg, out, stderr)
	if err != nil {
		return err
	}
	cfg.Throttle.WeightsFile = ""
	catalog, _, err := cfg.catalog()
	if err != nil {
		return err
	}
	tileLayers := catalog.Layers()
	if f.layers != "" {
		tileLayers = nil
		for _, name := range strings.Split(f.layers, ",") {
			l := catalog.Layer(strings.TrimSpace(name))
			if l == nil {
				return usageError{fmt.Sprintf("calibrate: -layers: unknown layer %q", name)}
			}
			tileLayers = append(tileLayers, l)
		}
	}
	if cfg.Database.URL == "" {
		return errors.New("calibrate: set DATABASE_URL (the read role)")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return fmt.Errorf("calibrate: database url: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "geotoll-calibrate"
	cfg.Database.tunePool(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Time what serve runs: the overviews `geotoll prepare` built, if any.
	if _, err := catalog.Refresh(ctx, pool); err != nil {
		fmt.Fprintf(stderr, "calibrate: serving registry not read, timing the layer's table at every zoom: %v\n", err)
	}

	o, err := calibrateOptions(ctx, cfg, f, pool, tileLayers, stderr)
	if err != nil {
		return err
	}
	rep, err := calibrate.Run(ctx, o)
	if err != nil {
		return err
	}
	rep.WriteText(stderr)
	if err := writeWeights(rep, kept, out, stdout, stderr); err != nil {
		return err
	}
	var failed []string
	for _, g := range rep.Groups {
		if g.Err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", g.Name, g.Err))
		}
	}
	if len(failed) > 0 {
		// What fitted is written; serve prices the rest as before.
		return fmt.Errorf("calibrate: no model fitted for %s", strings.Join(failed, ", "))
	}
	return nil
}

// writeWeights writes the fitted work models to out ("-": stdout), over
// kept (the file's models before), headed by where and when they were
// fitted and how well they rank.
func writeWeights(rep calibrate.Report, kept calibrate.File, out string, stdout, stderr io.Writer) error {
	header := []string{
		fmt.Sprintf("Work models fitted by `geotoll calibrate` on %s, %s:", hostname(), time.Now().UTC().Format(time.RFC3339)),
		"milliseconds of database time per query, per feature read and per vertex read.",
		"Held-out Spearman ρ (price, settled cost) against measured time:",
	}
	for _, g := range rep.Groups {
		if g.Err == nil {
			header = append(header, fmt.Sprintf("  %-24s %.3f, %.3f over %d requests", g.Name, g.RhoEst, g.RhoSett, g.HeldOut))
		}
	}
	file := kept.Merge(rep.File())
	if len(kept.Tiles)+len(kept.Geofence)+len(kept.Containment) > 0 || kept.Fences != nil {
		header = append(header, "Models of what that run did not fit are kept from the file before it.")
	}
	if out == "-" {
		return file.Write(stdout, header)
	}
	var buf strings.Builder
	if err := file.Write(&buf, header); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, []byte(buf.String()), 0o644); err != nil { //nolint:gosec // G306: the weights file is read by the server, which may run as another user
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: serve reads it with throttle.weights_file: %s\n", out, filepath.Clean(out))
	return nil
}

// calibrateOptions builds the models (now: calibrate needs them built) and
// draws the anchors of every layer.
func calibrateOptions(ctx context.Context, cfg Config, f calibrateFlags, pool *pgxpool.Pool, tileLayers []*tiles.Layer, stderr io.Writer) (calibrate.Options, error) {
	var fenceLayers []geofence.Layer
	if f.geofence {
		fenceLayers = cfg.Geofence.Layers
	}
	models := pricing.NewModels(pool, density.Options{})
	est, err := pricing.ForLayers(ctx, pool, models, tileLayers, fenceLayers)
	if err != nil {
		return calibrate.Options{}, err
	}
	fmt.Fprintln(stderr, "calibrate: building the density models…")
	if err := models.Build(ctx); err != nil {
		return calibrate.Options{}, err
	}
	toll, err := cfg.toll()
	if err != nil {
		return calibrate.Options{}, err
	}
	gcat, err := geofence.NewCatalog(fenceLayers)
	if err != nil {
		return calibrate.Options{}, err
	}
	gstore := geofence.NewStore(pool)
	gstore.Timeout = cfg.Geofence.StatementTimeout
	o := calibrate.Options{
		Tiles: tiles.NewStore(pool), Estimator: est, TileLayers: tileLayers,
		Anchors: map[string][]orb.Point{}, Limits: cfg.Geofence.Limits,
		PerZoom: f.perZoom, Queries: f.queries, Runs: f.runs, Seed: f.seed, MinZoom: f.minZoom, MaxZoom: f.maxZoom,
		MsPerToken: cfg.Throttle.MsPerToken, Charged: toll.Charged,
		Weights: func(group string) throttle.Weights {
			if name, ok := strings.CutPrefix(group, "tiles/"); ok {
				if w, ok := toll.LayerWeights[name]; ok {
					return w
				}
			}
			return toll.Default
		},
	}
	if f.verbose {
		o.Progress = stderr
	}
	for _, l := range tileLayers {
		if o.Anchors[l.Name], err = loadtest.Anchors(ctx, pool, l, f.anchorsPerLayer, f.seed); err != nil {
			return o, err
		}
	}
	if !f.geofence {
		return o, nil
	}
	o.Geofence = gstore
	for _, lc := range fenceLayers {
		l, err := gcat.Resolve(lc.Name)
		if err != nil {
			return o, err
		}
		o.GeofenceLayers = append(o.GeofenceLayers, l)
		table := pgx.Identifier(strings.Split(l.Table, ".")).Sanitize()
		if o.Anchors["geofence/"+l.Name], err = loadtest.AnchorsOf(ctx, pool, table, "t."+pgx.Identifier{l.GeometryColumn}.Sanitize(), f.anchorsPerLayer, f.seed); err != nil {
			return o, err
		}
	}
	fences := pricing.Fences
	o.FenceAnchors, err = loadtest.AnchorsOf(ctx, pool, fences.Table.Sanitize(), "ST_PointOnSurface(t."+pgx.Identifier{fences.GeometryColumn}.Sanitize()+")", f.anchorsPerLayer, f.seed)
	if err != nil {
		return o, err
	}
	slices.SortFunc(o.GeofenceLayers, func(a, b *geofence.Layer) int { return strings.Compare(a.Name, b.Name) })
	return o, containmentOptions(ctx, &o, gcat, pool, stderr)
}

// containmentOptions adds the polygon layers whose contains and check
// calibrate times, on what serve reads for each (the pieces `geotoll
// prepare` cut, or the table).
func containmentOptions(ctx context.Context, o *calibrate.Options, gcat *geofence.Catalog, pool *pgxpool.Pool, stderr io.Writer) error {
	warnings, err := gcat.LoadContainment(ctx, pool)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "calibrate: %s\n", w)
	}
	for _, l := range o.GeofenceLayers {
		ct, err := gcat.Containment(l.Name)
		if err != nil {
			continue // not a polygon layer (just loaded): no contains or check on it
		}
		o.Containment = append(o.Containment, ct)
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "an unnamed host"
	}
	return h
}
