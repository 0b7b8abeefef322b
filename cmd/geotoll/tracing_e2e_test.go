package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// One tile request is one trace: the HTTP span (named after the route),
// the charge of its price as its child, the Redis call that admits it as
// the charge's child, and the tile's PostgreSQL statements — all in one
// trace, recorded by an in-memory exporter against the real services.
func TestEndToEndOneTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	key := createKey(t, "free")
	m := startMainWith(t, func(c *Config) { c.Tiles.Cache.MaxBytes = 0 }, func(m *Main) { m.Tracing = tp })
	base := "http://" + m.Addr()
	resp, body := get(t, tileURL(base, "places", maptile.At(orb.Point{13.405, 52.52}, 14)), key)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tile: %d %s", resp.StatusCode, short(body))
	}

	var root sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for root == nil && time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			if s.Name() == "GET /tiles/{layer}/{z}/{x}/{y}" {
				root = s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if root == nil {
		t.Fatalf("no span named after the tile route among %d", len(rec.Ended()))
	}
	var charge, redisCall, statement sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			continue
		}
		scope := s.InstrumentationScope().Name
		switch {
		case s.Name() == "toll.charge" && s.Parent().SpanID() == root.SpanContext().SpanID():
			charge = s
		case strings.Contains(scope, "redisotel"):
			redisCall = s
		case strings.Contains(scope, "otelpgx") && strings.Contains(strings.ToLower(s.Name()), "batch"):
			statement = s
		}
	}
	if charge == nil || redisCall == nil || statement == nil {
		var names []string
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
				names = append(names, s.Name()+" ("+s.InstrumentationScope().Name+")")
			}
		}
		t.Fatalf("the tile's trace lacks the charge, the Redis call or the statement: %v", names)
	}
	if redisCall.Parent().SpanID() != charge.SpanContext().SpanID() {
		t.Errorf("the Redis call %q is not the charge's child", redisCall.Name())
	}
}

// Tracing is off without an endpoint, and with tracing.endpoint set the
// server's spans reach an OTLP/HTTP collector (here a test server that
// records what is posted to it).
func TestEndToEndTracingExport(t *testing.T) {
	clearConfigEnv(t)
	// The batcher exports every 0.1 s, not every 5 s (its default): the
	// test waits for the spans, not for the batcher's clock.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	if m := startMain(t, nil); m.Tracing != nil {
		t.Error("tracing is on without an endpoint")
	}

	posts := make(chan string, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && len(body) > 0 {
			select {
			case posts <- r.URL.Path + " " + r.Header.Get("Content-Type"):
			default:
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(collector.Close)
	m := startMain(t, func(c *Config) {
		c.Tracing.Endpoint = collector.URL
		c.Tracing.SampleRatio = 1
	})
	if m.Tracing == nil {
		t.Fatal("tracing.endpoint set, tracing off")
	}
	if resp, body := get(t, "http://"+m.Addr()+"/budget", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/budget: %d %s", resp.StatusCode, short(body))
	}
	select {
	case got := <-posts: // the batcher sends within its 0.1 s schedule delay
		if got != "/v1/traces application/x-protobuf" {
			t.Errorf("the exporter posted %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no spans reached the collector in 20 s")
	}
}

// A request span's client.address is the client the toll charges: with
// no proxy trusted, the socket peer, whatever X-Forwarded-For a client
// writes (otelhttp alone takes its first address); behind a trusted proxy,
// the address that proxy forwarded.
func TestEndToEndSpanClientAddressIsTheOneCharged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		trusted []string
		want    string
	}{
		{"no proxy trusted", nil, "127.0.0.1"},
		{"behind a trusted proxy", []string{"127.0.0.1/32"}, "198.51.100.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			m := startMainWith(t, func(c *Config) { c.HTTP.TrustedProxies = tc.trusted }, func(m *Main) { m.Tracing = tp })
			resp, _ := send(t, http.MethodGet, "http://"+m.Addr()+"/tiles", "", "X-Forwarded-For", "203.0.113.9, 198.51.100.7")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/tiles: %d", resp.StatusCode)
			}
			var got string
			for deadline := time.Now().Add(10 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				for _, s := range rec.Ended() {
					if s.Name() != "GET /tiles" {
						continue
					}
					for _, kv := range s.Attributes() {
						if kv.Key == "client.address" {
							got = kv.Value.AsString()
						}
					}
				}
			}
			if got != tc.want {
				t.Errorf("client.address %q, want %q", got, tc.want)
			}
		})
	}
}

// A key in a request's path (a URL template with &key= for ?key=) is not
// exported with its span: otelhttp records url.path as sent (it was).
func TestEndToEndSpanHidesAKeyInThePath(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := startMainWith(t, nil, func(m *Main) { m.Tracing = tp })
	key := "gt_" + strings.Repeat("x7", 21) + "Q"
	resp, _ := send(t, http.MethodGet, "http://"+m.Addr()+"/tiles/places/0/0/0.mvt&key="+key, "")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the path with a key: %d, want 404", resp.StatusCode)
	}
	var path string
	for deadline := time.Now().Add(10 * time.Second); path == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range rec.Ended() {
			for _, kv := range s.Attributes() {
				if strings.Contains(kv.Value.String(), "gt_") {
					t.Fatalf("span %q exports %s = %q", s.Name(), kv.Key, kv.Value.String())
				}
				if kv.Key == "url.path" {
					path = kv.Value.AsString()
				}
			}
		}
	}
	if path != "/tiles/places/0/0/REDACTED" {
		t.Errorf("url.path %q, want /tiles/places/0/0/REDACTED", path)
	}
}
