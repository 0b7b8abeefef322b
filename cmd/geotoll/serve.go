package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
	"github.com/geotoll/geotoll/web"
)

// Main is a running geotoll server: Open wires it, Serve runs it until ctx
// ends, Close releases it. End-to-end tests use it as the binary does.
type Main struct {
	Config Config
	Logger *slog.Logger

	// Pool serves requests' statements; Background the server's own work
	// (DatabaseConfig.BackgroundConns).
	Pool       *pgxpool.Pool
	Background *pgxpool.Pool
	Redis      redis.UniversalClient // nil in single-instance mode
	Handler    http.Handler
	Server     *http.Server

	// FenceWriter is the fence admin's write pool (nil when not configured).
	FenceWriter *pgxpool.Pool
	// Registry holds this process's metrics (served at /metrics).
	Registry *prometheus.Registry
	// TileCache is the tile handler's cache.
	TileCache *tiles.Cache
	// TileCatalog is the tile layers, their plans refreshed from the
	// serving registry while Serve runs.
	TileCatalog *tiles.Catalog
	// Tracing, when set, traces requests, Redis calls and statements;
	// Open sets it when the configuration turns tracing on.
	Tracing trace.TracerProvider
	// ModelShelf keeps the price models built in this process (see
	// density.Shelf): a refresh of an unchanged relation takes its model
	// from it. Open makes one when nil; servers started side by side in
	// one process may share one.
	ModelShelf *density.Shelf

	stopTracing func(context.Context) error
	// OpsServer serves the operators' listener (metrics_listen); nil
	// without one.
	OpsServer *http.Server

	options     server.Options
	opsListener net.Listener
	keys        *apikeys.Ring
	gate        *toll.Toll
	budgets     *throttle.RedisStore // nil in single-instance mode
	pricing     *pricingSetup
	fenceLayers *geofence.Catalog  // contains and check re-read its storage with the tiles
	failover    *throttle.Failover // nil in single-instance mode
	ready       *server.Readiness
	dbCheck     *server.ConnCheck
	listener    net.Listener
	// running counts the API's handlers at work: a shutdown whose grace
	// expired waits for the ones it cut off, which settle their requests
	// as they return, before it sends the settlements to Redis.
	running atomic.Int64

	// tileWarnings and fenceWarnings are the storage warnings standing
	// since a refresh logged them (see warningLog).
	tileWarnings, fenceWarnings warningLog
	// storageUnread: a read of the serving registry or of the geofence
	// layers' storage failed at start-up; refreshTiles retries it soon.
	storageUnread bool
	// overviewsUnchecked: start-up did not read the storage, so did not
	// say which layers lack overviews; heavyUnread: the layers whose
	// largest rows start-up did not try to read (the storage unread, or
	// the database not answering: a layer's plan, which decides whether
	// it is read, follows its storage). refreshTiles does both once it
	// reads the storage.
	overviewsUnchecked bool
	heavyUnread        []*tiles.Layer
}

