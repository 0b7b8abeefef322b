package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
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
		server.NewPoolCollector("background", m.Background.Stat),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_build_info", Help: "1, labelled with the running build's version and Go version.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
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
	discovered, err := cfg.discoverLayers(dctx, m.Background)
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
	// The fence admin writes the fence table: its tile layers read their
	// storage only while it was built from the table as it is.
	for _, name := range fenceTileLayers(catalog) {
		catalog.Follow(name)
	}
	// The serving registry and the geometry kinds not configured: a
	// database that does not answer now leaves the layers reading their
	// tables (as KindMixed when the kind is unknown) until a refresh works.
	rctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	read := m.refreshStorage(rctx, catalog, nil)
	cancel()
	if !read {
		m.storageUnread = true
	}
	// Storage not known: no layer is said to lack it; the first refresh
	// that reads it says so.
	if m.overviewsUnchecked, m.heavyUnread = !read, catalog.Layers(); read {
		m.warnNoOverviews(catalog)
		m.heavyUnread = m.checkHeavy(ctx, m.heavyUnread)
	}
	if err := server.WatchTileStorage(m.Registry, catalog, time.Now); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.TileCatalog = catalog
	cache, err := tiles.NewCache(tiles.CacheOptions{MaxBytes: cfg.Tiles.Cache.MaxBytes, TTL: cfg.Tiles.Cache.TTL})
	if err != nil {
		return nil, err
	}
	if err := server.WatchTileCache(m.Registry, cache); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.TileCache = cache
	store := tiles.NewStore(m.Pool)
	store.PlanChanged = func(string) { m.pricing.storageChanged() } // price what the layer reads now
	store.RetryAfter = cfg.Database.RetryAfter
	store.AcquireTimeout = cfg.Database.AcquireTimeout
	store.Observer = metrics
	store.Calls = metrics
	return &tiles.Handler{
		Catalog: catalog, Store: store, Gate: gate, Logger: m.Logger,
		Cache: cache, Describer: store, Proxies: proxies, Observer: metrics, BasePath: cfg.BasePath,
		PublicURL: cfg.publicBase(),
	}, nil
}

// warnNoOverviews warns of each layer without the overviews its low zooms
// would read, once the layers' storage is known.
func (m *Main) warnNoOverviews(catalog *tiles.Catalog) {
	for _, l := range catalog.Layers() {
		if lo, hi, ok := l.OverviewZooms(l.Kind()); ok && !slices.ContainsFunc(l.StorageSummary(), func(s tiles.StorageSummary) bool {
			return s.Builder == tiles.BuilderOverview
		}) {
			m.Logger.Warn("tile layer has no overviews: its low zooms read the whole table; run `geotoll prepare`",
				"layer", l.Name, "overview_zooms", fmt.Sprintf("%d-%d", lo, hi))
		}
	}
}

// checkHeavy reads the largest rows of every line and polygon layer
// (tiles.Layer.CheckHeavy) and warns of the heavy ones: their tiles above
// the overview band read those rows whole until they read pieces (the
// warning says what would give them pieces, tiles.Heavy.Fix; a read that
// fails is warned of once, not tried again). It returns the layers it did
// not try, ctx having ended (a signal, or start-up's database that does
// not answer).
func (m *Main) checkHeavy(ctx context.Context, layers []*tiles.Layer) (untried []*tiles.Layer) {
	for i, l := range layers {
		hctx, cancel := context.WithTimeout(ctx, discoverTimeout)
		err := l.CheckHeavy(hctx, m.Background)
		cancel()
		if signalled(ctx) {
			return layers[i:]
		}
		if err != nil {
			m.Logger.Warn("tile layer: largest rows not read", "layer", l.Name, "err", err)
			continue
		}
		if h := l.Heavy(); h != nil {
			m.Logger.Warn("tile layer is heavy: its largest rows are read and clipped whole above the overview band",
				"layer", l.Name, "max_vertices", h.MaxVertices, "subdivide_max_vertices", h.Limit, "fix", h.Fix)
		}
	}
	return nil
}

