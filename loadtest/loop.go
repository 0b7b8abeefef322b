package loadtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paulmach/orb/maptile"
)

// LoopResult is the outcome of a closed loop of tile requests.
type LoopResult struct {
	Encoding    string // "identity" or "gzip"
	Requests    int
	OK          int         // 200 and 204
	Status      map[int]int // 0: transport errors and answers cut short
	Duration    time.Duration
	TilesPerSec float64 // OK per second
	P50, P99    time.Duration
	BodyBytes   int64
}

// Loop sends the layer's tiles ts through workers connections, each one
// request at a time (a closed loop, like pgbench's clients), for d. Worker
// w walks its own stripe of the list in order: tiles w, w+workers,
// w+2·workers… (see stripe), so no two requests for one tile are ever in
// flight together — a server that coalesces concurrent requests for a
// tile would otherwise render fewer tiles than it answers, and beat the
// database's ceiling by doing less. gzip sends Accept-Encoding: gzip and
// reads the compressed body as is; otherwise the client asks for no
// encoding at all. Each worker is one keep-alive HTTP/1.1 connection of
// its own (see conn), not net/http's client. The loop measures the
// server's rendering: it ends at the first answer from the server's tile
// cache (X-Cache: HIT), with a *CacheHitError and what it counted so far.
func (c *Client) Loop(ctx context.Context, layer string, ts []maptile.Tile, workers int, d time.Duration, gzip bool) (LoopResult, error) {
	if d <= 0 {
		return LoopResult{}, fmt.Errorf("loop: duration %s", d)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.loop(ctx, layer, ts, workers, gzip, func() bool { return true })
}

// LoopCount is Loop for n requests in all, however long they take.
func (c *Client) LoopCount(ctx context.Context, layer string, ts []maptile.Tile, workers, n int, gzip bool) (LoopResult, error) {
	var sent atomic.Int64
	return c.loop(ctx, layer, ts, workers, gzip, func() bool { return sent.Add(1) <= int64(n) })
}

// loop runs the workers while ctx lasts and more says a request is left,
// and no answer came from the server's tile cache.
func (c *Client) loop(ctx context.Context, layer string, ts []maptile.Tile, workers int, gzip bool, more func() bool) (LoopResult, error) {
	if err := c.check(); err != nil {
		return LoopResult{}, err
	}
	if len(ts) == 0 || workers < 1 {
		return LoopResult{}, fmt.Errorf("loop: %d tiles, %d workers", len(ts), workers)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var hit atomic.Pointer[string] // the path of the first tile answered from the cache
	header := []string{}
	if c.Key != "" {
		header = append(header, "X-API-Key: "+c.Key)
	}
	if gzip {
		header = append(header, "Accept-Encoding: gzip")
	}
	results := make([]workerResult, workers)
	conns := make([]*conn, workers)
	for w := range conns {
		cn, err := newConn(c.BaseURL, header...)
		if err != nil {
			return LoopResult{}, err
		}
		defer cn.Close()
		conns[w] = cn
	}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			r := workerResult{status: map[int]int{}}
			mine := stripe(ts, w, workers)
			paths := make([]string, len(mine)) // formatted once, not per request
			for i, t := range mine {
				paths[i] = TilePath(layer, t)
			}
			for i := 0; !ended(ctx) && more(); i++ {
				t0 := time.Now()
				resp, err := conns[w].get(ctx, paths[i%len(paths)])
				if err != nil && ended(ctx) {
					break // cut by the end of the run, not an error
				}
				if err != nil {
					// A transport error, or an answer cut short (its
					// status line came, its body did not): no tile.
					r.status[0]++
					r.lat = append(r.lat, time.Since(t0))
					r.bytes += resp.bytes
					pause(ctx, errorPause) // a refused connection fails at once: do not spin
					continue
				}
				r.status[resp.status]++
				r.lat = append(r.lat, time.Since(t0))
				r.bytes += resp.bytes
				if resp.cacheHit {
					hit.CompareAndSwap(nil, &paths[i%len(paths)])
					stop()
				}
			}
			results[w] = r
		})
	}
	wg.Wait()
	out := loopResult(results, gzip, time.Since(start))
	if p := hit.Load(); p != nil {
		return out, &CacheHitError{Path: *p}
	}
	return out, nil
}

// workerResult is what one worker of a loop counted.
type workerResult struct {
	status map[int]int
	lat    []time.Duration
	bytes  int64
}

// loopResult adds up the workers' counts over a loop of duration d.
func loopResult(results []workerResult, gzip bool, d time.Duration) LoopResult {
	out := LoopResult{Encoding: map[bool]string{true: "gzip", false: "identity"}[gzip], Status: map[int]int{}, Duration: d}
	var lat []time.Duration
	for _, r := range results {
		for code, n := range r.status {
			out.Status[code] += n
			out.Requests += n
			if code == 200 || code == 204 {
				out.OK += n
			}
		}
		lat = append(lat, r.lat...)
		out.BodyBytes += r.bytes
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		out.P50, out.P99 = percentile(lat, 50), percentile(lat, 99)
	}
	out.TilesPerSec = float64(out.OK) / out.Duration.Seconds()
	return out
}

// errorPause is how long a worker (of Loop, a flood, a crawl) waits after
// a failed request before its next one.
const errorPause = 10 * time.Millisecond

// ended reports whether ctx is over, by its deadline too: the
// connection's deadline (ctx's) may cut a request before ctx's own timer
// has fired.
func ended(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || (ok && !time.Now().Before(dl))
}

// stripe is worker w's share of ts: every workers-th tile from w. The
// stripes of workers 0..workers-1 are disjoint and cover ts; with fewer
// tiles than workers, worker w shares tile w mod len(ts) with others.
func stripe(ts []maptile.Tile, w, workers int) []maptile.Tile {
	if w >= len(ts) {
		return ts[w%len(ts) : w%len(ts)+1]
	}
	var out []maptile.Tile
	for i := w; i < len(ts); i += workers {
		out = append(out, ts[i])
	}
	return out
}

// StatusText prints status counts as "200×12 204×3".
func StatusText(m map[int]int) string {
	codes := make([]int, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", c, m[c])
	}
	return strings.Join(parts, " ")
}