// Open connects to PostgreSQL and Redis (lazily: a database that is down at
// start-up makes /readyz fail, not the process), builds the handler and
// binds the listen address.
func (m *Main) Open(ctx context.Context) error {
	cfg := m.Config
	if cfg.Database.URL == "" {
		return errors.New("no database: set database.url (GEOTOLL_DATABASE_URL or DATABASE_URL)")
	}
	if err := cfg.validatePoolSize(); err != nil {
		return err
	}
	if _, _, err := cfg.catalog(); err != nil {
		return err
	}
	if err := cfg.validateTiles(); err != nil { // e.g. CORS "*" with credentials
		return err
	}
	if err := errors.Join(cfg.validateDeadlines()...); err != nil { // deadlines that do not nest
		return err
	}
	gate, err := cfg.toll()
	if err != nil {
		return err
	}
	m.gate = gate
	gate.Logger = m.Logger
	if err := m.openTracing(ctx); err != nil {
		return err
	}
	if m.Tracing != nil {
		gate.Tracer = m.Tracing.Tracer("github.com/geotoll/geotoll/toll")
	}

	if err := m.openPool(ctx); err != nil {
		m.Close() // the tracer, and a pool opened before the one that failed
		return err
	}
	sctx, endStartup, err := m.startupContext(ctx)
	defer endStartup()
	if err != nil {
		m.Close()
		return err
	}
	checks := m.openKeys(sctx)
	gate.Keys = m.keys

	local := throttle.NewMemoryStore(throttle.MemoryOptions{})
	if !cfg.Redis.enabled() {
		m.Logger.Warn("no Redis configured: budgets live in this process (single-instance mode)")
		gate.Store = local
	} else if checks["redis"], err = m.openRedis(gate, local); err != nil {
		m.Close()
		return err
	}
	if gate.Global != nil {
		gate.Global.Store = gate.Store
	}
	if err := gate.Validate(); err != nil {
		m.Close()
		return fmt.Errorf("throttle: %w", err)
	}
	if err := m.openHandler(sctx, gate, checks); err != nil {
		m.Close()
		return err
	}
	m.ready.Check(ctx) // the first /readyz answers from real results
	m.Server = m.httpServer(m.counted(m.Handler))
	if m.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		m.Close()
		return err
	}
	if err := m.openOps(); err != nil {
		m.Close()
		return err
	}
	return nil
}

// httpServer is an http.Server of h with the configured bounds.
func (m *Main) httpServer(h http.Handler) *http.Server {
	c := m.Config.HTTP
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(m.Logger.Handler(), slog.LevelWarn),
	}
}

// openHandler builds the metrics, the tile and geofence handlers and the
// readiness of checks, and composes them into m.Handler.
func (m *Main) openHandler(ctx context.Context, gate *toll.Toll, checks map[string]server.Check) error {
	metrics, err := m.openMetrics()
	if err != nil {
		return err
	}
	gate.Observer = metrics
	watch := []error{server.WatchKeys(m.Registry, m.keys)}
	if m.failover != nil {
		watch = append(watch, server.WatchLimiter(m.Registry, m.failover), server.WatchRedis(m.Registry, m.budgets.Stats))
	}
	if err := errors.Join(watch...); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	tileHandler, err := m.openTiles(ctx, gate, gate.Proxies, metrics)
	if err != nil {
		return err
	}
	if checks["pricing"], err = m.openPricing(gate, tileHandler.Catalog); err != nil {
		return err
	}
	fences, err := m.openGeofence(ctx, gate, metrics)
	if err != nil {
		return err
	}
	if checks["layers"], err = m.checkLayers(ctx, tileHandler.Catalog, fences.Catalog()); err != nil {
		return err
	}
	if m.FenceWriter != nil {
		if err := m.Registry.Register(server.NewPoolCollector("fence-writer", m.FenceWriter.Stat)); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	m.ready = server.NewReadiness(checks, m.Config.HTTP.ReadyInterval, m.Config.HTTP.ReadyTimeout)
	m.options = server.Options{
		Logger:      m.Logger,
		Tiles:       tileHandler,
		Metrics:     metrics,
		CORS:        m.Config.HTTP.CORS.cors(),
		Geofence:    fences,
		Budget:      http.HandlerFunc(gate.ServeBudget),
		Web:         web.HandlerAt(m.Config.BasePath),
		OpenAPI:     server.OpenAPI(m.Config.BasePath),
		Ready:       m.ready,
		BasePath:    m.Config.BasePath,
		OpsListener: m.Config.MetricsListen != "",
	}
	m.Handler = m.traced(withRequestDeadline(server.New(m.options), m.Config.HTTP.RequestTimeout), gate.Proxies)
	return nil
}

// startupContext is ctx for start-up's reads of the database (the API
// keys, the layers' storage and largest rows, the geofence layers'
// storage, the layers' check). When the database does not answer a ping
// — one connection, bounded by database.connect_timeout as every
// connection is (for each address tried), and a second more — it is
// cancelled: each read then gives up at once, warning of nothing, where
// each waited out its own bound (about 22 s in all before the server
// listened, its /healthz unanswered), and one warning says what serving
// without the database means. What they would have read is read once the database answers:
// the keys by the key ring, the storage and the largest rows by
// refreshTiles, the layers' check by /readyz (a layer that does not match
// the database is then reported there, degraded, instead of refusing the
// start). A configuration that discovers its tile layers (tiles.discover)
// cannot start without them: it fails here.
func (m *Main) startupContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(ctx)
	wait := m.Background.Config().ConnConfig.ConnectTimeout + time.Second
	pctx, stop := context.WithTimeout(ctx, wait)
	err := m.Background.Ping(pctx)
	stop()
	if err == nil || signalled(ctx) {
		return sctx, cancel, nil
	}
	err = fmt.Errorf("the database did not answer within %s at start-up: %w", wait, err)
	cancel()
	if len(m.Config.Tiles.Discover.Schemas) > 0 {
		return sctx, cancel, fmt.Errorf("tiles.discover: %w", err)
	}
	m.Logger.Warn("serving without the database until it answers: keyed callers get 503, layers read their tables, "+
		"contains and check answer 503, layers are checked by /readyz", "err", err)
	return sctx, cancel, nil
}

