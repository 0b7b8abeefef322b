package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/loadtest"
	"github.com/geotoll/geotoll/tiles"
)

const scenarioUsage = `Measuring instruments against a running geotoll (any build), with the layers
of FILE as that server is configured, and the database as the read role
(DATABASE_URL). The server must run with tiles.cache.max_bytes 0 (fidelity,
ceiling and zooms -db-time server fail at the first tile it answers from
its cache) and the key's
tier must never refuse (loadtest/opendata.yaml does both).

scenarios:
  fidelity  sampled tiles: dry-run price, X-Request-Cost and database time; Spearman ρ
  zooms     per zoom: bytes, features and database time
  ceiling   dense z14 and z8-10 tiles: pgbench (same SQL) against geotoll, identity and gzip,
            and where this host's CPU went in each run (Linux)`

// Bounds of the scenarios' flags: a run is aimed and bounded on purpose,
// as the load test's rate and duration are.
const (
	maxFidelityTiles  = 2000             // fidelity -tiles
	maxPerZoom        = 256              // zooms -per-zoom
	maxCeilingClients = 256              // ceiling -clients (pgbench's connections, and geotoll's)
	maxWarm           = 1000             // ceiling -warm: tiles a connection serves before it counts
	defaultThreads    = 2                // ceiling -threads, when -clients is as many or more
	maxZoom           = 22               // -minzoom, -maxzoom
	maxDBTimeout      = 10 * time.Minute // -db-timeout: one timed query
	maxQuiesce        = 30 * time.Minute // -quiesce: the wait before each timed tile
)

// scenario holds the flags every scenario shares.
type scenario struct {
	client  loadtest.Client
	layer   string
	seed    uint64
	timeout time.Duration
	quiesce time.Duration
	dbTime  string
	minZ    int
	maxZ    int
}

func (s *scenario) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.client.BaseURL, "url", "http://127.0.0.1:8080", "geotoll base URL")
	fs.StringVar(&s.client.Key, "key", "", "API key (X-API-Key) of a tier that never refuses")
	fs.BoolVar(&s.client.AllowRemote, "allow-remote", false, "permit a non-loopback -url")
	fs.StringVar(&s.layer, "layer", "points", "tile layer (as configured in -config)")
	fs.Uint64Var(&s.seed, "seed", 1, "sampling seed: same seed and data, same tiles")
	fs.DurationVar(&s.timeout, "db-timeout", 10*time.Second, "statement_timeout of each timed query")
	fs.StringVar(&s.dbTime, "db-time", "sql", "sql: time the layer's query of this source tree as the read role; "+
		"server: add up the server's own statements in pg_stat_statements around real requests (any build's SQL; "+
		"reads them as GEOTOLL_ADMIN_DATABASE_URL; the server's are the statements of DATABASE_URL's role)")
	fs.DurationVar(&s.quiesce, "quiesce", 5*time.Minute, "before timing a tile, wait up to this long for the read role's other statements to end")
	fs.IntVar(&s.minZ, "minzoom", 0, fmt.Sprintf("lowest zoom (0..%d)", maxZoom))
	fs.IntVar(&s.maxZ, "maxzoom", 16, fmt.Sprintf("highest zoom (0..%d; 0 is z0 alone)", maxZoom))
}

// scenarioFlags are the flags of `geotoll loadtest SCENARIO`: the shared
// ones and each scenario's. Every scenario's command registers them all,
// and refuses those it does not read (scenarioFlagUse).
type scenarioFlags struct {
	scenario
	n, perZoom, clients, threads, warm int
	jsonOut, merge                     string
	verbose                            bool
	d, warmTimeout                     time.Duration
	// threadsSet: -threads was given; unset, it is at most -clients.
	threadsSet bool
}

func (f *scenarioFlags) flags(fs *flag.FlagSet) {
	f.scenario.flags(fs)
	fs.IntVar(&f.n, "tiles", 200, fmt.Sprintf("fidelity: tiles sampled (1..%d)", maxFidelityTiles))
	fs.StringVar(&f.jsonOut, "json", "", "fidelity: also write every sample to this JSON file")
	fs.BoolVar(&f.verbose, "v", false, "print each tile (fidelity, zooms) or pgbench's output (ceiling)")
	fs.IntVar(&f.perZoom, "per-zoom", 8, fmt.Sprintf("zooms: tiles per zoom (1..%d)", maxPerZoom))
	fs.DurationVar(&f.d, "duration", 10*time.Second, fmt.Sprintf("ceiling: each run's length, whole seconds (pgbench -T), 1s..%s", loadtest.MaxDuration))
	fs.IntVar(&f.clients, "clients", 16, fmt.Sprintf("ceiling: connections (pgbench -c and geotoll's), 1..%d", maxCeilingClients))
	fs.IntVar(&f.threads, "threads", defaultThreads, "ceiling: pgbench -j (1..-clients; unset, at most -clients)")
	fs.IntVar(&f.warm, "warm", 20, fmt.Sprintf("ceiling: tiles a connection serves before it counts (0..%d): pgbench's rates leave out each of its fresh connections' first ones, and geotoll serves this many times -clients tiles of each list before it is timed (0: pgbench's own rates, no warm-up)", maxWarm))
	fs.DurationVar(&f.warmTimeout, "warm-timeout", loadtest.DefaultWarmTimeout, fmt.Sprintf("ceiling: geotoll's warm-up of a list must end within this (1s..%s), or the run fails", loadtest.MaxDuration))
	fs.StringVar(&f.merge, "report", "", "fidelity: print the report of these -json files (comma-separated), ranked together; measures nothing")
}

