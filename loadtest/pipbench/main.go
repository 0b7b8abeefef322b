// Command pipbench measures point-in-polygon throughput on the same seeded
// random points (lon/lat uniform over -180..180 × -56..72: land and sea)
// against up to three answerers of the same polygons, and checks every
// answer against PostGIS on the raw table:
//
//   - geotoll: POST /geofence/check?layer=… on a running server (-geotoll,
//     -key, -layer), a batch of points per request;
//   - raw: the same check statement run directly on the source table
//     (-db, -table; ST_Covers of each point against the whole polygons),
//     a batch of points per statement;
//   - tile38: INTERSECTS <collection> IDS POINT lat lng on a Tile38 server
//     (-tile38, -collection), a batch of commands pipelined per round trip;
//     -load first fills the collection from -db's table (SET … OBJECT with
//     ST_AsGeoJSON of every row).
//
// Each run sends the points in batches over c connections, repeating the
// whole set until -min-time has passed; points/s counts every point sent.
// The answers of a run's first pass are compared with the raw answers
// (computed by the first raw run, or read from -truth; written to -truth
// when it does not exist yet). Usage (see BENCHMARKS.md):
//
//	go run ./loadtest/pipbench -db "$ADMIN_URL" -table opendata.countries \
//	    -truth /tmp/pip-truth.json -geotoll http://127.0.0.1:18227 -key "$KEY" \
//	    -layer countries -tile38 127.0.0.1:19851 -load
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type point struct {
	Lng, Lat float64
}

// checker answers, for each point of a batch, the ids of the polygons that
// contain it, sorted. One checker is one connection.
type checker interface {
	check(ctx context.Context, pts []point) ([][]int64, error)
	Close() error
}

// target opens the connections of one answerer.
type target struct {
	name string
	open func(ctx context.Context) (checker, error)
}