// openPool opens the read pools: the requests' and the background's. The
// requests' pool opens all its connections at once, in the background,
// and keeps them (unless the URL sets pool_min_conns): the first burst
// after start-up, or after a quiet half hour, must not pay for opening
// connections and loading PostGIS into them (warmPostGIS) while others
// wait. The background's opens them as its work needs them. A database
// that is down at start-up makes /readyz fail, not the process.
func (m *Main) openPool(ctx context.Context) error {
	db := m.Config.Database
	open := func(size int32, warm bool, app string) (*pgxpool.Pool, error) {
		pcfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			return nil, fmt.Errorf("database url: %w", err)
		}
		pcfg.MaxConns = size
		if warm && !strings.Contains(db.URL, "pool_min_conns") {
			pcfg.MinConns = size
		}
		if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
			// An application_name in the URL is kept: servers sharing a
			// database are told apart in pg_stat_activity by it. Else the
			// requests' sessions are geotoll, the server's own work's
			// geotoll-background.
			pcfg.ConnConfig.RuntimeParams["application_name"] = app
		}
		if !warm {
			backgroundSessions(pcfg)
		}
		db.tunePool(pcfg)
		tracePool(m.Tracing, pcfg)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		return pool, nil
	}
	var err error
	if m.Pool, err = open(db.MaxConns, true, "geotoll"); err != nil {
		return err
	}
	if m.Background, err = open(db.BackgroundConns, false, "geotoll-background"); err != nil {
		m.Pool.Close()
		m.Pool = nil
		return err
	}
	return nil
}

// BackgroundStatementTimeout bounds each statement of the server's own
// work that sets no tighter bound of its own (the registry, the tables'
// change detectors, the layers' largest rows): the read role's session
// default, which a database URL of another role would not bring.
const BackgroundStatementTimeout = "5s"

// backgroundSessions makes the background pool's sessions read only, each
// statement under BackgroundStatementTimeout, whatever role the URL
// names, unless its options set either: its requests' reads run in READ
// ONLY transactions under SET LOCAL statement_timeout (pgcall), but the
// server's own work runs plain statements too.
func backgroundSessions(pcfg *pgxpool.Config) {
	params := pcfg.ConnConfig.RuntimeParams
	for name, value := range map[string]string{"default_transaction_read_only": "on", "statement_timeout": BackgroundStatementTimeout} {
		if _, set := params[name]; !set && !strings.Contains(params["options"], name) {
			params[name] = value
		}
	}
}

// openKeys makes the API key ring and loads it now (a database that is
// down only delays keyed callers, who get 503 until the first load); Serve
// reloads it whenever the database announces a change, and every
// key_refresh. It returns the readiness checks of PostgreSQL — pinged on a
// connection of its own, since a busy pool is not a dead database — and of
// the keys.
func (m *Main) openKeys(ctx context.Context) map[string]server.Check {
	t := m.Config.Throttle
	keyStore := apikeys.NewStore(m.Background)
	m.keys = apikeys.NewRing(keyStore.Active, t.KeyRefresh, m.Logger)
	m.keys.MaxAge, m.keys.Connect = t.KeyMaxAge, keyStore.Connect
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.keys.Refresh(kctx); err != nil && !signalled(ctx) {
		m.Logger.Warn("API keys not loaded yet; keyed callers get 503 until the database answers", "err", err)
	}
	m.dbCheck = &server.ConnCheck{Connect: keyStore.Connect}
	return map[string]server.Check{"postgres": m.dbCheck.Check, "api_keys": server.KeysCheck(m.keys)}
}

