package loadtest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/paulmach/orb/maptile"
)

// LoopResult is the outcome of a closed loop of tile requests.
type LoopResult struct {
	Encoding    string // "identity" or "gzip"
	Requests    int
	OK          int         // 200 and 204
	Status      map[int]int // 0: transport errors
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
// encoding at all.
func (c *Client) Loop(ctx context.Context, layer string, ts []maptile.Tile, workers int, d time.Duration, gzip bool) (LoopResult, error) {
	if err := c.check(); err != nil {
		return LoopResult{}, err
	}
	if len(ts) == 0 || workers < 1 || d <= 0 {
		return LoopResult{}, fmt.Errorf("loop: %d tiles, %d workers, %s", len(ts), workers, d)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type workerResult struct {
		status map[int]int
		lat    []time.Duration
		bytes  int64
	}
	results := make([]workerResult, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := workerResult{status: map[int]int{}}
			mine := stripe(ts, w, workers)
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				code, n := c.fetch(ctx, TilePath(layer, mine[i%len(mine)]), gzip)
				if ctx.Err() != nil && code == 0 {
					break // cut by the end of the run, not an error
				}
				r.status[code]++
				r.lat = append(r.lat, time.Since(t0))
				r.bytes += n
			}
			results[w] = r
		}()
	}
	wg.Wait()
	out := LoopResult{Encoding: map[bool]string{true: "gzip", false: "identity"}[gzip], Status: map[int]int{}, Duration: time.Since(start)}
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
		out.P50, out.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	out.TilesPerSec = float64(out.OK) / out.Duration.Seconds()
	return out, nil
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

// fetch requests path and reads the body; code 0 is a transport error.
func (c *Client) fetch(ctx context.Context, path string, gzip bool) (int, int64) {
	resp, err := c.get(ctx, path, gzip)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, n
	}
	return resp.StatusCode, n
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