// scenarioFlagUse names the scenarios that read each flag of
// scenarioFlags; the configuration flags every command takes are not
// listed, and always read.
var scenarioFlagUse = func() map[string][]string {
	all, measured := []string{"fidelity", "zooms", "ceiling"}, []string{"fidelity", "zooms"}
	use := map[string][]string{"tiles": {"fidelity"}, "json": {"fidelity"}, "report": {"fidelity"}, "per-zoom": {"zooms"}}
	for _, name := range []string{"url", "key", "allow-remote", "layer", "v"} {
		use[name] = all
	}
	for _, name := range []string{"seed", "db-timeout", "db-time", "quiesce", "minzoom", "maxzoom"} {
		use[name] = measured
	}
	for _, name := range []string{"duration", "clients", "threads", "warm", "warm-timeout"} {
		use[name] = []string{"ceiling"}
	}
	return use
}()

// unreadFlags refuses the flags set on the command line (fs) that the
// scenario name would not read: another scenario's, or with fidelity
// -report (which measures nothing), any but -report. Ignored, they would
// make a run that is not the one asked for.
func unreadFlags(name string, fs *flag.FlagSet) error {
	var errs []error
	report := false
	fs.Visit(func(fl *flag.Flag) { report = report || (name == "fidelity" && fl.Name == "report") })
	fs.Visit(func(fl *flag.Flag) {
		use, ok := scenarioFlagUse[fl.Name]
		switch {
		case !ok: // a configuration flag
		case !slices.Contains(use, name):
			errs = append(errs, fmt.Errorf("-%s is not a flag of %s (only of %s)", fl.Name, name, strings.Join(use, ", ")))
		case report && fl.Name != "report":
			errs = append(errs, fmt.Errorf("-%s is not read with -report, which measures nothing", fl.Name))
		}
	})
	return errors.Join(errs...)
}

// scenarioCommand is `geotoll loadtest fidelity|zooms|ceiling`.
func (c *cli) scenarioCommand(name, short string) *ffcli.Command {
	f := &scenarioFlags{}
	var fs *flag.FlagSet
	register := func(s *flag.FlagSet) { fs = s; f.flags(s) }
	cmd := c.command(name, short, scenarioUsage, register, noArgs("loadtest "+name, func(ctx context.Context) error {
		if err := unreadFlags(name, fs); err != nil {
			return usageError{fmt.Sprintf("loadtest %s: %v", name, err)}
		}
		fs.Visit(func(fl *flag.Flag) { f.threadsSet = f.threadsSet || fl.Name == "threads" })
		cfg, err := c.config()
		if err != nil {
			return err
		}
		return runScenario(ctx, cfg, name, f, c.stdout, c.stderr)
	}))
	cmd.ShortUsage = "geotoll -config FILE loadtest " + name + " [flags]"
	return cmd
}