// refreshStorage re-reads the serving registry and the unknown geometry
// kinds into catalog (see tiles.Catalog.Refresh), drops the cached tiles
// of layers whose storage changed, and logs what it found: each storage
// warning once, when it appears, and when it clears (m.tileWarnings). It
// reports whether it read the registry.
func (m *Main) refreshStorage(ctx context.Context, catalog *tiles.Catalog, cache *tiles.Cache) (read bool) {
	res, err := catalog.Refresh(ctx, m.Background)
	if signalled(ctx) {
		return false // what failed, failed for the signal
	}
	if err != nil {
		m.Logger.Warn("serving registry not read; tiles read what they read before (at start-up, the layers' tables) until it is", "err", err)
	}
	warnings := make([]string, len(res.Warnings))
	for i, w := range res.Warnings {
		warnings[i] = w.Error()
	}
	// A layer that kept its plan was not checked: nothing clears then.
	m.tileWarnings.report(ctx, m.Logger, "tile layer storage", warnings, err == nil && len(res.Kept) == 0)
	if len(res.Changed) > 0 {
		m.pricing.storageChanged()
	}
	for _, name := range res.Behind {
		m.Logger.Debug("tile layer storage is behind its table: its tiles read the table until geotoll prepare builds it again", "layer", name)
	}
	for _, name := range res.Changed {
		dropped := cache.InvalidateLayer(name)
		l := catalog.Layer(name)
		m.Logger.Info("tile layer storage changed", "layer", name, "kind", l.Kind(), "storage", len(l.Storage()), "cached_tiles_dropped", dropped)
	}
	return err == nil
}

// storageRetry is how soon refreshTiles reads the storage again after a
// read failed, doubling with each failure up to storageRetryMax (or
// tiles.storage_refresh, when less).
const (
	storageRetry    = time.Second
	storageRetryMax = 5 * time.Second
)

// refreshTiles calls refreshStorage and refreshContainment every
// tiles.storage_refresh until ctx ends — sooner after a read failed (at
// start-up too): storageRetry, doubling up to storageRetryMax. A server
// started while the database was down serves the layers' storage
// (overviews, pieces; a geofence layer's contains and check, which answer
// 503 until it is read) within seconds of the database answering, however
// long it was down, not a whole interval later — and then says what
// start-up could not: which layers lack overviews, which are heavy.
func (m *Main) refreshTiles(ctx context.Context) {
	every := m.Config.Tiles.StorageRefresh
	retry := min(storageRetry, every)
	wait := every
	if m.storageUnread {
		wait = retry
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, discoverTimeout)
			tiles := m.refreshStorage(rctx, m.TileCatalog, m.TileCache)
			fences := m.refreshContainment(rctx)
			cancel()
			if tiles { // what start-up could not say
				if m.overviewsUnchecked {
					m.warnNoOverviews(m.TileCatalog)
					m.overviewsUnchecked = false
				}
				m.heavyUnread = m.checkHeavy(ctx, m.heavyUnread)
			}
			if tiles && fences {
				wait, retry = every, min(storageRetry, every)
			} else {
				wait, retry = retry, min(2*retry, storageRetryMax, every)
			}
			t.Reset(wait)
		}
	}
}

// fenceTable is the table the fence admin writes.
var fenceTable = pgx.Identifier{"geotoll", "geofences"}

// fenceTileLayers names the tile layers drawn from the fence table.
func fenceTileLayers(catalog *tiles.Catalog) []string {
	var out []string
	for _, l := range catalog.Layers() {
		if slices.Equal(l.TableIdent(), fenceTable) {
			out = append(out, l.Name)
		}
	}
	return out
}

// fencesWritten runs after every fence write the fence admin made: the
// tile layers drawn from the fence table read the table from now on (not
// the storage `geotoll prepare` built before the write; see
// tiles.Catalog.Written), and their cached tiles are dropped; so do the
// contains and check of geofence layers on it (geofence.Catalog.Written).
// The price models of the fence table are rebuilt soon, not at their next
// interval (pricing.Models.Nudge).
func (m *Main) fencesWritten() {
	if m.fenceLayers != nil {
		m.fenceLayers.Written(fenceTable.Sanitize())
	}
	if m.pricing != nil {
		m.pricing.models.Nudge(fenceTable)
	}
	if m.TileCatalog == nil {
		return
	}
	changed := false
	for _, name := range fenceTileLayers(m.TileCatalog) {
		if m.TileCatalog.Written(name) {
			changed = true
		}
		m.TileCache.InvalidateLayer(name)
	}
	if changed {
		m.pricing.storageChanged() // price what the tiles read now
	}
}

// signalled reports whether ctx ended by a cancel (a signal at start-up,
// the server's end for its background loops), not by a deadline: what
// failed then failed for it, and is no news of the database.
func signalled(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }
