package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// prepareFlags are the flags of `geotoll prepare`.
type prepareFlags struct {
	force  bool
	only   string
	every  time.Duration
	role   string
	retain time.Duration
	prune  bool
}

// prepareCommand is `geotoll prepare`.
func (c *cli) prepareCommand() *ffcli.Command {
	var p prepareFlags
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&p.force, "force", false, "rebuild storage that is current")
		fs.StringVar(&p.only, "layer", "", "comma-separated layers to prepare (default: every layer)")
		fs.DurationVar(&p.every, "every", 0, "keep running: prepare again after this long (e.g. 10m); 0 runs once")
		fs.StringVar(&p.role, "reader-role", serving.DefaultReaderRole, "the role that serves tiles: storage is granted to it")
		fs.DurationVar(&p.retain, "retain", 10*time.Minute, "keep replaced storage this long before dropping it (servers read it until they re-read the registry)")
		fs.BoolVar(&p.prune, "prune", false, "also retire the storage of layers the configuration does not have (not with -layer)")
	}
	return c.command("prepare", "build every layer's serving storage (overviews, pieces), as the schema owner", "", flags,
		noArgs("prepare", func(ctx context.Context) error {
			cfg, log, err := c.configAndLog()
			if err != nil {
				return err
			}
			return prepare(ctx, cfg, log, p, c.stdout)
		}))
}

// prepare runs `geotoll prepare`: it builds every layer's serving storage
// (see package serving) as the schema owner, once, or again every -every
// until ctx ends. It fails when a layer failed (in a single run).
func prepare(ctx context.Context, cfg Config, log *slog.Logger, p prepareFlags, stdout io.Writer) error {
	if p.every != 0 && p.every < time.Second {
		return usageError{fmt.Sprintf("prepare: -every %s must be 0 (once) or at least 1s", p.every)}
	}
	if p.prune && p.only != "" {
		return usageError{"prepare: -prune retires the storage of every layer the configuration does not have; with -layer, it would not know the others"}
	}
	if p.retain < 2*cfg.Tiles.StorageRefresh {
		return usageError{fmt.Sprintf("prepare: -retain %s must be at least twice tiles.storage_refresh (%s): servers read replaced storage until they re-read the registry",
			p.retain, cfg.Tiles.StorageRefresh)}
	}
	discover := len(cfg.Tiles.Discover.Schemas) > 0
	if p.only != "" && !discover {
		// The configuration's layers are all there are: a name that is
		// not one of them is refused before connecting.
		catalog, err := cfg.tileCatalog(nil)
		if err != nil {
			return err
		}
		if _, err := selectLayers(catalog, p.only, false); err != nil {
			return err
		}
	}
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	discovered, err := prepareDiscover(ctx, cfg, pool)
	if err != nil {
		return err
	}
	catalog, err := cfg.tileCatalog(discovered)
	if err != nil {
		return err
	}
	layers, err := selectLayers(catalog, p.only, discover)
	if err != nil {
		return err
	}
	opts := serving.Options{ReaderRole: p.role, Force: p.force, Retain: p.retain, Logger: log}
	if p.prune {
		opts.Prune = func(layer string) bool { return catalog.Layer(layer) == nil }
	}
	for {
		results := serving.Prepare(ctx, pool, layers, opts)
		writeResults(stdout, results)
		failed := slices.ContainsFunc(results, func(r serving.Result) bool { return r.Status == serving.Failed })
		if p.every == 0 {
			if failed {
				return errors.New("prepare: some layers (or the drop of retired storage) failed (see above)")
			}
			return nil
		}
		opts.Force = false // -force applies to the first run only
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.every):
		}
	}
}

// prepareDiscover finds the layers tiles.discover serves, as serve finds
// them: through the read role (database.url) when it is set, so that
// prepare builds for the tables serve will serve, not for every table the
// schema owner can read.
func prepareDiscover(ctx context.Context, cfg Config, admin *pgxpool.Pool) ([]tiles.Layer, error) {
	if len(cfg.Tiles.Discover.Schemas) == 0 {
		return nil, nil
	}
	q := admin
	if cfg.Database.URL != "" && cfg.Database.URL != cfg.Database.AdminURL {
		reader, err := openPool(ctx, cfg.Database.URL, cfg)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		defer reader.Close()
		q = reader
	}
	dctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	discovered, err := cfg.discoverLayers(dctx, q)
	if err != nil {
		return nil, fmt.Errorf("tiles.discover: %w", err)
	}
	return discovered, nil
}

// selectLayers returns the catalog's layers named in list ("" for all).
// A name the catalog does not have is a wrong command line (usageError);
// discovered says the catalog holds the layers tiles.discover found too.
func selectLayers(c *tiles.Catalog, list string, discovered bool) ([]*tiles.Layer, error) {
	if list == "" {
		return c.Layers(), nil
	}
	where := "configured"
	if discovered {
		where = "configured or discovered"
	}
	var out []*tiles.Layer
	for _, name := range strings.Split(list, ",") {
		l := c.Layer(name)
		if l == nil {
			return nil, usageError{fmt.Sprintf("prepare: -layer: no layer %q is %s", name, where)}
		}
		out = append(out, l)
	}
	return out, nil
}

// writeResults prints one line per layer and builder.
func writeResults(w io.Writer, results []serving.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "layer\tbuilder\tstatus\trelations\trows\tsource rows\trepaired\ttook\terror or reason")
	for _, r := range results {
		msg := r.Reason // why it was skipped
		if r.Err != nil {
			msg = r.Err.Error()
		}
		layer := r.Layer
		if layer == "" {
			layer = "-" // the drop of retired storage, of every layer
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", layer, r.Builder, r.Status, r.Relations, r.Rows,
			r.SourceRows, r.Repaired, r.Took.Round(time.Millisecond), msg)
	}
	_ = tw.Flush()
}