type options struct {
	points             int
	seed               uint64
	batches, conns     []int
	rawBatches         []int
	rawConns           []int
	minTime            time.Duration
	truth              string
	geotoll, key       string
	layer              string
	db, table          string
	tile38, collection string
	load               bool
}

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pipbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("pipbench", flag.ContinueOnError)
	fs.IntVar(&o.points, "points", 1000, "points in the set")
	fs.Uint64Var(&o.seed, "seed", 7, "seed of the points")
	batches := fs.String("batches", "1,10,100", "points per request (geotoll) or per pipeline (tile38)")
	conns := fs.String("conns", "1,4", "connections")
	rawBatches := fs.String("raw-batches", "1,10", "points per statement on the raw table")
	rawConns := fs.String("raw-conns", "1,4", "connections to the raw table")
	fs.DurationVar(&o.minTime, "min-time", 5*time.Second, "least time of a geotoll or tile38 run")
	fs.StringVar(&o.truth, "truth", "", "file of the raw answers: read when it exists, else written")
	fs.StringVar(&o.geotoll, "geotoll", "", "geotoll base URL")
	fs.StringVar(&o.key, "key", "", "geotoll API key")
	fs.StringVar(&o.layer, "layer", "countries", "geotoll geofence layer")
	fs.StringVar(&o.db, "db", "", "PostgreSQL URL of the raw table")
	fs.StringVar(&o.table, "table", "opendata.countries", "raw table (id, geom in EPSG:4326)")
	fs.StringVar(&o.tile38, "tile38", "", "Tile38 address host:port")
	fs.StringVar(&o.collection, "collection", "countries", "Tile38 collection")
	fs.BoolVar(&o.load, "load", false, "fill the Tile38 collection from -db's table first")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	for _, l := range []struct {
		s   string
		dst *[]int
	}{{*batches, &o.batches}, {*conns, &o.conns}, {*rawBatches, &o.rawBatches}, {*rawConns, &o.rawConns}} {
		if *l.dst, err = ints(l.s); err != nil {
			return o, err
		}
	}
	return o, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	pts := randomPoints(o.points, o.seed)
	truth, err := readTruth(o.truth, len(pts))
	if err != nil {
		return err
	}
	fmt.Printf("%-8s %6s %5s %8s %8s %11s %s\n", "target", "batch", "conns", "points", "seconds", "points/s", "answers")
	if o.db != "" && len(o.rawBatches) > 0 {
		raw := rawTarget(o.db, o.table)
		for _, b := range o.rawBatches {
			for _, c := range o.rawConns {
				ans, err := measure(ctx, raw, pts, b, c, 0, truth)
				if err != nil {
					return err
				}
				if truth == nil {
					truth = ans
				}
			}
		}
		if err := writeTruth(o.truth, truth); err != nil {
			return err
		}
	}
	var targets []target
	if o.geotoll != "" {
		targets = append(targets, geotollTarget(o.geotoll, o.key, o.layer))
	}
	if o.tile38 != "" {
		if o.load {
			if err := loadTile38(ctx, o.tile38, o.collection, o.db, o.table); err != nil {
				return err
			}
		}
		targets = append(targets, tile38Target(o.tile38, o.collection))
	}
	for _, t := range targets {
		for _, b := range o.batches {
			for _, c := range o.conns {
				if _, err := measure(ctx, t, pts, b, c, o.minTime, truth); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func randomPoints(n int, seed uint64) []point {
	rng := rand.New(rand.NewPCG(seed, 0))
	pts := make([]point, n)
	for i := range pts {
		pts[i] = point{Lng: -180 + 360*rng.Float64(), Lat: -56 + 128*rng.Float64()}
	}
	return pts
}

// measure sends pts in batches of size batch over conns connections,
// repeating the set until minTime has passed (once at least), prints the
// rate and how the first pass's answers compare with truth, and returns
// them.
func measure(ctx context.Context, t target, pts []point, batch, conns int, minTime time.Duration, truth [][]int64) ([][]int64, error) {
	chunks := (len(pts) + batch - 1) / batch
	answers := make([][]int64, len(pts))
	var next atomic.Int64
	var sent, failed atomic.Int64
	var failures atomic.Pointer[error]
	var wg sync.WaitGroup
	errs := make([]error, conns)
	start := time.Now()
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = worker(ctx, t, func() (int, bool) {
				i := int(next.Add(1) - 1)
				return i, i < chunks || time.Since(start) < minTime
			}, func(i int) []point {
				lo := (i % chunks) * batch
				return pts[lo:min(lo+batch, len(pts))]
			}, func(i int, got [][]int64, err error) {
				if err != nil {
					failed.Add(1)
					failures.CompareAndSwap(nil, &err)
					return
				}
				sent.Add(int64(len(got)))
				if i < chunks {
					copy(answers[i*batch:], got)
				}
			})
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s batch %d conns %d: %w", t.name, batch, conns, err)
	}
	n := sent.Load()
	fmt.Printf("%-8s %6d %5d %8d %8.2f %11.1f %s\n", t.name, batch, conns, n, elapsed.Seconds(),
		float64(n)/elapsed.Seconds(), compare(pts, answers, truth))
	if f := failures.Load(); f != nil {
		fmt.Printf("    %d requests refused, the first: %v\n", failed.Load(), *f)
	}
	return answers, nil
}

func worker(ctx context.Context, t target, take func() (int, bool), chunk func(int) []point, done func(int, [][]int64, error)) error {
	c, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		i, more := take()
		if !more {
			return nil
		}
		got, err := c.check(ctx, chunk(i))
		done(i, got, err)
		if err != nil && !refused(err) {
			return err
		}
	}
}

// compare says how many points got answers other than truth's, listing the
// first few.
func compare(pts []point, got, truth [][]int64) string {
	inside := 0
	for _, a := range got {
		if len(a) > 0 {
			inside++
		}
	}
	if truth == nil {
		return fmt.Sprintf("%d inside; no raw answers to compare", inside)
	}
	var differ []string
	unanswered := 0
	for i := range got {
		if got[i] == nil {
			unanswered++
			continue
		}
		if !slices.Equal(got[i], truth[i]) {
			differ = append(differ, fmt.Sprintf("[%.9f, %.9f] %v, raw %v", pts[i].Lng, pts[i].Lat, got[i], truth[i]))
		}
	}
	s := fmt.Sprintf("%d inside; %d differ from raw", inside, len(differ))
	if unanswered > 0 {
		s += fmt.Sprintf(" (%d not answered, not compared)", unanswered)
	}
	for _, d := range differ[:min(len(differ), 5)] {
		s += "\n    " + d
	}
	return s
}

func readTruth(path string, n int) ([][]int64, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var t [][]int64
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(t) != n {
		return nil, fmt.Errorf("%s holds %d answers for %d points", path, len(t), n)
	}
	return t, nil
}

func writeTruth(path string, t [][]int64) error {
	if path == "" || t == nil {
		return nil
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
