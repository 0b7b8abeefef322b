package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// TileList is a named, fixed list of tiles.
type TileList struct {
	Name  string
	Tiles []maptile.Tile
}

// CeilingLists are the lists of the ceiling benchmark, from the layer's
// points (EPSG:3857, see Centroids): "z14", the 396 densest z14 tiles, and
// "z8-10", the 44 densest tiles of each of z8, z9 and z10 — the sizes of
// the demo's lists.
func CeilingLists(points []orb.Point) []TileList {
	var mid []maptile.Tile
	for z := maptile.Zoom(8); z <= 10; z++ {
		mid = append(mid, DenseTiles(points, z, 44)...)
	}
	return []TileList{{"z14", DenseTiles(points, 14, 396)}, {"z8-10", mid}}
}

// CeilingOptions configure RunCeiling.
type CeilingOptions struct {
	Client   *Client
	Pgbench  Pgbench // its Clients and Duration are the loops' too; with Steady, geotoll's connections serve as many tiles each before the loops
	Layer    *tiles.Layer
	Lists    []TileList
	Progress io.Writer // when set, pgbench's own output
	// WarmTimeout bounds geotoll's warm-up of each list (Pgbench.Steady
	// tiles a connection); 0 is DefaultWarmTimeout. A warm-up that has not
	// served its tiles by then fails the run with a *WarmUpTimeout: a
	// server that stalls is no ceiling to measure.
	WarmTimeout time.Duration
}

// DefaultWarmTimeout is CeilingOptions.WarmTimeout's default.
const DefaultWarmTimeout = 2 * time.Minute

// WarmUpTimeout is RunCeiling's error when geotoll's warm-up of a list did
// not serve its tiles within CeilingOptions.WarmTimeout.
type WarmUpTimeout struct {
	List    string
	Timeout time.Duration
	Want    int        // tiles the warm-up was to serve
	Got     LoopResult // what it got before its deadline
}

func (e *WarmUpTimeout) Error() string {
	answers := "no answer"
	if len(e.Got.Status) > 0 {
		answers = "answers " + StatusText(e.Got.Status)
	}
	return fmt.Sprintf("geotoll's warm-up of list %s timed out after %s: %d of its %d tiles answered (%s); "+
		"the server stalled, or is slower than the warm-up's bound", e.List, e.Timeout, e.Got.Requests, e.Want, answers)
}

// CeilingResult is one list's database ceiling and geotoll's rates.
type CeilingResult struct {
	List       string
	Tiles      int
	PgbenchTPS float64      // PgbenchScript: the tile sent, as hex text
	UnsentTPS  float64      // PgbenchUnsentScript: the tile built, not sent
	Loops      []LoopResult // identity, then gzip
	Warm       *LoopResult  // geotoll's untimed warm-up (Pgbench.Steady), if any
	// CPU is where this host's CPU went in each run — pgbench's two, then
	// geotoll's identity and gzip loops — as far as it could be read:
	// CPUErr says why a run's is missing (no Linux /proc, say).
	CPU    []RunCPU
	CPUErr error
}

// RunCPU is where a host's CPU went in one run of RunCeiling.
type RunCPU struct {
	Run   string // "pgbench", "not sent", "identity" or "gzip"
	Tiles int    // pgbench's transactions, or the tiles geotoll answered with 200 or 204
	CPUTimes
	Pgbench time.Duration // pgbench's own CPU (in its runs)
}

// Client is the CPU of the run's client: pgbench, and this process (the
// load generator of geotoll's runs, idle in pgbench's).
func (r RunCPU) Client() time.Duration { return r.Self + r.Pgbench }

// Rest is the host's busy time that neither PostgreSQL, Redis, a geotoll
// server nor the client had: every other process's, and the kernel's
// charged to none — a difference of figures sampled apart, which can fall
// a little below zero.
func (r RunCPU) Rest() time.Duration {
	return r.Busy - r.Postgres - r.Redis - r.Geotoll - r.Client()
}

// CPUMeter measures where the host's CPU goes during one run: StartCPU
// before it, Stop after it.
type CPUMeter struct {
	before  CPUUse
	err     error
	started bool // by StartCPU: a zero meter would count everything since boot
}

// errNotStarted is Stop's answer for a meter StartCPU did not make.
var errNotStarted = errors.New("loadtest: CPU meter not started (StartCPU)")

