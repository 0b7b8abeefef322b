package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestMetricsPriced(t *testing.T) {
	t.Parallel()
	m, _ := newTestMetrics(t)
	m.Priced("free", toll.Price{Cost: 6, Route: "tile", Layer: "places", Zoom: 8}, toll.Admitted)
	m.Priced("free", toll.Price{Cost: 6, Route: "tile", Layer: "places,districts", Zoom: 8}, toll.Admitted)
	m.Priced("free", toll.Price{Cost: 60, Route: "tile", Layer: "places", Zoom: 2}, toll.Refused)
	m.Priced("free", toll.Price{Cost: 60, Route: "tile", Layer: "places", Zoom: 2}, toll.ShadowRefused)
	m.Priced(toll.AnonymousTier, toll.Price{Cost: 2.5, Route: "within", Layer: "places", Zoom: -1}, toll.Admitted)

	for _, tc := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.tokens.WithLabelValues("free", PathTile, "places", "8"), 9}, // 6, plus half of the composite's 6
		{m.tokens.WithLabelValues("free", PathTile, "districts", "8"), 3},
		{m.tokens.WithLabelValues("free", PathTile, "places", "2"), 0}, // refused: nothing spent
		{m.tokens.WithLabelValues(toll.AnonymousTier, PathWithin, "places", ""), 2.5},
		{m.throttled.WithLabelValues("free", PathTile), 1},
		{m.priced.WithLabelValues("free", PathTile, string(toll.ShadowRefused)), 1},
		{m.priced.WithLabelValues("free", PathTile, string(toll.Admitted)), 2},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%v = %v, want %v", tc.c, got, tc.want)
		}
	}
}

func TestMetricsTiles(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t)
	var _ tiles.Observer = m
	m.TileCache("hit")
	m.TileCache("hit")
	m.TileCache("miss")
	m.TileQuery("places", 14, 3*time.Millisecond)
	if got := testutil.ToFloat64(m.cache.WithLabelValues("hit")); got != 2 {
		t.Errorf("hits %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "geotoll_tile_query_duration_seconds"); err != nil || n != 1 {
		t.Errorf("query histograms: %d %v", n, err)
	}
	cache, err := tiles.NewCache(tiles.CacheOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := WatchTileCache(reg, cache); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "geotoll_tile_cache_bytes", "geotoll_tile_cache_entries"); err != nil || n != 2 {
		t.Errorf("cache gauges: %d %v", n, err)
	}
}

// The latency histograms reach past the longest a request can take (its
// write timeout, 30 s by default): a request answered at its deadline is
// not lost in +Inf.
func TestMetricsDurationBucketsCoverTheDeadlines(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t)
	m.TileQuery("places", 14, 25*time.Second)
	h := New(Options{Logger: quietLogger(), Metrics: m})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		if f.GetName() != "geotoll_http_request_duration_seconds" && f.GetName() != "geotoll_tile_query_duration_seconds" {
			continue
		}
		seen++
		buckets := f.GetMetric()[0].GetHistogram().GetBucket()
		if top := buckets[len(buckets)-1].GetUpperBound(); top < 60 {
			t.Errorf("%s: the last finite bucket is %v s, want at least 60 s", f.GetName(), top)
		}
	}
	if seen != 2 {
		t.Fatalf("found %d of the 2 latency histograms", seen)
	}
}

// Requests are counted by route template (never the raw path), method and
// status, including unmatched routes and CORS preflights; /metrics serves
// the registry.
func TestMetricsMiddleware(t *testing.T) {
	t.Parallel()
	m, _ := newTestMetrics(t)
	h := New(Options{Logger: quietLogger(), Metrics: m, CORS: CORS{Origins: []string{"*"}}})
	do := func(method, path string, hdr ...string) *httptest.ResponseRecorder {
		return serve(h, method, path, hdr...)
	}
	do(http.MethodGet, "/healthz")
	do(http.MethodGet, "/healthz")
	do(http.MethodGet, "/no/such/secret-path")
	do(http.MethodOptions, "/healthz", "Origin", "https://a.example", "Access-Control-Request-Method", "GET")
	do(http.MethodDelete, "/healthz") // a route's path, not its method: the route's 405
	for _, tc := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/healthz", "GET", "200", 2},
		{"/healthz", "DELETE", "405", 1},
		{"unmatched", "GET", "404", 1},
		{"preflight", "OPTIONS", "204", 1},
	} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(tc.route, tc.method, tc.status)); got != tc.want {
			t.Errorf("requests{%s %s %s} = %v, want %v", tc.route, tc.method, tc.status, got, tc.want)
		}
	}
	w := do(http.MethodGet, "/metrics")
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `geotoll_http_requests_total{method="GET",route="/healthz",status="200"} 2`) {
		t.Fatalf("/metrics: %d\n%s", w.Code, body)
	}
	// Live numbers, as /healthz and /readyz are: no cache keeps them.
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("/metrics: Cache-Control %q, want no-store", cc)
	}
	if strings.Contains(body, "secret-path") {
		t.Error("a raw request path became a label value")
	}
}

