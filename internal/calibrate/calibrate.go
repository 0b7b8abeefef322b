// Package calibrate fits the work models that price requests to the
// database they run on. It times a stratified sample of real requests —
// tiles of every layer at every zoom, geofence queries of every layer and
// kind, half where the data is and half anywhere — through the same stores
// and the same metering (internal/pgcall) that settle a served request,
// asks the density models what each one reads, and fits, per group of
// requests that serve prices with one model (a tile layer's tiles — of its
// overviews, its table or its pieces alike —, within and bbox of a
// geofence layer, contains and check of the fences, contains and check on
// a polygon layer), the non-negative model
//
//	ms = query + features × feature_ms + vertices × vertex_ms
//
// on part of the sample (pricing.Fit). The rest is held out: the Spearman
// rank correlation there, of the price the fitted model gives and of the
// settled cost (the database time of one run, as a served request is
// settled) against the measured time, says how well prices rank requests
// by cost on this data.
package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/loadtest"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// Estimator is what the density models say a request reads.
type Estimator interface {
	Tile(l *tiles.Layer, t maptile.Tile) (density.Estimate, bool)
	Geofence(d geofence.Demand) (density.Estimate, bool)
}

// Options configure Run.
type Options struct {
	Tiles     *tiles.Store
	Geofence  *geofence.Store
	Estimator Estimator // built models of every relation the layers read

	// TileLayers and their anchors (lon/lat positions where each has
	// data, by layer name); GeofenceLayers likewise; FenceAnchors are
	// positions inside the fences. Containment are the polygon layers
	// whose contains and check (?layer=) are timed, on what serve reads
	// for them (their pieces or their table), at the anchors of their
	// geofence layer ("geofence/<layer>").
	TileLayers     []*tiles.Layer
	GeofenceLayers []*geofence.Layer
	Containment    []*geofence.Containment
	Anchors        map[string][]orb.Point
	FenceAnchors   []orb.Point
	Limits         geofence.Limits

	PerZoom int     // tiles per zoom and layer, default 8
	Queries int     // geofence requests per kind and layer, default 24
	Runs    int     // timed runs after the first, default 3 (their median is the measured time)
	HoldOut float64 // the share of each group held out of the fit, default 0.3
	Seed    uint64  // default 1
	MinZoom int     // tiles from MinZoom…
	MaxZoom int     // …to MaxZoom, within each layer's range (default 0..16)
	// Weights price a request from a fitted model: base and max_cost
	// clamp it, as serve does. MsPerToken is the unit (default 1).
	Weights    func(group string) throttle.Weights
	MsPerToken float64
	// Charged is what serve charges a request of price estimate that took
	// db (toll.Toll.Charged): the settled cost ρ is taken of. Required.
	Charged  func(estimate float64, db time.Duration, base, most float64) float64
	Progress io.Writer // when set, one line per request
}

// Sample is one timed request.
type Sample struct {
	Group    string // "tiles/<layer>", "geofence/<layer>", "fences" or "containment/<layer>"
	Request  string // e.g. "z12 2200/1343" or "within r=5000 m"
	Zoom     int    // a tile's zoom, else -1
	Estimate density.Estimate
	// FirstMS is the database time of the first run: what settling the
	// request as served charges. MS is the median of the later runs.
	FirstMS, MS float64
	// Censored: a run hit the statement timeout, MS is a lower bound
	// (such samples are ranked, never fitted).
	Censored bool
	HeldOut  bool
}

// Group is one fitted work model.
type Group struct {
	Name    string
	Work    throttle.WorkModel
	Fitted  int     // samples the fit used
	HeldOut int     // samples ranked
	RhoEst  float64 // Spearman ρ of the fitted price and the measured time, held out
	RhoSett float64 // …of the settled cost and the measured time
	Err     error   // no fit (too few samples, or no non-negative solution)
}

// Report is the outcome of Run.
type Report struct {
	Samples []Sample
	Groups  []Group
	Took    time.Duration
}