// openGeofence builds the geofence handler: reads through the read pool,
// fence writes through their own pool (the geotoll_fence_writer role) when
// one is configured.
func (m *Main) openGeofence(ctx context.Context, gate *toll.Toll, metrics *server.Metrics) (*geofence.Handler, error) {
	gc := m.Config.Geofence
	store := func(pool *pgxpool.Pool) *geofence.Store {
		s := geofence.NewStore(pool)
		s.Timeout = gc.StatementTimeout
		s.WriteTimeout = gc.FenceWriteTimeout
		s.RetryAfter = m.Config.Database.RetryAfter
		s.AcquireTimeout = m.Config.Database.AcquireTimeout
		s.Calls = metrics
		return s
	}
	reader := store(m.Pool)
	o := geofence.Options{
		Layers: gc.Layers, Limits: gc.Limits, AdminKeys: gc.AdminKeys,
		// Fence admins: the configured admin keys, and database API keys
		// created with `geotoll keys create -admin`.
		Admin: gate,
		// A fence write makes the tiles of layers drawn from the fence
		// table stale, cached or built by prepare.
		OnWrite: m.fencesWritten,
		Reader:  reader, Gate: gate, Logger: m.Logger, BasePath: m.Config.BasePath,
	}
	if gc.WriterDatabaseURL != "" {
		wcfg, err := pgxpool.ParseConfig(gc.WriterDatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("geofence writer database url: %w", err)
		}
		wcfg.MaxConns = 4 // admin traffic: a few writes at a time
		wcfg.ConnConfig.RuntimeParams["application_name"] = "geotoll-fence-admin"
		m.Config.Database.tunePool(wcfg)
		tracePool(m.Tracing, wcfg)
		if m.FenceWriter, err = pgxpool.NewWithConfig(ctx, wcfg); err != nil {
			return nil, fmt.Errorf("geofence writer database: %w", err)
		}
		o.Writer = store(m.FenceWriter)
		m.Logger.Info("fence writes enabled: admin keys (keys create -admin) may write fences", "role", wcfg.ConnConfig.User)
	} else {
		m.Logger.Info("no geofence writer database: fence writes answer 404")
	}
	h, err := geofence.NewHandler(o)
	if err != nil {
		return nil, err
	}
	m.fenceLayers = h.Catalog()
	rctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	if !m.refreshContainment(rctx) {
		m.storageUnread = true
	}
	cancel()
	return h, nil
}

// drain begins the shutdown: /readyz answers 503 from now on, and the
// server goes on serving for http.shutdown_delay, so that a load balancer
// sees it unready before its listener closes — unless a listener failed,
// when there is nothing to drain through.
func (m *Main) drain(listenerFailed bool) {
	if m.ready != nil {
		m.ready.Stopping()
	}
	d := m.Config.HTTP.ShutdownDelay
	if d <= 0 || listenerFailed {
		return
	}
	// A second stop signal (SIGINT, SIGTERM, SIGHUP) ends the delay: the
	// first one's context has ended, and an operator pressing Ctrl-C again
	// means now. main keeps the signals after the first from the start
	// (one sent a moment after the first is not lost).
	again := laterSignals
	if again == nil {
		own := make(chan os.Signal, 1)
		signal.Notify(own, stopSignals()...)
		defer signal.Stop(own)
		again = own
	}
	m.Logger.Info("unready: serving on before shutting down", "delay", d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case sig := <-again:
		m.Logger.Info("a second signal: shutting down now", "signal", sig.String())
	}
}

// Addr is the bound listen address (useful with port 0).
func (m *Main) Addr() string { return m.listener.Addr().String() }

