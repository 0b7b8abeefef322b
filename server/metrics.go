package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// Metrics are geotoll's Prometheus collectors, registered on a registry
// the caller owns (never the global default one). It is the Observer of
// Toll (prices, tokens, refusals) and of the tiles handler and store
// (cache results, query times), and its middleware counts every HTTP
// request by route template and status.
//
// Label values come from the route table, the configured tiers, the layer
// catalog, fixed outcome and cache-result names, the statuses the handlers
// write and a fixed set of method names (anything else is "other") — never
// from raw request text — so their number is bounded.
type Metrics struct {
	gatherer  prometheus.Gatherer
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	priced    *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	settled   *prometheus.CounterVec
	throttled *prometheus.CounterVec
	query     *prometheus.HistogramVec
	cache     *prometheus.CounterVec
	dbCalls   *prometheus.CounterVec
	outliving prometheus.Gauge
}

// NewMetrics creates the collectors and registers them on reg.
// durationBuckets are the latency histograms' buckets: 0.5 ms to 65.5 s,
// doubling, so that a request answered at its deadline (request_timeout,
// 20 s; one whose statement ignores its cancel writes within
// write_timeout, 30 s) falls in a bucket of its own, not in +Inf, where a
// p99 could not be told from 16 s.
var durationBuckets = prometheus.ExponentialBuckets(0.0005, 2, 18)

func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	m := &Metrics{
		gatherer: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_http_requests_total",
			Help: "HTTP requests by route (its path below the base path, as in /openapi.json), method and status (\"aborted\": cut short by a panic after its head was sent; 499: its client hung up before the answer's head was written, or the shutdown grace ran out first and closed its connection).",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "geotoll_http_request_duration_seconds",
			Help:    "HTTP request duration by route template.",
			Buckets: durationBuckets,
		}, []string{"route"}),
		priced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_priced_requests_total",
			Help: "Priced requests by tier, route (as in geotoll_http_requests_total; the fence admin's refused callers, whatever its path, under /geofence/fences) and outcome (admitted, refused, shadow-refused, unauthorized, keys-unread, dry-run, too-expensive, limiter-failure, global-refused).",
		}, []string{"tier", "route", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_tokens_charged_total",
			Help: "Tokens spent from budgets by tier, route (as in geotoll_http_requests_total), layer and tile zoom (zoom is empty for geofence routes). A composite tile's price is split evenly over its layers.",
		}, []string{"tier", "route", "layer", "zoom"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_tokens_settled_total",
			Help: "Tokens admitted requests really cost once they ran (their database time), by tier, route, layer and tile zoom; beside geotoll_tokens_charged_total, what the estimates charged at the door.",
		}, []string{"tier", "route", "layer", "zoom"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_throttled_total",
			Help: "Requests refused with 429 because the budget could not pay, by tier and route.",
		}, []string{"tier", "route"}),
		query: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "geotoll_tile_query_duration_seconds",
			Help:    "Time of one layer's query within a tile render, by layer and zoom.",
			Buckets: durationBuckets,
		}, []string{"layer", "zoom"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_tile_cache_requests_total",
			Help: "Tile requests by cache result: hit, miss (rendered for it), shared (waited for another request's render) or empty (a composite between its layers' zooms: nothing to read).",
		}, []string{"result"}),
		dbCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geotoll_db_calls_total",
			Help: "Database calls (one transaction each) by outcome: ok, statement-timeout (cut by its timeout or not stopping when cancelled), cancelled (the client went away), busy (no connection free within the acquire timeout: the pool, the anonymous callers' share of it, or the key's own share, database.key_max_conns, in use), unavailable (no connection or no answer), error.",
		}, []string{"outcome"}),
		outliving: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "geotoll_db_statements_outliving_answer",
			Help: "Statements still running after their request was answered (cancelled, not yet stopped); their connections and in-flight slots are held until they stop.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.priced, m.tokens, m.settled, m.throttled, m.query, m.cache, m.dbCalls, m.outliving} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

// Priced implements Observer: it counts the outcome, the tokens an admitted
// request spent, and 429s.
func (m *Metrics) Priced(tier string, p toll.Price, o toll.Outcome) {
	route := pricedRoute(p.Route)
	m.priced.WithLabelValues(tier, route, string(o)).Inc()
	switch o {
	case toll.Admitted:
		m.spread(m.tokens, tier, p, p.Cost)
	case toll.Refused:
		m.throttled.WithLabelValues(tier, route).Inc()
	}
}

