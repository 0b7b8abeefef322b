package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
)

// openMetrics creates the process's own Prometheus registry (never the
// global one) with the Go runtime, process and read-pool collectors, and
// geotoll's metrics on it.
func (m *Main) openMetrics() (*server.Metrics, error) {
	m.Registry = prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		server.NewPoolCollector("read", m.Pool.Stat),
	} {
		if err := m.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	metrics, err := server.NewMetrics(m.Registry)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return metrics, nil
}

// discoverTimeout bounds the start-up discovery query.
const discoverTimeout = 10 * time.Second

// openTiles builds the tile handler: the configured layers plus, when
// tiles.discover names schemas, the layers found there (a database that
// does not answer then fails start-up: the catalog cannot be known), the
// tile cache, and their metrics.
func (m *Main) openTiles(ctx context.Context, gate tiles.Gate, proxies *forwarded.Trusted, metrics *server.Metrics) (*tiles.Handler, error) {
	cfg := m.Config
	dctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	discovered, err := cfg.discoverLayers(dctx, m.Pool)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("tiles.discover: %w", err)
	}
	for _, l := range discovered {
		m.Logger.Info("discovered tile layer", "layer", l.Name, "schema", l.Schema, "table", l.Table,
			"geometry_column", l.GeometryColumn, "srid", l.SRID, "properties", len(l.Properties))
	}
	catalog, err := cfg.tileCatalog(discovered)
	if err != nil {
		return nil, err
	}
	cache, err := tiles.NewCache(tiles.CacheOptions{MaxBytes: cfg.Tiles.Cache.MaxBytes, TTL: cfg.Tiles.Cache.TTL})
	if err != nil {
		return nil, err
	}
	if err := server.WatchTileCache(m.Registry, cache); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.TileCache = cache
	store := tiles.NewStore(m.Pool)
	store.RetryAfter = cfg.Database.RetryAfter
	store.AcquireTimeout = cfg.Database.AcquireTimeout
	store.Observer = metrics
	store.Calls = metrics
	return &tiles.Handler{
		Catalog: catalog, Store: store, Gate: gate, Logger: m.Logger,
		Cache: cache, Describer: store, Proxies: proxies, Observer: metrics,
	}, nil
}
