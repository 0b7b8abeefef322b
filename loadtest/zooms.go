package loadtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// ZoomOptions configure RunZooms.
type ZoomOptions struct {
	Client  *Client
	Pool    *pgxpool.Pool // the read role: where the layer's data lies
	Timer   Timer
	Layer   *tiles.Layer
	PerZoom int    // tiles per zoom, where the layer has data; default 8
	Seed    uint64 // default 1
	// MinZoom..MaxZoom, within the layer's own range; 0 is z0 (the
	// CLI's default range is 0..16).
	MinZoom, MaxZoom int
	Progress         io.Writer // when set, one line per tile
}

// ZoomRow is one zoom of the per-zoom table: medians over its tiles.
type ZoomRow struct {
	Zoom int
	// Tiles is every tile of the zoom asked for, whatever the answer (each
	// counted in Status); the medians are over the tiles timed, those the
	// server drew or gave up on at its own timeout (Tiles - Failed()).
	Tiles    int
	Bytes    float64 // uncompressed MVT as the server sent it; NaN when no tile was drawn
	MaxBytes int
	Features float64
	DBms     float64
	MaxDBms  float64
	Censored int         // tiles whose query timed out (their DBms is a lower bound)
	Status   map[int]int // the server's answers
	// TimedOut counts the 503s (in Status) at which the server gave up on
	// an admitted request's query (problem type timeout); the other 503s,
	// like every refusal, are failures.
	TimedOut int
}

// Failed is how many of the row's tiles the server neither drew (200,
// 204) nor gave up on at its own timeout: refused, or answered 503 by the
// rate limiter, the global budget or a database it could not reach.
func (r ZoomRow) Failed() int {
	return r.Tiles - r.Status[200] - r.Status[204] - r.TimedOut
}

// AnchoredTiles returns up to n distinct tiles of zoom z under the
// anchors (lon/lat), in the anchors' order.
func AnchoredTiles(anchors []orb.Point, z maptile.Zoom, n int) []maptile.Tile {
	seen := map[maptile.Tile]bool{}
	var out []maptile.Tile
	for _, p := range anchors {
		if len(out) == n {
			break
		}
		t := maptile.At(orb.Point{p[0], clampLat(p[1])}, z)
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// RunZooms measures, per zoom, the tiles under PerZoom random positions of
// the layer's data: the server's bytes and features, and the database
// time of the layer's query. A zoom range that holds none of the layer's
// zooms is an error. Each row counts the server's answers; see
// ZoomRow.Failed for those that measured nothing.
func RunZooms(ctx context.Context, o ZoomOptions) ([]ZoomRow, error) {
	if o.PerZoom <= 0 {
		o.PerZoom = 8
	}
	minZ, maxZ := o.MinZoom, o.MaxZoom
	if o.Seed, o.MinZoom, o.MaxZoom = sampling(o.Layer, o.Seed, minZ, maxZ); o.MinZoom > o.MaxZoom {
		return nil, noZoom(o.Layer, minZ, maxZ)
	}
	if err := o.Client.check(); err != nil {
		return nil, err
	}
	anchors, err := Anchors(ctx, o.Pool, o.Layer, 4*o.PerZoom, o.Seed)
	if err != nil {
		return nil, err
	}
	var rows []ZoomRow
	for z := o.MinZoom; z <= o.MaxZoom; z++ {
		row := ZoomRow{Zoom: z, Status: map[int]int{}}
		var bytes, feats, ms []float64
		for _, t := range AnchoredTiles(anchors, maptile.Zoom(z), o.PerZoom) { //nolint:gosec // G115: zooms are 0..tiles.MaxZoom, validated with the configuration
			r, err := o.Client.Tile(ctx, o.Layer.Name, t)
			if err != nil {
				return rows, err
			}
			row.Tiles++ // asked for: refused or drawn, it counts (see Failed)
			if !r.Drawn() && !r.TimedOut() {
				// Refused, or failed: nothing of the tile to time (a
				// server timer's own request would be refused as well).
				// The row counts its status, and the run fails on it once
				// it has printed what it saw.
				row.Status[r.Status]++
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "%-14s status %s: not timed\n", tileName(t), r.Answer())
				}
				continue
			}
			tm, err := o.Timer.Time(ctx, o.Layer, t)
			if err != nil {
				return rows, err
			}
			row.Status[r.Status]++
			if r.TimedOut() {
				row.TimedOut++
			}
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "%-14s status %s %8d B %6d features %9.2f ms%s\n", tileName(t), r.Answer(), r.Bytes, r.Features, tm.MS, censoredMark(tm.Censored))
			}
			if b, f, ok := tileSize(r, tm); ok { // else nobody drew the tile: no size to count
				bytes, feats = append(bytes, float64(b)), append(feats, float64(f))
				row.MaxBytes = max(row.MaxBytes, b)
			}
			ms = append(ms, tm.MS)
			if tm.Censored {
				row.Censored++
			}
		}
		row.Bytes, row.Features, row.DBms = math.NaN(), math.NaN(), Median(ms)
		if len(bytes) > 0 {
			row.Bytes, row.Features = Median(bytes), Median(feats)
		}
		if len(ms) > 0 {
			row.MaxDBms = slices.Max(ms)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// tileSize is the tile's size and features: as the server sent it when it
// drew it; as the database drew it when the server gave up on it at its
// own timeout (an admitted request's 503 of problem type timeout) and the
// timed query finished. ok is false when nobody drew the tile — and for
// any other answer (a refusal, a 503 of the rate limiter), which is no
// measurement of the tile.
func tileSize(r TileResponse, tm Timing) (bytes, features int, ok bool) {
	switch {
	case r.Drawn():
		return r.Bytes, r.Features, true
	case r.TimedOut() && !tm.Censored:
		return tm.Bytes, tm.Features, true
	}
	return 0, 0, false
}

// WriteZooms prints the per-zoom table.
func WriteZooms(w io.Writer, layer string, rows []ZoomRow) {
	fmt.Fprintf(w, "layer %s: medians over the tiles under random positions of its data (DB ms: median of 3 runs each;\n"+
		"bytes and features as the server sent them, or as the database drew them when the server gave up at its timeout: 503 timeout)\n\n", layer)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "zoom\ttiles\tbytes\tmax bytes\tfeatures\tDB ms\tmax DB ms\ttimed out\tserver\t")
	for _, r := range rows {
		server := StatusText(r.Status)
		if r.TimedOut > 0 {
			server += fmt.Sprintf(" (%d timeout)", r.TimedOut)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%.2f\t%.2f\t%d\t%s\t\n", r.Zoom, r.Tiles, whole(r.Bytes), r.MaxBytes, whole(r.Features), r.DBms, r.MaxDBms, r.Censored, server)
	}
	tw.Flush()
}

// whole prints v without decimals, or "—" for NaN (nothing measured).
func whole(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}
