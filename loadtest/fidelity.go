package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// FidelityOptions configure RunFidelity.
type FidelityOptions struct {
	Client *Client
	Pool   *pgxpool.Pool // the read role: where the layer's data lies
	Timer  Timer
	Layer  *tiles.Layer // the layer as the server is configured
	Tiles  int          // tiles sampled, default 200
	Seed   uint64       // default 1
	// MinZoom..MaxZoom, within the layer's own range; 0 is z0 (the
	// CLI's default range is 0..16).
	MinZoom, MaxZoom int
	Progress         io.Writer // when set, one line per tile
}

// FidelitySample is one tile's price against its database time.
type FidelitySample struct {
	Tile     maptile.Tile `json:"-"`
	Z        int          `json:"z"`
	X        uint32       `json:"x"`
	Y        uint32       `json:"y"`
	Price    float64      `json:"price"`              // ?dry_run=1
	Cost     float64      `json:"cost"`               // X-Request-Cost of the real request
	Estimate *float64     `json:"estimate,omitempty"` // X-Request-Cost-Estimate, when sent
	Status   int          `json:"status"`
	Bytes    int          `json:"bytes"`
	Features int          `json:"features"`
	DBms     float64      `json:"db_ms"`
	Censored bool         `json:"censored"` // DBms is a lower bound (timed out)
}

// FidelityReport is the outcome of RunFidelity.
type FidelityReport struct {
	Layer   string           `json:"layer"`
	Seed    uint64           `json:"seed"`
	Samples []FidelitySample `json:"samples"`
	Timer   string           `json:"timer"`
	Took    time.Duration    `json:"took"`
}

func (o *FidelityOptions) defaults() error {
	if o.Tiles <= 0 {
		o.Tiles = 200
	}
	minZ, maxZ := o.MinZoom, o.MaxZoom
	if o.Seed, o.MinZoom, o.MaxZoom = sampling(o.Layer, o.Seed, minZ, maxZ); o.MinZoom > o.MaxZoom {
		return noZoom(o.Layer, minZ, maxZ)
	}
	return nil
}

// sampling returns the seed (default 1) and the zoom range minZ..maxZ
// within the layer's own: a maxZ of 0 is z0, not a default.
func sampling(l *tiles.Layer, seed uint64, minZ, maxZ int) (uint64, int, int) {
	if seed == 0 {
		seed = 1
	}
	return seed, max(minZ, l.MinZoom), min(maxZ, l.MaxZoom)
}

// noZoom is the error of a zoom range minZ..maxZ that holds none of the
// layer's zooms: nothing to measure.
func noZoom(l *tiles.Layer, minZ, maxZ int) error {
	return fmt.Errorf("no tile to ask for: zooms z%d–%d hold none of layer %s's (z%d–%d)", minZ, maxZ, l.Name, l.MinZoom, l.MaxZoom)
}

// RunFidelity samples tiles of one layer (half where the layer has data,
// half anywhere) and, one tile at a time, asks the server for the tile's
// dry-run price, requests it for real (the server must run with its tile
// cache off, and the key's tier must never refuse), and times the layer's
// query in PostgreSQL. It stops with an error at the first tile the server
// would refuse, did not draw or answered from its tile cache (see
// measure), and when it sampled no tile.
func RunFidelity(ctx context.Context, o FidelityOptions) (FidelityReport, error) {
	if err := o.defaults(); err != nil {
		return FidelityReport{}, err
	}
	if err := o.Client.check(); err != nil {
		return FidelityReport{}, err
	}
	start := time.Now()
	anchors, err := Anchors(ctx, o.Pool, o.Layer, o.Tiles/2, o.Seed)
	if err != nil {
		return FidelityReport{}, err
	}
	rep := FidelityReport{Layer: o.Layer.Name, Seed: o.Seed, Timer: o.Timer.String()}
	for i, t := range SampleTiles(o.Seed, o.Tiles, o.MinZoom, o.MaxZoom, anchors) {
		s, err := measure(ctx, o, t)
		if err != nil {
			return rep, err
		}
		rep.Samples = append(rep.Samples, s)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%3d %-14s price %6.2f cost %6.2f status %d %8d B %6d features %9.2f ms%s\n",
				i+1, tileName(t), s.Price, s.Cost, s.Status, s.Bytes, s.Features, s.DBms, censoredMark(s.Censored))
		}
	}
	rep.Took = time.Since(start)
	if len(rep.Samples) == 0 {
		return rep, fmt.Errorf("no tile sampled between z%d and z%d", o.MinZoom, o.MaxZoom)
	}
	return rep, nil
}