// runScenario runs `geotoll loadtest fidelity|zooms|ceiling`.
func runScenario(ctx context.Context, cfg Config, name string, f *scenarioFlags, stdout, stderr io.Writer) error {
	s := &f.scenario
	n, jsonOut, verbose, perZoom, merge := &f.n, &f.jsonOut, &f.verbose, &f.perZoom, &f.merge
	if name == "fidelity" && *merge != "" {
		rep, err := loadtest.ReadFidelity(strings.Split(*merge, ",")...)
		if err != nil {
			return fmt.Errorf("loadtest fidelity: %w", err)
		}
		rep.WriteText(stdout)
		return nil
	}
	if err := f.validate(name); err != nil {
		return usageError{fmt.Sprintf("loadtest %s: %v", name, err)}
	}
	layer, pool, err := scenarioSetup(ctx, cfg, s.layer)
	if err != nil {
		return err
	}
	defer pool.Close()
	timer, closeTimer, err := s.timer(ctx, cfg, pool)
	if err != nil {
		return err
	}
	defer closeTimer()
	progress := io.Discard
	if *verbose {
		progress = stderr
	}
	switch name {
	case "fidelity":
		rep, err := loadtest.RunFidelity(ctx, loadtest.FidelityOptions{Client: &s.client, Pool: pool, Timer: timer, Layer: layer,
			Tiles: *n, Seed: s.seed, MinZoom: s.minZ, MaxZoom: s.maxZ, Progress: progress})
		if err != nil {
			return fmt.Errorf("loadtest fidelity: %w", err)
		}
		rep.WriteText(stdout)
		return writeJSON(*jsonOut, rep)
	case "zooms":
		rows, err := loadtest.RunZooms(ctx, loadtest.ZoomOptions{Client: &s.client, Pool: pool, Timer: timer, Layer: layer,
			PerZoom: *perZoom, Seed: s.seed, MinZoom: s.minZ, MaxZoom: s.maxZ, Progress: progress})
		if err != nil {
			return fmt.Errorf("loadtest zooms: %w", err)
		}
		loadtest.WriteZooms(stdout, layer.Name, rows)
		if err := zoomsOutcome(rows, s.minZ, s.maxZ); err != nil {
			return fmt.Errorf("loadtest zooms: %w", err)
		}
		return nil
	}
	return runCeilingScenario(ctx, cfg, f, layer, pool, progress, stdout)
}

// validate checks the flags the scenario name reads, before it measures
// anything (or connects to anything).
func (f *scenarioFlags) validate(name string) error {
	var errs []error
	if f.dbTime != "sql" && f.dbTime != "server" {
		errs = append(errs, fmt.Errorf("-db-time %q must be sql or server", f.dbTime))
	}
	if name == "fidelity" && f.jsonOut != "" {
		if err := checkOutFile(f.jsonOut); err != nil {
			errs = append(errs, fmt.Errorf("-json: %w", err))
		}
	}
	if name == "fidelity" || name == "zooms" {
		switch {
		case f.minZ < 0 || f.minZ > maxZoom || f.maxZ < 0 || f.maxZ > maxZoom:
			errs = append(errs, fmt.Errorf("-minzoom %d and -maxzoom %d must be within 0..%d", f.minZ, f.maxZ, maxZoom))
		case f.minZ > f.maxZ:
			errs = append(errs, fmt.Errorf("no tile to ask for: -minzoom %d is above -maxzoom %d", f.minZ, f.maxZ))
		}
		if f.timeout < time.Millisecond || f.timeout > maxDBTimeout {
			errs = append(errs, fmt.Errorf("-db-timeout %s must be within 1ms..%s", f.timeout, maxDBTimeout))
		}
		if f.quiesce < 0 || f.quiesce > maxQuiesce {
			errs = append(errs, fmt.Errorf("-quiesce %s must be within 0..%s", f.quiesce, maxQuiesce))
		}
	}
	switch name {
	case "fidelity":
		if f.n < 1 || f.n > maxFidelityTiles {
			errs = append(errs, fmt.Errorf("-tiles %d must be within 1..%d", f.n, maxFidelityTiles))
		}
	case "zooms":
		if f.perZoom < 1 || f.perZoom > maxPerZoom {
			errs = append(errs, fmt.Errorf("-per-zoom %d must be within 1..%d", f.perZoom, maxPerZoom))
		}
	case "ceiling":
		if f.d < time.Second || f.d > loadtest.MaxDuration || f.d%time.Second != 0 {
			errs = append(errs, fmt.Errorf("-duration %s must be whole seconds within 1s..%s (pgbench -T counts seconds)", f.d, loadtest.MaxDuration))
		}
		if !f.threadsSet {
			f.threads = min(defaultThreads, max(f.clients, 1))
		}
		if f.clients < 1 || f.clients > maxCeilingClients {
			errs = append(errs, fmt.Errorf("-clients %d must be within 1..%d", f.clients, maxCeilingClients))
		} else if f.threads < 1 || f.threads > f.clients {
			errs = append(errs, fmt.Errorf("-threads %d must be within 1..-clients (%d)", f.threads, f.clients))
		}
		if f.warm < 0 || f.warm > maxWarm {
			errs = append(errs, fmt.Errorf("-warm %d must be within 0..%d", f.warm, maxWarm))
		}
		if f.warmTimeout < time.Second || f.warmTimeout > loadtest.MaxDuration {
			errs = append(errs, fmt.Errorf("-warm-timeout %s must be within 1s..%s", f.warmTimeout, loadtest.MaxDuration))
		}
	}
	return errors.Join(errs...)
}

