package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/loadtest"
)

var (
	ceilingClients = flag.Int("ceiling.clients", 0, "BenchmarkCeiling: the connections of pgbench and of geotoll's load generator (0: database.max_conns as shipped)")
	ceilingRounds  = flag.Int("ceiling.rounds", 1, "BenchmarkCeiling: rounds of each list's four sub-benchmarks, one round after another (pgbench, then geotoll, then pgbench again...)")
)

// BenchmarkCeiling keeps BENCHMARKS.md's "cold tiles against the
// database's ceiling" honest: the whole server — HTTP, the toll with the
// in-flight cap of a default tier and the Redis admission, the tile
// handler, pgcall, PostGIS — with its tile cache off, against pgbench
// running the layer's own query for the same tiles, in the same run. For
// each list (the densest z14 tiles of the demo's places, and the densest
// of z8, z9 and z10) four sub-benchmarks run one after another, an op
// being one tile through as many connections as the server's pool has
// (-ceiling.clients): "pgbench" (the database alone,
// sending each tile as pgbench reads it: hex text), "pgbench-unsent" (the
// same, sending each tile's length instead: while pgbench keeps the
// database busy, its ceiling lies between the two), then geotoll to a
// client that asks for no encoding ("identity") and to one that accepts
// gzip ("gzip"). The geotoll ones report x-ceiling and x-unsent, their
// tiles per second over the two pgbench sub-benchmarks' last rates (with
// -count, each sub-benchmark runs its count of times in a row), and
// cpu-µs/tile,
// the CPU this process spent per tile (the server, and the load
// generator's small share; not PostgreSQL's nor Redis's).
//
//	go test -run '^$' -bench Ceiling -benchtime 4000x -count 6 ./cmd/geotoll
//
// On a machine whose speed drifts, -ceiling.rounds n alternates: each
// list runs its four sub-benchmarks n times in turn (the second round's
// are named "#01" by the testing package), so each geotoll figure is over
// the pgbench of its own round, run seconds before it, and the two
// clients take turns to run first after pgbench (identity in the first
// round, gzip in the second, and so on); -count instead
// runs each sub-benchmark its count of times in a row. (benchstat takes
// each round's names as benchmarks of their own: compare the rounds'
// ratios by hand.) The server's price models are built before anything
// is timed (startLogging waits for them).
//
// -ceiling.clients sets the connections of both (database.max_conns as
// shipped unless told; BENCHMARKS.md's tables before 5 December used 16):
// on a database with few cores, pgbench's rate falls as its connections
// outnumber them, so a ceiling read at more connections than the server's
// pool flatters the server.
func BenchmarkCeiling(b *testing.B) {
	clients := *ceilingClients
	if clients == 0 {
		clients = int(DefaultConfig().Database.MaxConns)
	}
	if clients < 1 {
		b.Fatalf("-ceiling.clients %d: at least 1", clients)
	}
	pro := DefaultConfig().Throttle.Tiers["pro"]
	key := createKey(b, "ceiling")
	// The server's warnings and errors go to stderr: a run that fails says
	// why its requests did.
	warn := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := startLogging(b, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Redis.Timeout = DefaultConfig().Redis.Timeout // the hot path as shipped
		// The default pro tier's shape, with a budget no run exhausts.
		c.Throttle.Tiers["ceiling"] = TierConfig{Rate: 1e9, Capacity: 1e9, MaxInFlight: pro.MaxInFlight}
		// Each statement within its layer's statement_timeout, as pgbench's
		// script sets it: the server's own deadline for a tile (max of
		// timeout_floor and timeout_factor × the database time it paid
		// for) would be shorter, and
		// sixteen z10 tiles queued on one CPU outlast it — the server then
		// sheds tiles pgbench waits for.
		c.Throttle.TimeoutFloor = c.HTTP.RequestTimeout / 2
	}, warn)
	cat, _, err := m.Config.catalog()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// pgbench runs the queries the server runs: over the storage it reads.
	if _, err := cat.Refresh(ctx, testenv.ReadPool(b)); err != nil {
		b.Fatal(err)
	}
	layer := cat.Layer("places")
	points, err := loadtest.Centroids(ctx, testenv.Pool(b), layer)
	if err != nil {
		b.Fatal(err)
	}
	client := &loadtest.Client{BaseURL: "http://" + m.Addr(), Key: key}
	lists := loadtest.CeilingLists(points)
	// The server's pool opens its connections before anything is timed, as
	// pgbench's clients open theirs before it counts: opened by the first
	// 16 requests at once (when the pool had 16), on a database pinned to one busy CPU, some took
	// longer than database.acquire_timeout (1 s), and those tiles answered
	// 503. What these requests get is not judged.
	if _, err := client.LoopCount(ctx, layer.Name, lists[0].Tiles, clients, 8*clients, false); err != nil {
		b.Fatal(err)
	}
	for _, list := range lists {
		script, err := loadtest.PgbenchScript(layer, list.Tiles)
		if err != nil {
			b.Fatal(err)
		}
		unsent, err := loadtest.PgbenchUnsentScript(layer, list.Tiles)
		if err != nil {
			b.Fatal(err)
		}
		var ceiling, above float64
		pgbench := func(b *testing.B, script string) float64 {
			c := min(clients, b.N)
			p := loadtest.Pgbench{DatabaseURL: testenv.ReadDatabaseURL(b), Clients: c, Threads: 2,
				Transactions: (b.N + c - 1) / c, Dir: b.TempDir()}
			tps, out, err := p.Run(ctx, script, layer.Name)
			if err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
			b.ReportMetric(tps, "tiles/s")
			return tps
		}
		geotoll := func(gzip bool) {
			name := map[bool]string{false: "identity", true: "gzip"}[gzip]
			b.Run(list.Name+"/"+name, func(b *testing.B) {
				before := cpuTime()
				r, err := client.LoopCount(ctx, layer.Name, list.Tiles, clients, b.N, gzip)
				cpu := cpuTime() - before
				if err != nil || r.OK != r.Requests {
					b.Fatalf("%d of %d tiles answered 200/204 (%s), %v; database calls since the server started: %s",
						r.OK, r.Requests, loadtest.StatusText(r.Status), err, dbOutcomes("http://"+m.Addr()))
				}
				b.ReportMetric(r.TilesPerSec, "tiles/s")
				b.ReportMetric(float64(cpu.Microseconds())/float64(r.Requests), "cpu-µs/tile")
				if ceiling > 0 { // its pgbench ran (not filtered out by -bench)
					b.ReportMetric(r.TilesPerSec/ceiling, "x-ceiling")
				}
				if above > 0 {
					b.ReportMetric(r.TilesPerSec/above, "x-unsent")
				}
			})
		}
		for round := range max(*ceilingRounds, 1) {
			b.Run(list.Name+"/pgbench", func(b *testing.B) { ceiling = pgbench(b, script) })
			b.Run(list.Name+"/pgbench-unsent", func(b *testing.B) { above = pgbench(b, unsent) })
			// The first of the two runs right after pgbench is the slower
			// on this kind of machine (either encoding, measured both
			// ways): the rounds take turns, so that neither client pays
			// it in every round.
			gzipFirst := round%2 == 1
			geotoll(gzipFirst)
			geotoll(!gzipFirst)
		}
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dbOutcomes is the server's count of database calls by outcome other
// than ok (geotoll_db_calls_total on its /metrics), so that a run that
// failed says whether its tiles were cut by their statement timeout, found
// every connection busy, or lost the database.
func dbOutcomes(base string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "geotoll_db_calls_total{") && !strings.Contains(line, `outcome="ok"`) {
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "geotoll_db_calls_total")))
		}
	}
	if len(out) == 0 {
		return "none but ok"
	}
	return strings.Join(out, ", ")
}
