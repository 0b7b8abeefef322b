package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// With metrics_listen set, /metrics is on the operators' listener only,
// and the public /readyz says ready or not, without the checks' detail.
func TestEndToEndMetricsListener(t *testing.T) {
	t.Parallel()
	m := startMain(t, func(c *Config) { c.MetricsListen = "127.0.0.1:0" })
	public, ops := "http://"+m.Addr(), "http://"+m.OpsAddr()

	resp, body := get(t, public+"/metrics", "")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("public /metrics: %d %s", resp.StatusCode, short(body))
	}
	resp, body = get(t, ops+"/metrics", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "geotoll_build_info{goversion=") ||
		!strings.Contains(string(body), `geotoll_http_requests_total{method="GET",route="unmatched",status="404"} 1`) {
		t.Fatalf("operators' /metrics: %d, no build info or no count of the public 404:\n%s", resp.StatusCode, short(body))
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("operators' /metrics: Cache-Control %q, want no-store", cc)
	}
	var terse, detail map[string]any
	resp, body = get(t, public+"/readyz", "")
	if err := json.Unmarshal(body, &terse); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("public /readyz: %d %s", resp.StatusCode, body)
	}
	if _, ok := terse["checks"]; ok || terse["ready"] != true || len(terse) != 1 {
		t.Errorf("public /readyz shows more than ready: %s", body)
	}
	resp, body = get(t, ops+"/readyz", "")
	if err := json.Unmarshal(body, &detail); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("operators' /readyz: %d %s", resp.StatusCode, body)
	}
	if checks, _ := detail["checks"].(map[string]any); checks["postgres"] != "ok" || checks["redis"] != "ok" {
		t.Errorf("operators' /readyz without detail: %s", body)
	}
	if resp, _ := get(t, ops+"/tiles", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the operators' listener serves the API: /tiles %d", resp.StatusCode)
	}
}

// Without metrics_listen the one listener serves /metrics and the detail.
func TestEndToEndOneListener(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	if resp, body := get(t, base+"/metrics", ""); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "geotoll_build_info") {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	if _, body := get(t, base+"/readyz", ""); !strings.Contains(string(body), `"checks"`) {
		t.Fatalf("/readyz without detail: %s", body)
	}
}

// base_path: routes answer below it, and every URL the server writes —
// TileJSON, the catalog, the preview page, a fence's Location — starts
// with it. A 405 says which methods are allowed.
func TestEndToEndBasePath(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) { c.BasePath = "/maps/" })
	host := strings.TrimPrefix(base, "http://")
	if resp, _ := get(t, base+"/tiles", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/tiles outside the base path: %d", resp.StatusCode)
	}
	resp, body := get(t, base+"/maps/tiles", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tilejson":"http://`+host+`/maps/tiles/places.json"`) ||
		!strings.Contains(string(body), `"tiles":"http://`+host+`/maps/tiles/places/{z}/{x}/{y}.mvt"`) {
		t.Fatalf("catalog: %d %s", resp.StatusCode, short(body))
	}
	resp, body = get(t, base+"/maps/tiles/places.json", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"http://`+host+`/maps/tiles/places/{z}/{x}/{y}.mvt"`) {
		t.Fatalf("TileJSON: %d %s", resp.StatusCode, short(body))
	}
	resp, body = get(t, base+"/maps/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `src="/maps/web/app.js"`) ||
		!strings.Contains(string(body), `<meta name="geotoll-base" content="/maps">`) {
		t.Fatalf("preview page: %d %s", resp.StatusCode, short(body))
	}
	if resp, _ := get(t, base+"/maps/web/app.js", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/maps/web/app.js: %d", resp.StatusCode)
	}
	if resp, body := get(t, base+"/maps/openapi.json", ""); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"servers":[{"url":"/maps"}]`) {
		t.Fatalf("openapi.json: %d %s", resp.StatusCode, short(body))
	}
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPost, "/maps/tiles", "GET, HEAD, OPTIONS"},
		{http.MethodDelete, "/maps/tiles/places/1/0/0.mvt", "GET, HEAD, OPTIONS"},
		{http.MethodGet, "/maps/geofence/check", "POST, OPTIONS"},
		{http.MethodPatch, "/maps/geofence/fences/7", "GET, HEAD, PUT, DELETE, OPTIONS"},
		{http.MethodPatch, "/maps/geofences", "GET, HEAD, POST, OPTIONS"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.allow)
		}
	}
}