// StartCPU reads the host's CPU use so far.
func StartCPU() CPUMeter {
	u, err := ReadCPUUse()
	return CPUMeter{before: u, err: err, started: true}
}

// Stop reads the host's CPU use again and answers what the run named run,
// of tiles tiles, spent since StartCPU — pgbench its client's own CPU, in
// pgbench's runs — or why it cannot: either reading's error.
func (m CPUMeter) Stop(run string, tiles int, pgbench time.Duration) (RunCPU, error) {
	if !m.started {
		return RunCPU{}, errNotStarted
	}
	if m.err != nil {
		return RunCPU{}, m.err
	}
	now, err := ReadCPUUse()
	if err != nil {
		return RunCPU{}, err
	}
	return RunCPU{Run: run, Tiles: tiles, CPUTimes: now.Since(m.before), Pgbench: pgbench}, nil
}

// PerTile is d over the run's tiles, in µs (over one tile if it had none).
func (r RunCPU) PerTile(d time.Duration) float64 {
	return float64(d.Microseconds()) / float64(max(r.Tiles, 1))
}

// add keeps c in res.CPU, or the first error in res.CPUErr.
func (res *CeilingResult) add(c RunCPU, err error) {
	switch {
	case err == nil:
		res.CPU = append(res.CPU, c)
	case res.CPUErr == nil:
		res.CPUErr = err
	}
}

// RunCeiling runs, per list, the layer's tile query through pgbench (the
// database's own ceiling, bracketed: the tile sent as text, and not sent)
// and then the same tiles through geotoll with the same number of
// connections for the same time, as an identity client and as a gzip
// client. The server must run with its tile cache off. With
// Pgbench.Steady n, pgbench's rates leave each of its fresh connections'
// first n tiles out, and geotoll serves n tiles of the list for each of
// its connections (untimed) before its loops: both are measured warm. A
// pgbench run in which a connection served n tiles or fewer fails, and so
// does a warm-up that has not served its tiles within WarmTimeout (a
// *WarmUpTimeout).
func RunCeiling(ctx context.Context, o CeilingOptions) ([]CeilingResult, error) {
	o.Pgbench.Clients = cmpOr(o.Pgbench.Clients, 16)
	if o.Pgbench.Duration <= 0 {
		o.Pgbench.Duration = 10 * time.Second
	}
	var out []CeilingResult
	for _, list := range o.Lists {
		res := CeilingResult{List: list.Name, Tiles: len(list.Tiles)}
		for _, run := range []struct {
			script     func(*tiles.Layer, []maptile.Tile) (string, error)
			tps        *float64
			name, what string
		}{{PgbenchScript, &res.PgbenchTPS, "pgbench", ""}, {PgbenchUnsentScript, &res.UnsentTPS, "not sent", ", tiles not sent"}} {
			script, err := run.script(o.Layer, list.Tiles)
			if err != nil {
				return out, err
			}
			cpu := StartCPU()
			r, err := o.Pgbench.Exec(ctx, script, o.Layer.Name)
			if err != nil {
				return out, err
			}
			res.add(cpu.Stop(run.name, r.Transactions, r.CPU))
			*run.tps = r.TPS
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "== pgbench, list %s%s\n%s\n", list.Name, run.what, r.Output)
			}
		}
		if o.Pgbench.Steady > 0 {
			w, err := o.warmUp(ctx, list)
			if err != nil {
				return out, err
			}
			res.Warm = &w
		}
		for _, gzip := range []bool{false, true} {
			cpu := StartCPU()
			r, err := o.Client.Loop(ctx, o.Layer.Name, list.Tiles, o.Pgbench.Clients, o.Pgbench.Duration, gzip)
			if err != nil {
				return out, err
			}
			res.add(cpu.Stop(r.Encoding, r.OK, 0))
			res.Loops = append(res.Loops, r)
		}
		out = append(out, res)
	}
	return out, nil
}