func (o *Options) defaults() {
	if o.PerZoom <= 0 {
		o.PerZoom = 8
	}
	if o.Queries <= 0 {
		o.Queries = 24
	}
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if !(o.HoldOut > 0 && o.HoldOut < 1) {
		o.HoldOut = 0.3
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.MaxZoom == 0 {
		o.MaxZoom = 16
	}
	if o.MsPerToken <= 0 {
		o.MsPerToken = 1
	}
}

// Run times the sample and fits every group.
func Run(ctx context.Context, o Options) (Report, error) {
	o.defaults()
	if o.Charged == nil {
		return Report{}, errors.New("calibrate: Options.Charged is required (toll.Toll.Charged)")
	}
	start := time.Now()
	var rep Report
	for _, l := range o.TileLayers {
		group := "tiles/" + l.Name
		for _, t := range TileSample(o.Seed, o.PerZoom, max(o.MinZoom, l.MinZoom), min(o.MaxZoom, l.MaxZoom), o.Anchors[l.Name]) {
			est, ok := o.Estimator.Tile(l, t)
			if !ok {
				return rep, fmt.Errorf("calibrate: no model of %s at z%d", l.Name, t.Z)
			}
			s, err := timeIt(ctx, o, func(ctx context.Context) error {
				_, err := o.Tiles.Tile(ctx, []*tiles.Layer{l}, t)
				return err
			})
			if err != nil {
				return rep, fmt.Errorf("calibrate: %s %d/%d/%d: %w", l.Name, t.Z, t.X, t.Y, err)
			}
			s.Group, s.Request, s.Zoom, s.Estimate = group, fmt.Sprintf("z%d %d/%d", t.Z, t.X, t.Y), int(t.Z), est
			rep.add(o, s)
		}
	}
	for _, l := range o.GeofenceLayers {
		for _, d := range GeofenceSample(o.Seed, o.Queries, l.Name, o.Limits, o.Anchors["geofence/"+l.Name]) {
			if err := rep.demand(ctx, o, "geofence/"+l.Name, l, nil, d); err != nil {
				return rep, err
			}
		}
	}
	if o.Geofence != nil {
		// contains and check on the fences are one group: serve prices
		// both with one work model (toll.Toll.FenceWork, the weights
		// file's fences), so one model is fitted to both. What each one
		// reads differs — contains renders the fences it finds whole,
		// check tests their pieces — and the model sees that difference
		// only through the estimates, which FenceSample's demands make
		// the ones serve prices.
		for _, d := range FenceSample(o.Seed, o.Queries, o.Limits, o.FenceAnchors) {
			if err := rep.demand(ctx, o, "fences", nil, nil, d); err != nil {
				return rep, err
			}
		}
		// On a layer, serve prices them with the layer's own model: its
		// polygons, and whether pieces or whole ones are tested, are not
		// the fences'.
		for _, ct := range o.Containment {
			group := "containment/" + ct.Layer.Name
			// At the layer's anchors (its polygons' vertices: on their
			// boundaries, which contains and check count as inside).
			for _, d := range ContainmentSample(o.Seed, o.Queries, o.Limits, ct, o.Anchors["geofence/"+ct.Layer.Name]) {
				if err := rep.demand(ctx, o, group, nil, ct, d); err != nil {
					return rep, err
				}
			}
		}
	}
	rep.fit(o)
	rep.Took = time.Since(start)
	return rep, nil
}

func (rep *Report) add(o Options, s Sample) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%-24s %-28s features %10.0f vertices %12.0f  %9.2f ms%s\n",
			s.Group, s.Request, s.Estimate.Features, s.Estimate.Vertices, s.MS, map[bool]string{true: " (timed out)"}[s.Censored])
	}
	rep.Samples = append(rep.Samples, s)
}

// demand times one geofence request: within and bbox on l, contains and
// check on ct (nil: the fences).
func (rep *Report) demand(ctx context.Context, o Options, group string, l *geofence.Layer, ct *geofence.Containment, d geofence.Demand) error {
	est, ok := o.Estimator.Geofence(d)
	if !ok {
		return fmt.Errorf("calibrate: no model for %s %s", group, d.Kind)
	}
	run := func(ctx context.Context) error {
		var err error
		switch d.Kind {
		case geofence.KindWithin:
			_, _, err = o.Geofence.Within(ctx, geofence.WithinQuery{Layer: l, Lng: d.At[0][0], Lat: d.At[0][1], Radius: d.RadiusM, Limit: d.Limit,
				MaxVertices: o.Limits.MaxResponseVertices})
		case geofence.KindBBox:
			east := d.Bound.Max[0]
			if east > 180 {
				east -= 360
			}
			box := geofence.BBox{West: d.Bound.Min[0], South: d.Bound.Min[1], East: east, North: d.Bound.Max[1]}
			_, _, err = o.Geofence.BBox(ctx, geofence.BBoxQuery{Layer: l, Box: box, Limit: d.Limit, MaxVertices: o.Limits.MaxResponseVertices})
		case geofence.KindContains:
			_, _, err = o.Geofence.Contains(ctx, geofence.ContainsQuery{Layer: ct, Lng: d.At[0][0], Lat: d.At[0][1], Limit: d.Limit,
				MaxVertices: o.Limits.MaxResponseVertices})
		case geofence.KindCheck:
			pts := make([]geofence.Point, len(d.At))
			for i, p := range d.At {
				pts[i] = geofence.Point{Lng: p[0], Lat: p[1]}
			}
			_, err = o.Geofence.Check(ctx, geofence.CheckQuery{Layer: ct, Points: pts})
		}
		return err
	}
	s, err := timeIt(ctx, o, run)
	if err != nil {
		return fmt.Errorf("calibrate: %s %s: %w", group, d.Kind, err)
	}
	s.Group, s.Zoom, s.Estimate = group, -1, est
	switch d.Kind {
	case geofence.KindWithin:
		s.Request = fmt.Sprintf("within r=%.0f m limit %d", d.RadiusM, d.Limit)
	case geofence.KindBBox:
		s.Request = fmt.Sprintf("bbox %.3g deg² limit %d", (d.Bound.Max[0]-d.Bound.Min[0])*(d.Bound.Max[1]-d.Bound.Min[1]), d.Limit)
	case geofence.KindContains:
		s.Request = "contains"
	case geofence.KindCheck:
		s.Request = fmt.Sprintf("check %d points", d.Points)
	}
	rep.add(o, s)
	return nil
}