func TestPoolCollector(t *testing.T) {
	t.Parallel()
	pool := testenv.ReadPool(t)
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewPoolCollector("read", pool.Stat)); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP geotoll_db_pool_max_conns Pool size limit.
# TYPE geotoll_db_pool_max_conns gauge
geotoll_db_pool_max_conns{pool="read"} `+strconv.Itoa(int(pool.Config().MaxConns))+`
`), "geotoll_db_pool_max_conns"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n != 12 {
		t.Errorf("pool metrics: %d %v, want 12", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// Made-up HTTP methods are free for anyone to send (each is a 405 or 404,
// never priced), so none may become a label value: 500 of them, 2 KB each,
// on matched and unmatched routes, add no series beyond the first one's and
// leave /metrics small.
func TestMetricsMethodLabelBounded(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t)
	h := New(Options{Logger: quietLogger(), Metrics: m, CORS: CORS{Origins: []string{"*"}}})
	send := func(method string) {
		for _, path := range []string{"/healthz", "/metrics", "/no/such/route"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		}
	}
	series := func() int {
		n, err := testutil.GatherAndCount(reg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	made := func(i int) string { return "X" + strconv.Itoa(i) + strings.Repeat("M", 2048) }
	send(made(0))
	before := series()
	for i := 1; i <= 500; i++ {
		send(made(i))
	}
	if after := series(); after != before {
		t.Errorf("500 made-up methods added %d series", after-before)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if len(l.GetValue()) > 64 {
					t.Errorf("%s{%s} carries a %d-byte label value: request text became a label", f.GetName(), l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Body.Len() > 64<<10 {
		t.Errorf("/metrics is %d bytes after 500 made-up methods", w.Body.Len())
	}
	for _, tc := range []struct {
		route, status string
		want          float64
	}{{"/healthz", "405", 501}, {"/metrics", "405", 501}, {"unmatched", "404", 501}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(tc.route, "other", tc.status)); got != tc.want {
			t.Errorf("requests{%s other %s} = %v, want %v", tc.route, tc.status, got, tc.want)
		}
	}
}

// A request cut short by a panic after its head was sent — the access log
// aborts it with http.ErrAbortHandler — is still counted, as "aborted",
// and the panic goes on to net/http.
func TestMetricsCountAnAbortedRequest(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	h := m.wrap(withAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		panic("kaboom")
	})))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("the panic: %v, want http.ErrAbortHandler", v)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
	}()
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "GET", "aborted")); got != 1 {
		t.Errorf("aborted requests counted: %v, want 1", got)
	}
}

// A request whose client hangs up before its answer's head is written is
// recorded as 499 (ClientClosed), in the metrics and the access log,
// whatever the handler then wrote — the 503 "request cancelled" no one
// reads — so that a map's cancelled tiles do not count as the server's
// errors (the error-rate alert reads 5xx). A request answered before its
// client left keeps its status, though its handler goes on after.
func TestMetricsClientGoneIs499(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var hangUp context.CancelFunc
	h := m.wrap(withAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wait":
			hangUp()
			<-r.Context().Done() // the client hangs up, then the answer is written
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/late":
			// Answered whole, then the handler goes on (a 503 waiting for
			// its statement to stop, pgcall.Respond) while the client,
			// which read it, closes the connection.
			w.WriteHeader(http.StatusServiceUnavailable)
			hangUp()
			<-r.Context().Done()
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})))
	for _, path := range []string{"/wait", "/now", "/late"} {
		ctx, cancel := context.WithCancel(context.Background())
		hangUp = cancel
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx))
		cancel()
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "GET", "499")); got != 1 {
		t.Errorf("requests whose client hung up counted as 499: %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "GET", "503")); got != 2 {
		t.Errorf("503s answered: %v, want 2 (those written before their client left)", got)
	}
	for _, want := range []string{`"path":"/wait","query":"","status":499`, `"path":"/now","query":"","status":503`, `"path":"/late","query":"","status":503`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("access log without %s: %s", want, logs.String())
		}
	}
}

// A request whose body does not arrive by the server's read deadline is
// answered 408 on a connection its client keeps open, and recorded as
// 408, in the metrics and the access log: net/http cancels a request's
// context on any read error of its connection, the deadline's too, which
// recorded it as 499 (a client that hung up).
func TestMetricsBodyTimeoutIs408(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer // read once srv.Close has waited for the handler
	srv := httptest.NewUnstartedServer(m.wrap(withAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				w.WriteHeader(http.StatusRequestTimeout)
			}
		}))))
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"points\":[")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("answered %d, want 408", resp.StatusCode)
	}
	srv.Close() // the handler has returned: its line is logged
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "POST", "408")); got != 1 {
		t.Errorf("408s counted: %v, want 1 (499: %v)", got, testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "POST", "499")))
	}
	if want := `"path":"/slow","query":"","status":408`; !strings.Contains(logs.String(), want) {
		t.Errorf("access log without %s: %s", want, logs.String())
	}
}