// measure prices, requests and times one tile. The real request must
// have been drawn (200, 204) or admitted and given up on at the server's
// own timeout (a 503 of problem type timeout: its database time is what
// ranks it); anything else — a refusal, a 503 of the rate limiter or of
// the global budget — is an error, since its X-Request-Cost is not a
// charge for the tile, and so is an answer from the server's tile cache
// (a *CacheHitError).
func measure(ctx context.Context, o FidelityOptions, t maptile.Tile) (FidelitySample, error) {
	s := FidelitySample{Tile: t, Z: int(t.Z), X: t.X, Y: t.Y}
	var err error
	if s.Price, err = o.Client.DryRun(ctx, o.Layer.Name, t); err != nil {
		return s, err
	}
	r, err := o.Client.Tile(ctx, o.Layer.Name, t)
	if err != nil {
		return s, err
	}
	if r.CacheHit {
		return s, &CacheHitError{Path: TilePath(o.Layer.Name, t)}
	}
	if !r.Drawn() && !r.TimedOut() {
		return s, fmt.Errorf("tile %s was answered %s, not drawn: fidelity needs a key of a tier that never refuses, and a server that answers",
			TilePath(o.Layer.Name, t), r.Answer())
	}
	s.Cost, s.Status, s.Bytes, s.Features = r.Cost, r.Status, r.Bytes, r.Features
	if !math.IsNaN(r.Estimate) {
		s.Estimate = &r.Estimate
	}
	tm, err := o.Timer.Time(ctx, o.Layer, t)
	if err != nil {
		return s, err
	}
	s.DBms, s.Censored = tm.MS, tm.Censored
	return s, nil
}

func tileName(t maptile.Tile) string { return fmt.Sprintf("%d/%d/%d", t.Z, t.X, t.Y) }

func censoredMark(c bool) string {
	if c {
		return " (timed out: lower bound)"
	}
	return ""
}

// dbRankValue is the sample's database time for ranking: a timed-out
// tile's time is only a lower bound, so it ranks above every finished one.
func dbRankValue(s FidelitySample) float64 {
	if s.Censored {
		return math.Inf(1)
	}
	return s.DBms
}

// ZoomBands are the bands of the fidelity report.
var ZoomBands = [][2]int{{0, 5}, {6, 10}, {11, 16}}

// Rho is Spearman's ρ of one column against DBms over the samples with
// zoom in [lo, hi], and how many there were.
func (r FidelityReport) Rho(col func(FidelitySample) float64, lo, hi int) (float64, int) {
	var xs, ys []float64
	for _, s := range r.Samples {
		if s.Z >= lo && s.Z <= hi {
			xs = append(xs, col(s))
			ys = append(ys, dbRankValue(s))
		}
	}
	return Spearman(xs, ys), len(xs)
}