// When one listener fails, Serve shuts the server down as it does at the
// end of its context — the other listener closed, the budgets flushed —
// and returns the error: it does not leave the operators' listener
// serving (and its port held) after it returned.
func TestServeStopsEverythingWhenAListenerFails(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Throttle.Prefix = testenv.Prefix(t)
	m := &Main{Config: cfg, Logger: quietLog(), ModelShelf: testShelf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Open(ctx); err != nil {
		t.Fatalf("open: %v", err)
	}
	ops := "http://" + m.OpsAddr() + "/healthz"
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	if resp, _ := get(t, ops, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("operators' /healthz: %d", resp.StatusCode)
	}
	if err := m.listener.Close(); err != nil { // the public listener fails
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Serve returned nil after its listener failed")
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if resp, err := c.Get(ops); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("the operators' listener still answers (%d) after Serve returned", resp.StatusCode)
	}
}

// On SIGTERM a server with http.shutdown_delay goes on serving for that
// long while /readyz answers 503 ("shutting down") on both listeners, so
// that a load balancer stops sending it requests before its listener
// closes; then it shuts down as without one.
func TestEndToEndShutdownDelayIsUnreadyWhileServing(t *testing.T) {
	t.Parallel()
	m, stop := launchMain(t, func(c *Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.HTTP.ShutdownDelay = 3 * time.Second
	}, nil)
	public, ops := "http://"+m.Addr(), "http://"+m.OpsAddr()
	if resp, body := get(t, ops+"/readyz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before the shutdown: %d %s", resp.StatusCode, short(body))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	var detail map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := get(t, ops+"/readyz", "")
		if resp.StatusCode == http.StatusServiceUnavailable {
			if err := json.Unmarshal(body, &detail); err != nil || detail["detail"] != "shutting down" {
				t.Fatalf("/readyz while draining: %s, want detail shutting down", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not turn 503 within 10 s of the shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Still serving: the public listener answers, unready.
	if resp, _ := get(t, public+"/healthz", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("public /healthz while draining: %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(t, public+"/readyz", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("public /readyz while draining: %d, want 503", resp.StatusCode)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// A second SIGTERM (or Ctrl-C) during http.shutdown_delay ends the delay:
// the server shuts down at once, not a minute later. The signal is sent
// to this process only once the delay has begun — the server then listens
// for it — and background loops (the readiness checks) go on meanwhile.
func TestEndToEndSecondSignalEndsTheShutdownDelay(t *testing.T) {
	logs := &logBuffer{}
	m, stop := launchMain(t, func(c *Config) { c.HTTP.ShutdownDelay = time.Minute },
		func(m *Main) { m.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	base := "http://" + m.Addr()
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- stop() }()
	for !strings.Contains(logs.String(), "unready: serving on before shutting down") {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("the delay did not begin within 10 s:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, first := readyzChecked(t, base)
	time.Sleep(1500 * time.Millisecond) // the checks' interval is 1 s
	if _, later := readyzChecked(t, base); later == first {
		t.Errorf("/readyz's checked_at stayed %q through the delay: the readiness checks stopped at the signal", first)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server still waits out its delay 20 s after a second signal")
	}
	if !strings.Contains(logs.String(), "a second signal: shutting down now") {
		t.Errorf("the log does not say the second signal ended the delay:\n%s", logs)
	}
}

// readyzChecked returns /readyz's status and checked_at.
func readyzChecked(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, body := get(t, base+"/readyz", "")
	var doc struct {
		CheckedAt string `json:"checked_at"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("/readyz: %v %s", err, body)
	}
	return resp.StatusCode, doc.CheckedAt
}

// A second signal sent a moment after the first — before the shutdown
// delay began — still ends the delay: main keeps the signals after the
// first from the start (laterSignals), and drain reads them there.
func TestSignalBeforeTheShutdownDelayEndsIt(t *testing.T) {
	later := make(chan os.Signal, 4)
	laterSignals = later
	defer func() { laterSignals = nil }()
	later <- syscall.SIGTERM // the second signal, already there when the delay begins
	m, stop := launchMain(t, func(c *Config) { c.HTTP.ShutdownDelay = time.Minute }, nil)
	_ = m
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server waits out its minute's delay though a second signal came before it began")
	}
}