// Serve serves until ctx ends, then shuts down gracefully: in-flight
// requests get up to ShutdownGrace to finish, new connections are refused.
func (m *Main) Serve(ctx context.Context) error {
	defer m.Close()
	errc := make(chan error, 2)
	go func() { errc <- m.Server.Serve(m.listener) }()
	servers := 1
	if m.OpsServer != nil {
		servers++
		go func() { errc <- m.OpsServer.Serve(m.opsListener) }()
		m.Logger.Info("serving metrics and readiness", "addr", m.opsListener.Addr().String())
	}
	// The key ring, the readiness checker and the tile storage refresh
	// hold connections of their own: they end before Close.
	// They go on while the server does — through http.shutdown_delay —
	// and end as Serve returns.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	loops.Go(func() { m.keys.Run(bg) })
	loops.Go(func() { m.ready.Run(bg) })
	loops.Go(func() { m.refreshTiles(bg) })
	loops.Go(func() { m.runPricing(bg) })
	defer loops.Wait()
	defer stopBG()
	m.Logger.Info("serving", "addr", m.Addr(), "version", version)
	// A listener that fails ends the server as the context's end does: the
	// other listener closed, the budgets flushed.
	var failed error
	select {
	case failed = <-errc:
		servers--
		m.Logger.Error("a listener failed: shutting down", "err", failed)
	case <-ctx.Done():
	}
	m.drain(failed != nil)
	m.Logger.Info("shutting down", "grace", m.Config.HTTP.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.Config.HTTP.ShutdownGrace)
	defer cancel()
	if err := m.Server.Shutdown(sctx); err != nil {
		m.Logger.Warn("shutdown grace expired; closing", "err", err)
		_ = m.Server.Close()
		// Close does not wait for the handlers it cut off. Each returns
		// once its statements have stopped (within database.cancel_wait
		// of their cancel) and settles its request — its charge, its
		// in-flight slot — as it does: those settlements must be queued
		// before the flush, or a slot stays taken until its TTL.
		m.awaitHandlers(m.Config.Database.CancelWait + time.Second)
	}
	if m.OpsServer != nil {
		_ = m.OpsServer.Shutdown(sctx)
	}
	// The settlements get a time of their own: a grace that ran out must
	// not leave them unsent.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), flushWait)
	defer fcancel()
	m.flushBudgets(fctx)
	var errs []error
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		errs = append(errs, failed)
	}
	for range servers {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flushWait bounds the sending of the budgets' last settlements at
// shutdown, after the requests' grace.
const flushWait = 5 * time.Second

// counted is h counting its handlers at work in m.running.
func (m *Main) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.running.Add(1)
		defer m.running.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// awaitHandlers waits until no handler runs, or for at most d.
func (m *Main) awaitHandlers(d time.Duration) {
	deadline := time.Now().Add(d)
	for m.running.Load() > 0 {
		if time.Now().After(deadline) {
			m.Logger.Warn("handlers still running at shutdown: their settlements are not sent", "handlers", m.running.Load())
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flushBudgets returns this replica's global lease and sends the
// settlements and releases still on their way to Redis, within ctx.
func (m *Main) flushBudgets(ctx context.Context) {
	if m.gate != nil && m.gate.Global != nil {
		m.gate.Global.Close()
	}
	if m.budgets != nil {
		if err := m.budgets.Flush(ctx); err != nil {
			m.Logger.Warn("budget settlements not sent before shutdown", "err", err)
		}
	}
}

// Close releases the connections. It is safe to call more than once.
func (m *Main) Close() {
	if m.dbCheck != nil {
		m.dbCheck.Close(context.Background())
	}
	if m.Pool != nil {
		m.Pool.Close()
	}
	if m.Background != nil {
		m.Background.Close()
	}
	if m.FenceWriter != nil {
		m.FenceWriter.Close()
		m.FenceWriter = nil
	}
	if m.Redis != nil {
		_ = m.Redis.Close()
		m.Redis = nil
	}
	if m.listener != nil {
		_ = m.listener.Close()
	}
	if m.opsListener != nil {
		_ = m.opsListener.Close()
	}
	m.closeTracing()
}