// WriteText prints ρ overall and per zoom band, the cheap tiles' worst
// database time, and the worst offenders (largest gap between the rank of
// the price and the rank of the database time).
func (r FidelityReport) WriteText(w io.Writer) {
	censored := 0
	for _, s := range r.Samples {
		if s.Censored {
			censored++
		}
	}
	fmt.Fprintf(w, "layer %s: %d tiles (seed %d); %d timed out (ranked as the slowest)", r.Layer, len(r.Samples), r.Seed, censored)
	if r.Took > 0 { // a report read back from several files has no one timer or duration
		fmt.Fprintf(w, "; took %s\nDB time: %s", threeDigits(r.Took), r.Timer)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "zooms\ttiles\tρ(dry-run price, DB ms)\tρ(X-Request-Cost, DB ms)\tρ(features, DB ms)\t")
	price := func(s FidelitySample) float64 { return s.Price }
	cost := func(s FidelitySample) float64 { return s.Cost }
	feats := func(s FidelitySample) float64 { return float64(s.Features) }
	for _, b := range append([][2]int{{0, 22}}, ZoomBands...) {
		name := fmt.Sprintf("z%d–%d", b[0], b[1])
		if b[1] == 22 {
			name = "all"
		}
		rp, n := r.Rho(price, b[0], b[1])
		rc, _ := r.Rho(cost, b[0], b[1])
		rf, _ := r.Rho(feats, b[0], b[1])
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t\n", name, n, rp, rc, rf)
	}
	tw.Flush()
	cheap, cheapMax := 0, 0.0
	for _, s := range r.Samples {
		if s.Price < 2 {
			cheap++
			cheapMax = math.Max(cheapMax, s.DBms)
		}
	}
	fmt.Fprintf(w, "\n%d tiles priced under 2 tokens; the slowest of them took %.2f ms\n\nworst offenders (rank of price vs rank of DB time, of %d):\n", cheap, cheapMax, len(r.Samples))
	r.writeOffenders(w, 10)
}

func (r FidelityReport) writeOffenders(w io.Writer, n int) {
	prices, times := make([]float64, len(r.Samples)), make([]float64, len(r.Samples))
	for i, s := range r.Samples {
		prices[i], times[i] = s.Price, dbRankValue(s)
	}
	rp, rt := Ranks(prices), Ranks(times)
	idx := make([]int, len(r.Samples))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return math.Abs(rp[idx[a]]-rt[idx[a]]) > math.Abs(rp[idx[b]]-rt[idx[b]])
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tile\tprice\tprice rank\tDB ms\tDB rank\tstatus\tbytes\tfeatures\t")
	for _, i := range idx[:min(n, len(idx))] {
		s := r.Samples[i]
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.2f%s\t%.1f\t%d\t%d\t%d\t\n", tileName(s.Tile), s.Price, rp[i], s.DBms,
			map[bool]string{true: "+", false: ""}[s.Censored], rt[i], s.Status, s.Bytes, s.Features)
	}
	tw.Flush()
}

// ReadFidelity merges fidelity reports written as JSON (-json) into one,
// so that several layers, or runs, are ranked together. A file with no
// sampled tile is an error: RunFidelity writes none such, and its ρ
// would be NaN.
func ReadFidelity(paths ...string) (FidelityReport, error) {
	var out FidelityReport
	var names []string
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return out, err
		}
		var r FidelityReport
		if err := json.Unmarshal(raw, &r); err != nil {
			return out, fmt.Errorf("%s: %w", p, err)
		}
		if len(r.Samples) == 0 {
			return out, fmt.Errorf("%s: no sampled tile: not a report fidelity -json wrote", p)
		}
		for _, s := range r.Samples {
			s.Tile = maptile.New(s.X, s.Y, maptile.Zoom(s.Z)) //nolint:gosec // G115: z read back from a report this package wrote, 0..tiles.MaxZoom
			out.Samples = append(out.Samples, s)
		}
		names = append(names, r.Layer)
		out.Seed = r.Seed
	}
	out.Layer = strings.Join(names, "+")
	return out, nil
}

// threeDigits rounds d to three significant digits (1m23s, 4.56s, 789ms):
// a run of less than half a second does not read as "0s".
func threeDigits(d time.Duration) time.Duration {
	step := time.Duration(1)
	for d/step >= 1000 {
		step *= 10
	}
	return d.Round(step)
}