// warmUp has geotoll serve Pgbench.Steady tiles of the list for each of
// its connections, untimed, within WarmTimeout: a stalled server (one
// that accepts connections and never answers) fails it with a
// *WarmUpTimeout rather than holding the run forever.
func (o CeilingOptions) warmUp(ctx context.Context, list TileList) (LoopResult, error) {
	timeout := o.WarmTimeout
	if timeout <= 0 {
		timeout = DefaultWarmTimeout
	}
	want := o.Pgbench.Steady * o.Pgbench.Clients
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := o.Client.LoopCount(wctx, o.Layer.Name, list.Tiles, o.Pgbench.Clients, want, false)
	switch {
	case err != nil:
		return w, err
	case ctx.Err() != nil:
		return w, ctx.Err()
	case w.Requests < want && ended(wctx):
		return w, &WarmUpTimeout{List: list.Name, Timeout: timeout, Want: want, Got: w}
	}
	return w, nil
}

// WriteCeiling prints tiles/s against the ceiling, and where this host's
// CPU went in each run (see RunCPU).
func WriteCeiling(w io.Writer, layer string, clients, warm int, d time.Duration, rs []CeilingResult) {
	fmt.Fprintf(w, "layer %s: %d connections for %s each; pgbench -M prepared, the same SQL and tiles (the ceiling),\n", layer, clients, d)
	fmt.Fprintf(w, "the tile sent (as text: hex) and not sent (its length instead); while pgbench keeps the database busy, its ceiling lies between\n")
	if warm > 0 {
		fmt.Fprintf(w, "pgbench's rates: while all its connections ran, each past its first %d tiles (a fresh connection warms up); geotoll served %d tiles of each list first\n", warm, warm*clients)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "list\ttiles\tpgbench tx/s\tnot sent\tclient\tgeotoll tiles/s\t× ceiling\t× not sent\tp50\tp99\tKB/tile\tstatus\t")
	for _, r := range rs {
		for _, l := range r.Loops {
			kb := float64(l.BodyBytes) / 1024 / float64(max(1, l.Requests))
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%.0f\t%.2f\t%.2f\t%s\t%s\t%.1f\t%s\t\n", r.List, r.Tiles, r.PgbenchTPS, r.UnsentTPS,
				l.Encoding, l.TilesPerSec, l.TilesPerSec/r.PgbenchTPS, l.TilesPerSec/r.UnsentTPS,
				l.P50.Round(10*time.Microsecond), l.P99.Round(10*time.Microsecond), kb, StatusText(l.Status))
		}
	}
	tw.Flush()
	writeCeilingCPU(w, rs)
	for _, r := range rs {
		if r.Warm != nil {
			fmt.Fprintf(w, "geotoll's warm-up, list %s: %s\n", r.List, StatusText(r.Warm.Status))
		}
	}
}

// writeCeilingCPU prints where this host's CPU went in each run, per
// tile, as far as it was read.
func writeCeilingCPU(w io.Writer, rs []CeilingResult) {
	here, read := false, false
	for _, r := range rs {
		if r.CPUErr != nil {
			fmt.Fprintf(w, "\nthis host's CPU, list %s: not read for every run: %v\n", r.List, r.CPUErr)
		}
		for _, c := range r.CPU {
			read, here = true, here || c.PostgresHere
		}
	}
	if !read {
		return
	}
	fmt.Fprintf(w, "\nthis host's CPU, µs a tile over each whole run (pgbench's: with its connections' warm-up). server: the processes\n")
	fmt.Fprintf(w, "named geotoll but this one; client: pgbench, and this process (the load generator of geotoll's runs).\n")
	if here {
		fmt.Fprintf(w, "On a host the runs keep busy, CPU outside the database is CPU it does not get\n\n")
	} else {
		fmt.Fprintf(w, "No process named postgres was seen on this host: the database runs elsewhere, and its CPU is not here\n\n")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "list\trun\ttiles\thost\tpostgres\tredis\tserver\tclient\trest\tsteal\tswitches\t")
	for _, r := range rs {
		for _, c := range r.CPU {
			if c.Tiles <= 0 {
				fmt.Fprintf(tw, "%s\t%s\t0\t–\t–\t–\t–\t–\t–\t–\t–\t\n", r.List, c.Run)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t\n", r.List, c.Run, c.Tiles,
				c.PerTile(c.Busy), c.PerTile(c.Postgres), c.PerTile(c.Redis), c.PerTile(c.Geotoll), c.PerTile(c.Client()),
				c.PerTile(c.Rest()), c.PerTile(c.Steal), float64(c.Switches)/float64(c.Tiles))
		}
	}
	tw.Flush()
}