// Settled implements toll.Observer: the tokens an admitted request really
// cost.
func (m *Metrics) Settled(tier string, p toll.Price, cost float64) {
	m.spread(m.settled, tier, p, cost)
}

// spread adds tokens to c, split evenly over a composite's layers.
func (m *Metrics) spread(c *prometheus.CounterVec, tier string, p toll.Price, tokens float64) {
	zoom := ""
	if p.Zoom >= 0 {
		zoom = strconv.Itoa(p.Zoom)
	}
	layers := strings.Split(p.Layer, ",")
	share := tokens / float64(len(layers))
	for _, l := range layers {
		c.WithLabelValues(tier, pricedRoute(p.Route), l, zoom).Add(share)
	}
}

// TileCache implements tiles.Observer.
func (m *Metrics) TileCache(result string) { m.cache.WithLabelValues(result).Inc() }

// TileQuery implements tiles.Observer.
func (m *Metrics) TileQuery(layer string, z maptile.Zoom, d time.Duration) {
	m.query.WithLabelValues(layer, strconv.Itoa(int(z))).Observe(d.Seconds())
}

// Call implements pgcall.Observer.
func (m *Metrics) Call(outcome string) { m.dbCalls.WithLabelValues(outcome).Inc() }

// Outliving implements pgcall.Observer.
func (m *Metrics) Outliving(delta int) { m.outliving.Add(float64(delta)) }

// WatchTileCache exports the size of a tile cache.
func WatchTileCache(reg prometheus.Registerer, c *tiles.Cache) error {
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_tile_cache_bytes", Help: "Bytes of tiles held by the tile cache.",
		}, func() float64 { return float64(c.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_tile_cache_entries", Help: "Tiles held by the tile cache.",
		}, func() float64 { return float64(c.Len()) }),
	} {
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// routeKey carries a *string the router fills with the matched route's
// template, for the outer metrics middleware to read.
type routeKey struct{}

// wrap counts and times every request, including those no route matched
// (route "unmatched") and CORS preflights answered before routing.
func (m *Metrics) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		route := "unmatched"
		rec := &recorder{ResponseWriter: w, ctx: r.Context()}
		// A handler cut short by a panic after its head was sent (the
		// access log re-panics with http.ErrAbortHandler) is counted with
		// status "aborted", and the panic goes on.
		status := "aborted"
		defer func() {
			m.requests.WithLabelValues(route, methodLabel(r.Method), status).Inc()
			m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), routeKey{}, &route)))
		code := answered(rec, r)
		if code == http.StatusNoContent && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			route = "preflight"
		}
		status = strconv.Itoa(code)
	})
}

// ClientClosed is the status recorded (metrics, access log) for a request
// whose connection closed before its answer's head was written — nginx's
// 499: the client hung up (a map panned away), or the shutdown grace ran
// out. What the handler wrote then (a 503 "request cancelled") reached
// nobody, and is no fault of the server's: counted as a 5xx, a map's
// cancelled tiles fired the error-rate alert. An answer written before
// its client left keeps its status, even while its handler goes on (a
// 503 that waits for its statement to stop: pgcall.Respond).
const ClientClosed = 499

// answered is the status of a finished request as recorded: the one its
// handler wrote (200 when none), or ClientClosed when its client went away
// before the head was written.
func answered(rec *recorder, r *http.Request) int {
	switch {
	case rec.gone, rec.status == 0 && errors.Is(r.Context().Err(), context.Canceled):
		return ClientClosed
	case rec.status == 0:
		return http.StatusOK
	}
	return rec.status
}

// methodLabel is the method label of a request: one of the standard
// methods, else "other". The method is request text (any token up to the
// header limit), so it is never a label value as sent.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// nameRoute is router middleware: it records the matched route's name
// (its path below the base path) for the metrics, and names the request's
// span, if it is traced, after it.
func nameRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := routeName(r)
		if p, ok := r.Context().Value(routeKey{}).(*string); ok && name != "" {
			*p = name
		}
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() && name != "" {
			span.SetName(r.Method + " " + name)
			span.SetAttributes(attribute.String("http.route", name))
		}
		next.ServeHTTP(w, r)
	})
}

// pricedRoute is the route of a priced request's kind (Price.Route), so
// that every metric's route label names the same routes.
func pricedRoute(kind string) string {
	switch kind {
	case "tile":
		return PathTile
	case "within":
		return PathWithin
	case "bbox":
		return PathBBox
	case "contains":
		return PathContains
	case "check":
		return PathCheck
	case "budget":
		return PathBudget
	case "admin":
		return PathFences
	}
	return kind
}

