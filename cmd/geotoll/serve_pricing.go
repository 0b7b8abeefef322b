package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pricing"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// Values of throttle.pricing.
const (
	PricingDensity = "density"
	PricingSize    = "size"
)

// pricingSetup is what runPricing needs: the layers whose relations it
// models, and where the estimator goes once it is built.
type pricingSetup struct {
	models *pricing.Models
	lazy   *pricing.Lazy
	tiles  []*tiles.Layer
	// changed says the tile catalog's storage changed: the relations a
	// layer reads at some zoom are no longer those the estimator tracks.
	changed chan struct{}
}

// storageChanged tells runPricing to track the relations the tile layers
// read now; it never blocks.
func (p *pricingSetup) storageChanged() {
	if p == nil {
		return
	}
	select {
	case p.changed <- struct{}{}:
	default: // one pending rebuild reads the newest storage anyway
	}
}

// openPricing makes the toll price requests by the work they read: the
// density models of every relation a layer reads, built and kept current
// in the background by runPricing. Until a model is built, its requests
// are priced by their size, and /readyz and the metrics say so.
func (m *Main) openPricing(gate *toll.Toll, cat *tiles.Catalog) (server.Check, error) {
	if m.Config.Throttle.Pricing == PricingSize {
		return func(context.Context) error {
			return &server.ReadyNote{Detail: "requests are priced by their size (throttle.pricing: size)"}
		}, nil
	}
	if m.ModelShelf == nil {
		m.ModelShelf = density.NewShelf()
	}
	m.pricing = &pricingSetup{
		models:  pricing.NewModels(m.Background, density.Options{Shelf: m.ModelShelf, Logger: m.Logger}),
		lazy:    &pricing.Lazy{},
		tiles:   cat.Layers(),
		changed: make(chan struct{}, 1),
	}
	gate.Estimator = m.pricing.lazy
	if err := server.WatchPricing(m.Registry, m.pricing.models.Status); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := m.Registry.Register(&modelFailures{status: m.pricing.models.Status}); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return func(context.Context) error { return pricingReady(m.pricing.models.Status()) }, nil
}

// pricingReady is the readiness of the models. It never fails the
// process: not-yet-built models leave it ready, but say that their requests
// are priced by size; stale ones (density.Status.Stale: refreshes failing,
// or none for a few intervals) leave it ready too, but say that their
// requests are priced by an old model. A model that cannot be rebuilt is a
// matter of the relation and the database, which every replica shares:
// failing readiness for it would take every replica out of load balancing
// at once, for requests that the old model still prices better than their
// size would. The alert GeotollPriceModelStale
// (geotoll_price_model_failed_builds, geotoll_price_model_stale) is what
// tells someone.
func pricingReady(all []density.Status) error {
	if len(all) == 0 {
		return &server.DegradedError{Detail: "the price models are not set up yet: requests are priced by their size"}
	}
	var building, stale []string
	for _, st := range all {
		switch {
		case st.Ready && !st.Inherited && st.Failures > 0:
			stale = append(stale, fmt.Sprintf("%s (model %s old; %d failed builds since: %s)",
				st.Relation, st.Age.Round(time.Second), st.Failures, st.LastError))
		case st.Ready && st.Stale: // Stale is never an inherited model
			stale = append(stale, fmt.Sprintf("%s (model %s old; no build has ended since)", st.Relation, st.Age.Round(time.Second)))
		case st.Ready && !st.Inherited:
		case st.LastError != "":
			building = append(building, fmt.Sprintf("%s (%d failed builds: %s)", st.Relation, st.Failures, st.LastError))
		case st.Inherited:
			building = append(building, st.Relation+" (priced by the model of the relation it replaced)")
		default:
			building = append(building, st.Relation)
		}
	}
	var says []string
	if len(building) > 0 {
		says = append(says, fmt.Sprintf("%d of %d price models not built yet (%s): their requests are priced by their size",
			len(building), len(all), strings.Join(building, ", ")))
	}
	if len(stale) > 0 {
		says = append(says, fmt.Sprintf("%d of %d price models not refreshed (%s): their requests are priced by the last model built",
			len(stale), len(all), strings.Join(stale, ", ")))
	}
	if len(says) > 0 {
		return &server.DegradedError{Detail: strings.Join(says, "; ")}
	}
	return &server.ReadyNote{Detail: fmt.Sprintf("%d price models", len(all))}
}

// modelFailuresDesc is geotoll_price_model_failed_builds and
// modelStaleDesc geotoll_price_model_stale, beside the price model
// metrics of server.WatchPricing: a model whose refreshes keep failing, or
// whose refresh never ends (one starved of build slots), stays in use,
// ready — they say so.
var (
	modelFailuresDesc = prometheus.NewDesc("geotoll_price_model_failed_builds", modelFailuresHelp, []string{"relation"}, nil)
	modelStaleDesc    = prometheus.NewDesc("geotoll_price_model_stale", modelStaleHelp, []string{"relation"}, nil)
)

const (
	modelFailuresHelp = "Builds of the relation's density model that failed since its last success (0 once one succeeds). " +
		"Above 0 with geotoll_price_model_ready 1, requests are priced by the last model built, which grows stale."
	modelStaleHelp = "1 while the relation's requests are priced by a model of its own that is not being refreshed: " +
		"a build failed since it, or none has ended for several refresh intervals; else 0."
)

// modelFailures exports every model's failed builds and staleness, read
// at scrape time.
type modelFailures struct {
	status func() []density.Status
}

func (c *modelFailures) Describe(ch chan<- *prometheus.Desc) {
	ch <- modelFailuresDesc
	ch <- modelStaleDesc
}

func (c *modelFailures) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.status() {
		ch <- prometheus.MustNewConstMetric(modelFailuresDesc, prometheus.GaugeValue, float64(st.Failures), st.Relation)
		stale := 0.0
		if st.Stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(modelStaleDesc, prometheus.GaugeValue, stale, st.Relation)
	}
}

// runPricing learns the relations' geometry kinds (retrying while the
// database does not answer), installs the estimator and keeps the models
// current until ctx ends; when the tile storage changes, it installs an
// estimator over the relations read now and drops the models of the rest.
func (m *Main) runPricing(ctx context.Context) {
	p := m.pricing
	if p == nil {
		return // priced by size
	}
	if !m.setEstimator(ctx) {
		return
	}
	var loops sync.WaitGroup
	defer loops.Wait()
	loops.Go(func() { p.models.Run(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			m.setEstimator(ctx)
		}
	}
}

// setEstimator builds and installs the estimator, retrying every 5 s while
// the database does not answer; false once ctx ends first.
func (m *Main) setEstimator(ctx context.Context) bool {
	p := m.pricing
	for {
		est, err := m.newEstimator(ctx)
		if err == nil {
			p.lazy.Set(est)
			p.models.Keep(est.Reads())
			return true
		}
		m.Logger.Warn("price models not set up yet: requests are priced by their size", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Second):
		}
	}
}

// newEstimator tracks every relation the layers read.
func (m *Main) newEstimator(ctx context.Context) (*pricing.Estimator, error) {
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pricing.ForLayers(kctx, m.Background, m.pricing.models, m.pricing.tiles, m.Config.Geofence.Layers)
}