// zoomsOutcome fails a zooms run in which the server drew no tile, or
// answered a tile with anything but a drawn tile (200, 204) or a 503 at
// its own timeout (whose tile the database drew is measured instead): a
// refusal, or a 503 of the rate limiter, measures nothing of the tile.
func zoomsOutcome(rows []loadtest.ZoomRow, minZ, maxZ int) error {
	seen, total, timedOut, failed := map[int]int{}, 0, 0, 0
	for _, r := range rows {
		for code, n := range r.Status {
			seen[code] += n
			total += n
		}
		timedOut += r.TimedOut
		failed += r.Failed()
	}
	switch {
	case total == 0:
		return fmt.Errorf("no tile to ask for between z%d and z%d", minZ, maxZ)
	case seen[200]+seen[204]+timedOut == 0:
		return fmt.Errorf("the server drew no tile (answered 200, 204 or 503 timeout): %s", loadtest.StatusText(seen))
	case failed > 0:
		return fmt.Errorf("%d of %d tiles were neither drawn (200, 204) nor given up on at the server's timeout (503 timeout): %s; "+
			"use a key of a tier that never refuses, against a server whose rate limiter answers", failed, total, loadtest.StatusText(seen))
	}
	return nil
}

// runCeilingScenario runs `geotoll loadtest ceiling`.
func runCeilingScenario(ctx context.Context, cfg Config, f *scenarioFlags, layer *tiles.Layer, pool *pgxpool.Pool, progress, stdout io.Writer) error {
	points, err := loadtest.Centroids(ctx, pool, layer)
	if err != nil {
		return err
	}
	o := loadtest.CeilingOptions{Client: &f.client, Layer: layer, Lists: loadtest.CeilingLists(points), Progress: progress, WarmTimeout: f.warmTimeout,
		Pgbench: loadtest.Pgbench{DatabaseURL: cfg.Database.URL, Clients: f.clients, Threads: f.threads, Duration: f.d, Steady: f.warm}}
	rs, err := loadtest.RunCeiling(ctx, o)
	if wt := (*loadtest.WarmUpTimeout)(nil); errors.As(err, &wt) {
		return fmt.Errorf("loadtest ceiling: %w (-warm-timeout)", err)
	}
	if err != nil {
		return fmt.Errorf("loadtest ceiling: %w", err)
	}
	loadtest.WriteCeiling(stdout, layer.Name, f.clients, f.warm, f.d, rs)
	for _, r := range rs {
		for _, l := range r.Loops {
			if l.OK == 0 {
				warm := ""
				if r.Warm != nil {
					warm = " (its warm-up: " + loadtest.StatusText(r.Warm.Status) + ")"
				}
				return fmt.Errorf("loadtest ceiling: no tile of list %s was drawn for the %s client (answered 200 or 204): %s%s",
					r.List, l.Encoding, loadtest.StatusText(l.Status), warm)
			}
		}
	}
	return nil
}

// timer is the database-time measure -db-time names, and what closes it.
func (s *scenario) timer(ctx context.Context, cfg Config, pool *pgxpool.Pool) (loadtest.Timer, func(), error) {
	switch s.dbTime {
	case "sql":
		return loadtest.TileTimer{Pool: pool, Runs: 3, Timeout: s.timeout, Quiesce: s.quiesce}, func() {}, nil
	case "server":
		stats, err := openPool(ctx, cfg.Database.AdminURL, cfg)
		if err != nil {
			return nil, nil, err
		}
		// The server's statements are the ones of the role this
		// instrument reads as (DATABASE_URL: the read role, which serve
		// connects as), not always geotoll_reader.
		role := pool.Config().ConnConfig.User
		return loadtest.ServerTimer{Client: &s.client, Stats: stats, Runs: 3, Quiesce: s.quiesce, Role: role}, stats.Close, nil
	}
	return nil, nil, fmt.Errorf("loadtest: -db-time %q must be sql or server", s.dbTime)
}

// scenarioSetup finds the layer in the configuration and connects as the
// read role; the layer reads the serving storage `serve` reads (its
// overviews), so that its queries — the ones timed, and pgbench's — are
// those the server runs.
func scenarioSetup(ctx context.Context, cfg Config, name string) (*tiles.Layer, *pgxpool.Pool, error) {
	cat, _, err := cfg.catalog()
	if err != nil {
		return nil, nil, err
	}
	layer := cat.Layer(name)
	if layer == nil {
		return nil, nil, fmt.Errorf("loadtest: layer %q is not in the configuration (-config)", name)
	}
	if cfg.Database.URL == "" {
		return nil, nil, errors.New("loadtest: set DATABASE_URL (the read role) to time the queries")
	}
	pool, err := openPool(ctx, cfg.Database.URL, cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := cat.Refresh(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("loadtest: read the serving storage: %w", err)
	}
	return layer, pool, nil
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644) //nolint:gosec // G306: a scenario file for people to read and edit, like the repository's own
}