// poolCollector exports pgxpool statistics, read at scrape time.
type poolCollector struct {
	stat  func() *pgxpool.Stat
	descs map[string]*prometheus.Desc
}

// NewPoolCollector exports the statistics of a pgx pool, labelled
// pool=name; stat is usually (*pgxpool.Pool).Stat.
func NewPoolCollector(name string, stat func() *pgxpool.Stat) prometheus.Collector {
	labels := prometheus.Labels{"pool": name}
	d := func(metric, help string) *prometheus.Desc {
		return prometheus.NewDesc("geotoll_db_pool_"+metric, help, nil, labels)
	}
	return &poolCollector{stat: stat, descs: map[string]*prometheus.Desc{
		"acquired":       d("acquired_conns", "Connections currently checked out."),
		"idle":           d("idle_conns", "Idle connections."),
		"total":          d("total_conns", "Open connections (acquired, idle and being opened)."),
		"constructing":   d("constructing_conns", "Connections being opened."),
		"max":            d("max_conns", "Pool size limit."),
		"acquires":       d("acquires_total", "Successful acquires."),
		"acquireSeconds": d("acquire_duration_seconds_total", "Total time spent in successful acquires."),
		"empty":          d("empty_acquires_total", "Acquires that had to wait for a connection."),
		"canceled":       d("canceled_acquires_total", "Acquires cancelled by their context."),
		"new":            d("new_conns_total", "Connections opened."),
		"lifetime":       d("max_lifetime_destroys_total", "Connections closed for reaching their maximum lifetime."),
		"idleDestroys":   d("max_idle_destroys_total", "Connections closed for idling too long."),
	}}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stat()
	send := func(k string, t prometheus.ValueType, v float64) {
		if m, err := prometheus.NewConstMetric(c.descs[k], t, v); err == nil { // no variable labels: cannot fail
			ch <- m
		}
	}
	gauge := func(k string, v float64) { send(k, prometheus.GaugeValue, v) }
	counter := func(k string, v float64) { send(k, prometheus.CounterValue, v) }
	gauge("acquired", float64(s.AcquiredConns()))
	gauge("idle", float64(s.IdleConns()))
	gauge("total", float64(s.TotalConns()))
	gauge("constructing", float64(s.ConstructingConns()))
	gauge("max", float64(s.MaxConns()))
	counter("acquires", float64(s.AcquireCount()))
	counter("acquireSeconds", s.AcquireDuration().Seconds())
	counter("empty", float64(s.EmptyAcquireCount()))
	counter("canceled", float64(s.CanceledAcquireCount()))
	counter("new", float64(s.NewConnsCount()))
	counter("lifetime", float64(s.MaxLifetimeDestroyCount()))
	counter("idleDestroys", float64(s.MaxIdleDestroyCount()))
}

// compile-time check: the metrics count database calls.
var _ pgcall.Observer = (*Metrics)(nil)

// WatchPricing exports the price models' state, read at scrape time:
// geotoll_price_model_ready (1 once a relation's model is built; until
// then its requests are priced by size), geotoll_price_model_age_seconds
// and geotoll_price_model_rows, by relation: at any moment those the
// layers read, a set the configuration bounds; but a relation geotoll
// prepare rebuilds gets a new name (its generation), so each rebuild of a
// changed table ends its relations' series and starts new ones.
func WatchPricing(reg prometheus.Registerer, status func() []density.Status) error {
	return reg.Register(&pricingCollector{status: status,
		ready: prometheus.NewDesc("geotoll_price_model_ready", "1 once a density model prices the relation's requests (its own, or while it is built the model of the relation it replaced); 0 while they are priced by their size.", []string{"relation"}, nil),
		age:   prometheus.NewDesc("geotoll_price_model_age_seconds", "Seconds since the relation's density model was built or last found current, its relation unchanged (-1 before).", []string{"relation"}, nil),
		rows:  prometheus.NewDesc("geotoll_price_model_rows", "Rows the relation's density model holds (scaled back when sampled).", []string{"relation"}, nil),
	})
}

type pricingCollector struct {
	status           func() []density.Status
	ready, age, rows *prometheus.Desc
}

func (c *pricingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.age
	ch <- c.rows
}

func (c *pricingCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.status() {
		ready, age := 0.0, -1.0
		if st.Ready {
			ready, age = 1, st.Age.Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready, st.Relation)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age, st.Relation)
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, st.Rows, st.Relation)
	}
}