// timeIt runs a request 1 + Runs times, metering each run's database time
// as settlement does. A run cut by its statement timeout ends the timing:
// the sample is censored at the time it ran.
func timeIt(ctx context.Context, o Options, run func(context.Context) error) (Sample, error) {
	var s Sample
	var later []float64
	for i := range 1 + o.Runs {
		mctx, meter := pgcall.WithMeter(ctx)
		err := run(mctx)
		ms := float64(meter.DB()) / float64(time.Millisecond)
		if problem.From(err).Code == problem.Timeout {
			s.Censored = true
			s.MS = max(s.MS, ms)
			if i == 0 {
				s.FirstMS = ms
			}
			return s, nil
		}
		if err != nil {
			return s, err
		}
		if i == 0 {
			s.FirstMS = ms
		} else {
			later = append(later, ms)
		}
	}
	s.MS = loadtest.Median(later)
	return s, nil
}

// fit splits each group into its fitted and held-out parts (every sample
// whose index hashes below HoldOut, deterministically from the seed),
// fits the work model and ranks the held-out part.
func (rep *Report) fit(o Options) {
	var names []string
	byGroup := map[string][]int{}
	for i, s := range rep.Samples {
		if _, ok := byGroup[s.Group]; !ok {
			names = append(names, s.Group)
		}
		byGroup[s.Group] = append(byGroup[s.Group], i)
	}
	for _, name := range names {
		g := Group{Name: name}
		var train []pricing.Observation
		for k, i := range byGroup[name] {
			s := &rep.Samples[i]
			s.HeldOut = held(o.Seed, k, o.HoldOut)
			if !s.HeldOut && !s.Censored {
				train = append(train, pricing.Observation{Features: s.Estimate.Features, Vertices: s.Estimate.Vertices, MS: s.MS})
			}
		}
		g.Fitted = len(train)
		g.Work, g.Err = pricing.Fit(train)
		if g.Err == nil {
			g.RhoEst, g.RhoSett, g.HeldOut = rep.rank(o, name, g.Work)
		}
		rep.Groups = append(rep.Groups, g)
	}
}

// held reports whether the k-th sample of a group is held out.
func held(seed uint64, k int, share float64) bool {
	h := (seed ^ uint64(k+1)) * 0x9e3779b97f4a7c15 //nolint:gosec // G115: k is a non-negative sample index; wrapping is the hash's intent
	h ^= h >> 29
	return float64(h%10000)/10000 < share
}

// rank is the held-out Spearman ρ of the fitted price and of the settled
// cost against the measured time, and how many samples it ranked.
func (rep *Report) rank(o Options, group string, m throttle.WorkModel) (est, sett float64, n int) {
	w := throttle.Weights{Base: 0, MaxCost: math.Inf(1)}
	if o.Weights != nil {
		w = o.Weights(group)
	}
	w.Work = m
	var price, settled, measured []float64
	for _, s := range rep.Samples {
		if s.Group != group || !s.HeldOut {
			continue
		}
		p := w.Read(s.Estimate.Features, s.Estimate.Vertices, o.MsPerToken)
		price = append(price, p)
		settled = append(settled, o.Charged(p, time.Duration(s.FirstMS*float64(time.Millisecond)), w.Base, w.MaxCost))
		measured = append(measured, s.MS)
	}
	return loadtest.Spearman(price, measured), loadtest.Spearman(settled, measured), len(measured)
}

// Work returns the fitted models by group name, leaving out groups that did
// not fit.
func (rep Report) Work() map[string]throttle.WorkModel {
	out := map[string]throttle.WorkModel{}
	for _, g := range rep.Groups {
		if g.Err == nil {
			out[g.Name] = g.Work
		}
	}
	return out
}
