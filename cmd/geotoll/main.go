// Command geotoll serves Mapbox Vector Tiles and geofence queries from
// PostGIS and charges every request what it will cost from the caller's
// token bucket in Redis.
//
//	geotoll serve      serve the HTTP API
//	geotoll migrate    apply the embedded schema migrations
//	geotoll seed       load the deterministic demo data (-if-empty, -seed N)
//	geotoll prepare    build every layer's serving storage (overviews, pieces)
//	geotoll keys       create | list | revoke API keys
//	geotoll loadtest   a paced, bounded load against a running geotoll, or a
//	                   measuring instrument (fidelity | zooms | ceiling | crawl)
//	geotoll calibrate  time a sample of requests per layer; fit and write the
//	                   work models that price them (throttle.weights_file)
//	geotoll opendata   load real open data (npm packages) into schema opendata
//	geotoll config     check | example | doc
//	geotoll version    (or --version)
//
// Configuration: DefaultConfig, then the YAML file of -config, then the
// environment (GEOTOLL_<KEY>, and the older names of envAliases), then
// flags (-<key>), given before or after the command; see setting for the
// naming rule and README.md for the reference.
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
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/migrations"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// The first stop signal ends ctx; the ones after it stay for serve,
	// whose shutdown delay a second one ends (laterSignals).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals()...)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sigs
		cancel()
	}()
	laterSignals = sigs
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	cancel()
	os.Exit(code)
}

// stopSignals are the signals that end a command, serve gracefully:
// SIGINT, SIGTERM and SIGHUP. SIGHUP — a closed terminal's, or a
// supervisor's reload — stops as SIGTERM does: geotoll reloads nothing
// (restart it to read a changed configuration), and Go's default for it,
// dying at once, would lose the requests in flight, their settlements and
// their leases. Unless it was started ignoring SIGHUP (nohup): asking for
// it would undo that, and the closed terminal would stop it.
func stopSignals() []os.Signal {
	if signal.Ignored(syscall.SIGHUP) {
		return []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	}
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
}

// laterSignals receives the stop signals after the first, which
// ended the command's context (main); nil where main did not start the
// command (tests), where drain listens for them itself.
var laterSignals <-chan os.Signal

func newLogger(cfg Config, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	opts.ReplaceAttr = durationText
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// durationText writes a duration as the text format does ("1.5s"), not as
// the JSON handler's nanoseconds. (The access log's duration_ms is a
// number of its own, for dashboards.)
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// adminPool opens the admin role's pool of keys, migrate and seed, each
// connection opened within database.connect_timeout (unless the URL sets
// its own): a database that accepts TCP and never answers is an error
// after it, not after the ping's 10 s.
func adminPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	if cfg.Database.AdminURL == "" {
		return nil, errors.New("no database: set DATABASE_URL or GEOTOLL_ADMIN_DATABASE_URL")
	}
	pool, err := openPool(ctx, cfg.Database.AdminURL, cfg)
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

// openPool is a pool of url whose connections are each opened within
// database.connect_timeout (unless url sets its own connect_timeout): a
// database that accepts TCP and never answers (paused, or behind a
// half-open proxy) fails the command instead of hanging it. It connects
// when first used.
func openPool(ctx context.Context, url string, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, redactURLError(err)
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = cfg.Database.ConnectTimeout
	}
	return pgxpool.NewWithConfig(ctx, pcfg)
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

// seedCommand is `geotoll seed`.
func (c *cli) seedCommand() *ffcli.Command {
	var (
		ifEmpty        bool
		seedN          uint64
		points, fences int
	)
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&ifEmpty, "if-empty", false, "do nothing when the demo tables already hold data")
		fs.Uint64Var(&seedN, "seed", 1, "random seed: same seed, same data")
		fs.IntVar(&points, "points", 240000, "number of clustered points")
		fs.IntVar(&fences, "fences", 300, "number of geofences")
	}
	return c.command("seed", "load the deterministic demo data (as the schema owner)", "", flags, noArgs("seed", func(ctx context.Context) error {
		cfg, log, err := c.configAndLog()
		if err != nil {
			return err
		}
		if points < 1 || fences < 1 { // before connecting; 0 would be demo.Options's default
			return usageError{fmt.Sprintf("seed: -points %d and -fences %d must be at least 1", points, fences)}
		}
		return seed(ctx, cfg, log, demo.Options{Seed: seedN, Points: points, Fences: fences}, ifEmpty)
	}))
}

func seed(ctx context.Context, cfg Config, log *slog.Logger, o demo.Options, ifEmpty bool) error {
	if err := o.Validate(); err != nil {
		return usageError{"seed: " + err.Error()}
	}
	pool, err := adminPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if ifEmpty {
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
	data := demo.Generate(o)
	if err := demo.Load(ctx, pool, data); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	log.Info("demo data loaded", "places", len(data.Places), "districts", len(data.Districts),
		"geofences", len(data.Fences), "seed", o.Seed, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}
