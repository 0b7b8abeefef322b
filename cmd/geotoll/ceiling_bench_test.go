package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/loadtest"
)

var (
	ceilingClients   = flag.Int("ceiling.clients", 0, "BenchmarkCeiling: the connections of pgbench and of geotoll's load generator (0: database.max_conns as shipped)")
	ceilingRounds    = flag.Int("ceiling.rounds", 1, "BenchmarkCeiling: rounds of each list's five sub-benchmarks, one round after another (pgbench, pgbench-unsent, the three clients in turns, then pgbench again...); a multiple of 3 puts each client in each place once")
	ceilingLoad      = flag.Int("ceiling.load", 0, "BenchmarkCeiling: the connections of the load generator alone, to geotoll and to the floor (0: -ceiling.clients)")
	ceilingInProcess = flag.Bool("ceiling.in-process", false, "BenchmarkCeiling: the server without Redis, its budgets in its own memory (what the admission's Redis calls cost)")
	ceilingWarm      = flag.Int("ceiling.warm", 100, "BenchmarkCeiling: tiles a connection serves before its rate counts: pgbench's rates leave out the first ones of each of its fresh connections, and geotoll and the floor serve this many times -ceiling.load tiles of each list before they are timed (0: neither; pgbench's own rates)")
)

// BenchmarkCeiling keeps BENCHMARKS.md's "cold tiles against the
// database's ceiling" honest: the whole server — HTTP, the toll with the
// in-flight cap of a default tier and the Redis admission, the tile
// handler, pgcall, PostGIS — with its tile cache off, against pgbench
// running the layer's own query for the same tiles, in the same run. For
// each list (the densest z14 tiles of the demo's places, and the densest
// of z8, z9 and z10) five sub-benchmarks run one after another, an op
// being one tile through as many connections as the server's pool has
// (-ceiling.clients; the load generator's, -ceiling.load): "pgbench" (the database alone,
// sending each tile as pgbench reads it: hex text), "pgbench-unsent" (the
// same, sending each tile's length instead: while pgbench keeps the
// database busy, its ceiling lies between the two), then geotoll to a
// client that asks for no encoding ("identity") and to one that accepts
// gzip ("gzip"), and last the least tile server ("floor",
// startFloorServer: net/http, a pgx pool as large as the server's, the
// same batch as pgbench, nothing else), which says what any Go server on
// this host reaches — and so how much of the gap to pgbench is geotoll's
// own work (geotoll's batch also sets its statement_timeout from its
// deadline and reads the statement's database time: one statement more). The geotoll and floor ones report x-ceiling and x-unsent, their
// tiles per second over the two pgbench sub-benchmarks' last rates (with
// -count, each sub-benchmark runs its count of times in a row), and
// cpu-µs/tile,
// the CPU this process spent per tile (the server, and the load
// generator's small share; not PostgreSQL's nor Redis's). On Linux,
// every pgbench, geotoll and floor sub-benchmark also reports where the host's
// CPU went, per tile (see reportHostCPU): all of it, PostgreSQL's,
// Redis's, pgbench's client's (pgbench-µs/tile) and the rest's, with the
// hypervisor's steal and the context switches. On a host the run keeps
// busy, a tile's CPU outside the database is CPU the database does not
// get.
//
// Both sides are measured warm (-ceiling.warm n, default 100): pgbench
// opens fresh connections every run, and a fresh backend's first tiles
// are slow, so pgbench's tiles/s is its steady rate — over the span in
// which each of its connections is past its first n tiles and none has
// finished (from its per-transaction log; own-tiles/s is pgbench's own
// figure, warm-up and tail in) — and geotoll and the floor serve n ×
// -ceiling.load tiles of each list before it is timed (n a connection of
// their pools when the load generator has as many connections). A pgbench run of 2n tiles a
// connection or fewer reports own-tiles/s alone and counts as no ceiling
// (no x-ceiling, no round): give -benchtime a count, above 2n ×
// -ceiling.clients, as make bench-ceiling does.
//
// On a machine whose speed drifts, -ceiling.rounds n alternates: each
// list runs its five sub-benchmarks n times in turn (the second round's
// are named "#01" by the testing package), so each geotoll figure is over
// the pgbench of its own round, run seconds before it, and the three
// clients take turns in their order after pgbench (identity, gzip, floor
// in the first round, gzip, floor, identity in the second, and so on: a
// multiple of 3 rounds puts each in each place once); -count instead
// runs each sub-benchmark its count of times in a row (with rounds, keep
// -count at 1). After two rounds or more, pgbench runs once more (so
// every round's geotoll runs lie between two of its runs) and a last
// sub-benchmark per list ("rounds") sums them up for each client, as
// identity-x-median (the median of its rounds' x-ceiling),
// identity-x-least (the lowest), identity-x-pooled (its tiles over its
// time in every round against pgbench's over its own),
// identity-x-floor-pooled and identity-x-floor-median (the same against
// the floor's; and floor-x-pooled, floor-x-median and floor-x-bracketed,
// the floor's against pgbench's), identity-rounds
// (how many rounds count: those in which both its run and pgbench's
// passed) and identity-x-bracketed (pooled against the mean of the
// pgbench runs before and after each round: most of a steady drift
// cancels, see bracketed), and
// the same for gzip; and for pgbench against itself, pgbench-x-self-least
// and pgbench-x-self-median (the lower of two consecutive pgbench runs
// over the higher, least and median over the pairs): how far a single
// round's ratio can fall with nothing changed but the time (roughly: a
// pair is a round apart); and, on Linux, the medians of the host CPU
// figures of pgbench's and each client's runs, as pgbench-pg-µs/tile,
// identity-cpu-µs/tile, gzip-redis-µs/tile and so on (pgbench's own,
// pgbench-client-µs/tile), over the runs that passed and were read
// (pgbench's warm ones, its closing run in; not pgbench-unsent's),
// counted as pgbench-host-runs, identity-host-runs, gzip-host-runs
// (and the floor's, floor-cpu-µs/tile, floor-host-runs...). On a machine whose speed moves by up to half
// from one run to the next, a round's ratio is one sample; the pooled,
// bracketed and median ones are the figures to read. The server's price
// models are built before anything is timed (startLogging waits for
// them).
//
//	go test -run '^$' -bench Ceiling -benchtime 3000x -ceiling.rounds 6 ./cmd/geotoll
//
// -ceiling.clients sets the connections of both (database.max_conns as
// shipped unless told; BENCHMARKS.md's tables before 5 December used 16):
// on a database with few cores, pgbench's rate falls as its connections
// outnumber them, so a ceiling read at more connections than the server's
// pool flatters the server. -ceiling.load sets the load generator's
// connections alone (geotoll's and the floor's), for clients that queue
// for the pool; -ceiling.in-process runs the server without Redis, its
// budgets in its own memory, to tell what the admission's calls cost.
func BenchmarkCeiling(b *testing.B) {
	clients := *ceilingClients
	if clients == 0 {
		clients = int(DefaultConfig().Database.MaxConns)
	}
	if clients < 1 {
		b.Fatalf("-ceiling.clients %d: at least 1", clients)
	}
	load := *ceilingLoad
	if load == 0 {
		load = clients
	}
	if load < 1 {
		b.Fatalf("-ceiling.load %d: at least 1", load)
	}
	pro := DefaultConfig().Throttle.Tiers["pro"]
	key := createKey(b, "ceiling")
	// The server's warnings and errors go to stderr: a run that fails says
	// why its requests did.
	warn := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := startLogging(b, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Redis.Timeout = DefaultConfig().Redis.Timeout // the hot path as shipped
		if *ceilingInProcess {
			c.Redis.URL, c.Redis.Addrs = "", nil
		}
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
	floorURL, floorStat := startFloorServer(b, layer, m.Config.Database.MaxConns)
	floor := &loadtest.Client{BaseURL: floorURL}
	lists := loadtest.CeilingLists(points)
	warm := max(*ceilingWarm, 0)
	for i, list := range lists {
		// Untimed, before each list: the server's pool opens its
		// connections before anything is timed, as pgbench's clients open
		// theirs before it counts (opened by the first 16 requests at once
		// when the pool had 16, on a database pinned to one busy CPU, some
		// took longer than database.acquire_timeout, 1 s, and answered 503:
		// what these requests get is not judged). And a fresh backend's
		// first tiles are slow (its first z14 tile took about 100 ms where
		// its hundredth took 3, on 2 shared CPUs), while pgbench opens its
		// connections afresh each run: its rate leaves each connection's
		// first warm tiles out (Pgbench.Steady), and the server's
		// connections serve as many of the list, so that both are measured
		// warm.
		n := warm
		if i == 0 {
			n = max(n, 8)
		}
		if n > 0 {
			for _, c := range []*loadtest.Client{client, floor} {
				if _, err := c.LoopCount(ctx, layer.Name, list.Tiles, load, n*load, false); err != nil {
					b.Fatal(err)
				}
			}
		}
		script, err := loadtest.PgbenchScript(layer, list.Tiles)
		if err != nil {
			b.Fatal(err)
		}
		unsent, err := loadtest.PgbenchUnsentScript(layer, list.Tiles)
		if err != nil {
			b.Fatal(err)
		}
		var ceiling, above float64
		// shares gathers each run's host CPU figures by run (pgbench,
		// identity, gzip) over the rounds, for the rounds' medians.
		shares := map[string]map[string][]float64{}
		share := func(name string, figures map[string]float64) {
			if shares[name] == nil {
				shares[name] = map[string][]float64{}
			}
			for k, v := range figures {
				shares[name][k] = append(shares[name][k], v)
			}
		}
		pgbench := func(b *testing.B, script string) (float64, map[string]float64) {
			c := min(clients, b.N)
			p := loadtest.Pgbench{DatabaseURL: testenv.ReadDatabaseURL(b), Clients: c, Threads: 2,
				Transactions: (b.N + c - 1) / c, Dir: b.TempDir()}
			// A run of more than twice warm tiles a connection leaves
			// the warm-up out (Steady). A shorter one — the testing
			// package's probe of one tile, a ramp-up run of a -benchtime
			// duration — reports pgbench's own rate alone and is no
			// ceiling: a cold database's rate is none.
			warmed := warm == 0 || p.Transactions > 2*warm
			if warm > 0 && warmed {
				p.Steady = warm
			}
			meter := loadtest.StartCPU()
			r, err := p.Exec(ctx, script, layer.Name)
			if err != nil {
				b.Fatalf("%v\n%s", err, r.Output)
			}
			figures := reportHostCPU(b, meter, "pgbench", r.Transactions, r.CPU, r.CPU)
			own, err := loadtest.PgbenchTPS(r.Output) // warm-up and tail in
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(own, "own-tiles/s")
			if !warmed {
				return 0, nil
			}
			b.ReportMetric(r.TPS, "tiles/s")
			return r.TPS, figures
		}
		// Each round's rates, to sum the rounds up once they have run:
		// pgbench's, identity's and gzip's.
		rounds := max(*ceilingRounds, 1)
		// pg[rounds] is the closing pgbench, run after the last round.
		pg := make([]float64, rounds+1)
		rates := map[bool][]float64{false: make([]float64, rounds), true: make([]float64, rounds)}
		floorRates := make([]float64, rounds)
		// passed runs a sub-benchmark and answers the rate of its last run
		// (the testing package runs it with b.N = 1 first), or 0 when it
		// failed or was filtered out by -bench; a run with a rate adds its
		// host CPU figures, if any, to shares.
		passed := func(name string, run func(*testing.B) (float64, map[string]float64)) float64 {
			var (
				rate    float64
				figures map[string]float64
			)
			if !b.Run(list.Name+"/"+name, func(b *testing.B) { rate, figures = run(b) }) {
				return 0
			}
			if rate > 0 {
				share(name, figures)
			}
			return rate
		}
		// loop runs a sub-benchmark of c's tiles; why says, when some
		// were not drawn, what the server saw of its database calls.
		loop := func(name string, c *loadtest.Client, gzip bool, why func() string) float64 {
			return passed(name, func(b *testing.B) (float64, map[string]float64) {
				meter := loadtest.StartCPU()
				before := cpuTime()
				r, err := c.LoopCount(ctx, layer.Name, list.Tiles, load, b.N, gzip)
				cpu := cpuTime() - before
				if err != nil || r.OK != r.Requests || r.Requests == 0 {
					b.Fatalf("%d of %d tiles answered 200/204 (%s), %v%s",
						r.OK, r.Requests, loadtest.StatusText(r.Status), err, why())
				}
				figures := reportHostCPU(b, meter, "cpu", r.Requests, 0, cpu)
				b.ReportMetric(r.TilesPerSec, "tiles/s")
				if ceiling > 0 { // its pgbench ran (not filtered out by -bench)
					b.ReportMetric(r.TilesPerSec/ceiling, "x-ceiling")
				}
				if above > 0 {
					b.ReportMetric(r.TilesPerSec/above, "x-unsent")
				}
				return r.TilesPerSec, figures
			})
		}
		geotoll := func(round int, gzip bool) {
			rates[gzip][round] = loop(clientName(gzip), client, gzip, func() string {
				return "; database calls since the server started: " + dbOutcomes("http://"+m.Addr())
			})
		}
		runCeiling := func(round int) {
			ceiling = passed("pgbench", func(b *testing.B) (float64, map[string]float64) { return pgbench(b, script) })
			pg[round] = ceiling
		}
		for round := range rounds {
			runCeiling(round)
			above = passed("pgbench-unsent", func(b *testing.B) (float64, map[string]float64) {
				rate, _ := pgbench(b, unsent) // its figures are not summed up
				return rate, nil
			})
			// The first of the runs right after pgbench is the slower on
			// this kind of machine (either encoding, measured both ways):
			// the three clients take turns, identity, gzip, floor in the
			// first round, gzip, floor, identity in the second, floor,
			// identity, gzip in the third, so that each takes each place
			// once in three rounds.
			turns := []func(){
				func() { geotoll(round, false) },
				func() { geotoll(round, true) },
				func() {
					floorRates[round] = loop("floor", floor, false, func() string { return "; the floor's pool: " + floorStat() })
				},
			}
			for i := range turns {
				turns[(round+i)%len(turns)]()
			}
		}
		if rounds > 1 {
			// A closing pgbench, so that every round's geotoll runs lie
			// between two of pgbench's (bracketed), and the ceiling
			// meets itself once more (pgbench-x-self).
			runCeiling(rounds)
			// The rounds summed up: each round's ratio carries the
			// machine's drift between two runs seconds apart, and this
			// machine's speed moves by up to half from one to the next.
			b.Run(list.Name+"/rounds", func(b *testing.B) {
				b.ReportMetric(0, "ns/op") // it runs nothing: no time to compare
				reported := false
				for _, gzip := range []bool{false, true} {
					name := clientName(gzip)
					s, ok := summariseRounds(pg[:rounds], rates[gzip])
					if !ok {
						continue
					}
					b.ReportMetric(s.median, name+"-x-median")
					b.ReportMetric(s.pooled, name+"-x-pooled")
					b.ReportMetric(s.least, name+"-x-least")
					b.ReportMetric(float64(s.rounds), name+"-rounds")
					if x, ok := bracketed(pg, rates[gzip]); ok {
						b.ReportMetric(x, name+"-x-bracketed")
					}
					reported = true
				}
				if s, ok := summariseRounds(pg[:rounds], floorRates); ok {
					b.ReportMetric(s.pooled, "floor-x-pooled")
					b.ReportMetric(s.median, "floor-x-median")
					if x, ok := bracketed(pg, floorRates); ok {
						b.ReportMetric(x, "floor-x-bracketed")
					}
					reported = true
				}
				for _, gzip := range []bool{false, true} {
					if s, ok := summariseRounds(floorRates, rates[gzip]); ok {
						b.ReportMetric(s.pooled, clientName(gzip)+"-x-floor-pooled")
						b.ReportMetric(s.median, clientName(gzip)+"-x-floor-median")
						reported = true
					}
				}
				if s, ok := selfRatios(pg); ok {
					b.ReportMetric(s.least, "pgbench-x-self-least")
					b.ReportMetric(s.median, "pgbench-x-self-median")
				}
				for unit, v := range shareMedians(shares) { // the host's CPU a tile
					b.ReportMetric(v, unit)
					reported = true
				}
				if !reported {
					b.Skip("no round in which pgbench and a client both ran and passed, and no host CPU figures")
				}
			})
		}
	}
}

// clientName names BenchmarkCeiling's load-generator client by whether it
// accepts gzip.
func clientName(gzip bool) string {
	if gzip {
		return "gzip"
	}
	return "identity"
}

// roundsSummary sums up BenchmarkCeiling's rounds for one client: the
// median of its rounds' ratios to their own pgbench, the least of them,
// and the pooled ratio — the client's tiles over its time in every round
// against pgbench's over its time (the runs serve the same number of
// tiles, so each rate pools as a harmonic mean).
type roundsSummary struct {
	median, pooled, least float64
	rounds                int // the rounds summed up
}

// summariseRounds sums up the rounds in which both pgbench and the
// client ran (a rate of 0: filtered out by -bench, or failed); false when
// there is none.
func summariseRounds(pgbench, client []float64) (roundsSummary, bool) {
	var ratios []float64
	var pgTime, clientTime float64 // seconds a tile, summed over the rounds
	for i := range min(len(pgbench), len(client)) {
		if pgbench[i] <= 0 || client[i] <= 0 {
			continue
		}
		ratios = append(ratios, client[i]/pgbench[i])
		pgTime += 1 / pgbench[i]
		clientTime += 1 / client[i]
	}
	if len(ratios) == 0 {
		return roundsSummary{}, false
	}
	return roundsSummary{median: median(ratios), pooled: pgTime / clientTime, least: slices.Min(ratios), rounds: len(ratios)}, true
}

// bracketed is a client's pooled ratio against the pgbench runs on either
// side of its rounds: its tiles over its time in every round whose
// pgbench before (pgbench[i]) and after (pgbench[i+1]: the next round's,
// or the closing one) both passed, against the mean of the two's times a
// tile. Most of a steady drift of the machine's speed cancels: for a
// drift linear in time the mean of the two stands for the speed midway
// between them, and a round's clients run at about two, three and four
// fifths of the way (after pgbench and pgbench-unsent, in turns), so a
// client's round is off by one to three tenths of the round's drift, a
// tenth over three rounds of turns. False when no round has both.
func bracketed(pgbench, client []float64) (float64, bool) {
	var pgTime, clientTime float64
	for i := range min(len(pgbench)-1, len(client)) {
		if pgbench[i] <= 0 || pgbench[i+1] <= 0 || client[i] <= 0 {
			continue
		}
		pgTime += (1/pgbench[i] + 1/pgbench[i+1]) / 2
		clientTime += 1 / client[i]
	}
	if clientTime == 0 {
		return 0, false
	}
	return pgTime / clientTime, true
}

// selfSummary is how far pgbench falls from itself between two
// consecutive runs (a round, five runs, apart): the least and the median,
// over the pairs, of the lower run's rate over the higher's — a rough
// gauge of how much of the machine's drift one round's ratio (two to
// four runs apart) may carry.
type selfSummary struct {
	least, median float64
	pairs         int
}

// selfRatios sums up the consecutive pairs of pgbench runs that both
// passed; false when there is none.
func selfRatios(pgbench []float64) (selfSummary, bool) {
	var ratios []float64
	for i := 0; i+1 < len(pgbench); i++ {
		a, b := pgbench[i], pgbench[i+1]
		if a <= 0 || b <= 0 {
			continue
		}
		ratios = append(ratios, min(a, b)/max(a, b))
	}
	if len(ratios) == 0 {
		return selfSummary{}, false
	}
	return selfSummary{least: slices.Min(ratios), median: median(ratios), pairs: len(ratios)}, true
}

// shareMedians sums up the runs' host CPU figures over the rounds, by
// run and figure (shares[run][unit], one value a run that had them), as
// the rounds line reports them: each figure's median, named
// <run>-<unit> — a pgbench run's own client figure (pgbench-µs/tile) as
// pgbench-client-µs/tile — and how many runs had host figures,
// <run>-host-runs.
func shareMedians(shares map[string]map[string][]float64) map[string]float64 {
	out := map[string]float64{}
	for run, by := range shares {
		for unit, xs := range by {
			if len(xs) == 0 {
				continue
			}
			if unit == "host-µs/tile" {
				out[run+"-host-runs"] = float64(len(xs))
			}
			if unit == run+"-µs/tile" { // pgbench's client
				unit = "client-µs/tile"
			}
			out[run+"-"+unit] = median(xs)
		}
	}
	return out
}

// median is the middle of xs (the mean of the middle two when their
// number is even); it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[n/2]
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportHostCPU reports the CPU of a run of n tiles: own's (named name:
// geotoll's process, by getrusage, or pgbench's client) in any case; and,
// where meter could read /proc before and after the run, where the host's
// CPU went (loadtest.RunCPU, with pgbench's client's CPU in pgbench's
// runs): all of it (host-µs/tile, less the hypervisor's steal),
// PostgreSQL's, Redis's and the rest's (rest-µs/tile: every process but
// those, geotoll's and the client's, and the kernel's time charged to none
// — a difference of figures sampled apart, which can fall a little below
// zero); and the time the hypervisor stole (steal-µs/tile) and the
// context switches (switches/tile), which say how quiet the host was. A
// pgbench run's figures take in its whole run — its connections' setup,
// their slow first tiles, its tail, its per-transaction log — where its
// tiles/s is its steady rate: they are over own-tiles/s's span, not
// tiles/s's. It answers the figures by unit, nil when /proc could not be
// read (which it logs).
func reportHostCPU(b *testing.B, meter loadtest.CPUMeter, name string, n int, pgbench, own time.Duration) map[string]float64 {
	c, err := meter.Stop(name, n, pgbench)
	c.Tiles = n
	b.ReportMetric(c.PerTile(own), name+"-µs/tile")
	if err != nil {
		b.Logf("no host CPU figures: %v", err)
		return nil
	}
	m := map[string]float64{
		"host-µs/tile":    c.PerTile(c.Busy),
		"pg-µs/tile":      c.PerTile(c.Postgres),
		"redis-µs/tile":   c.PerTile(c.Redis),
		name + "-µs/tile": c.PerTile(own),
		"rest-µs/tile":    c.PerTile(c.Rest()),
		"steal-µs/tile":   c.PerTile(c.Steal),
		"switches/tile":   float64(c.Switches) / float64(max(n, 1)),
	}
	if name == "pgbench" {
		// pgbench's runs: the benchmark's own process (its idle server,
		// its reading of pgbench's logs) is neither the client nor rest,
		// so host = pg + redis + client + self + rest.
		m["self-µs/tile"] = c.PerTile(c.Self)
	}
	for unit, v := range m {
		b.ReportMetric(v, unit) // own's again, the same value
	}
	return m
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

func TestSummariseRounds(t *testing.T) {
	for _, tc := range []struct {
		name            string
		pgbench, client []float64
		want            roundsSummary
		ok              bool
	}{
		{"none", nil, nil, roundsSummary{}, false},
		{"filtered out", []float64{0, 0}, []float64{100, 200}, roundsSummary{}, false},
		{"one round", []float64{1000}, []float64{900}, roundsSummary{0.9, 0.9, 0.9, 1}, true},
		// Ratios 0.5, 1 and 2: the median is 1; the client took 1/500 +
		// 1/1000 + 1/2000 s a tile-slot where pgbench took 3/1000.
		{"odd", []float64{1000, 1000, 1000}, []float64{2000, 500, 1000}, roundsSummary{1, 0.003 / 0.0035, 0.5, 3}, true},
		{"even", []float64{1000, 1000}, []float64{800, 1000}, roundsSummary{0.9, 0.002 / (1/800.0 + 0.001), 0.8, 2}, true},
		// A round whose client failed (0) is left out, not counted as 0.
		{"one left out", []float64{1000, 500, 800, 1000}, []float64{800, 500, 0, 1200}, roundsSummary{1, (0.001 + 0.002 + 0.001) / (1/800.0 + 0.002 + 1/1200.0), 0.8, 3}, true},
		// A round whose pgbench failed is left out too; four rounds are
		// left, so the median is the middle two's mean: (0.9 + 1.1) / 2.
		{"even, one left out", []float64{1000, 0, 1000, 500, 1000}, []float64{900, 700, 1100, 250, 1200}, roundsSummary{1, 0.005 / (1/900.0 + 1/1100.0 + 0.004 + 1/1200.0), 0.5, 4}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := summariseRounds(tc.pgbench, tc.client)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			const eps = 1e-9
			if math.Abs(got.median-tc.want.median) > eps || math.Abs(got.pooled-tc.want.pooled) > eps || math.Abs(got.least-tc.want.least) > eps || got.rounds != tc.want.rounds {
				t.Errorf("summariseRounds = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBracketed(t *testing.T) {
	for _, tc := range []struct {
		name            string
		pgbench, client []float64
		want            float64
		ok              bool
	}{
		{"none", nil, nil, 0, false},
		{"no closing pgbench", []float64{1000}, []float64{1000}, 0, false},
		// pgbench ran at 1000 before the round and 500 after it: a mean of
		// 1.5 ms a tile, where the client took 1 ms.
		{"one round", []float64{1000, 500}, []float64{1000}, 1.5, true},
		// The arithmetic: a client that ran at the mean speed (time a
		// tile) of the pgbench runs around it is at 1.
		{"drift", []float64{1000, 800, 640}, []float64{2 / (1/1000.0 + 1/800.0), 2 / (1/800.0 + 1/640.0)}, 1, true},
		// A failed pgbench (0) leaves out both rounds it brackets; a failed
		// client leaves out its round.
		{"left out", []float64{1000, 0, 1000, 1000, 1000}, []float64{900, 900, 1000, 0}, 1, true},
		{"all left out", []float64{1000, 0, 1000}, []float64{900, 900}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := bracketed(tc.pgbench, tc.client)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("bracketed = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestShareMedians: the rounds line's CPU figures are each run's medians,
// pgbench's client renamed, with the count of runs that had host figures.
func TestShareMedians(t *testing.T) {
	shares := map[string]map[string][]float64{
		"pgbench": {
			"host-µs/tile":    {1300, 1200, 1250},
			"pgbench-µs/tile": {130, 140, 120},
			"self-µs/tile":    {5, 9, 7},
		},
		"identity": {
			"host-µs/tile":  {1500, 1520},
			"cpu-µs/tile":   {350, 360},
			"switches/tile": {16},
		},
		"gzip": {"cpu-µs/tile": {}},
	}
	want := map[string]float64{
		"pgbench-host-runs":      3,
		"pgbench-host-µs/tile":   1250,
		"pgbench-client-µs/tile": 130,
		"pgbench-self-µs/tile":   7,
		"identity-host-runs":     2,
		"identity-host-µs/tile":  1510,
		"identity-cpu-µs/tile":   355,
		"identity-switches/tile": 16,
	}
	if got := shareMedians(shares); !maps.Equal(got, want) {
		t.Errorf("shareMedians = %v\nwant %v", got, want)
	}
	if got := shareMedians(nil); len(got) != 0 {
		t.Errorf("no runs: %v", got)
	}
}

func TestSelfRatios(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pgbench []float64
		want    selfSummary
		ok      bool
	}{
		{"none", nil, selfSummary{}, false},
		{"one run", []float64{1000}, selfSummary{}, false},
		// Either way round: 1000 then 500, and 500 then 1000, are both 0.5.
		{"either way", []float64{1000, 500, 1000}, selfSummary{0.5, 0.5, 2}, true},
		// Pairs 0.8, 0.9, 1 (odd: the middle one) and a failed run that
		// breaks the pairs on either side of it.
		{"odd", []float64{800, 1000, 900, 900, 0, 700}, selfSummary{0.8, 0.9, 3}, true},
		{"even", []float64{600, 1000, 800}, selfSummary{0.6, 0.7, 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := selfRatios(tc.pgbench)
			if ok != tc.ok || math.Abs(got.least-tc.want.least) > 1e-9 || math.Abs(got.median-tc.want.median) > 1e-9 || got.pairs != tc.want.pairs {
				t.Errorf("selfRatios = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
