package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// checkedNow is the readiness of checks after one round.
func checkedNow(t *testing.T, checks map[string]Check) *Readiness {
	t.Helper()
	rd := NewReadiness(checks, time.Hour, time.Second)
	rd.Check(t.Context())
	return rd
}

func readyz(t *testing.T, h http.Handler) (int, map[string]string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var body struct {
		Ready  bool
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %q: %v", w.Body, err)
	}
	if body.Ready != (w.Code == http.StatusOK) {
		t.Fatalf("/readyz %d says ready %v", w.Code, body.Ready)
	}
	return w.Code, body.Checks
}

// /readyz never runs a check on behalf of its caller: a thousand calls run
// none; it serves the background checker's latest results, and is 503
// before the first round and once the checker has stopped.
func TestReadyzServesBackgroundResults(t *testing.T) {
	var runs atomic.Int32
	check := map[string]Check{"db": func(context.Context) error { runs.Add(1); return nil }}
	rd := NewReadiness(check, time.Hour, time.Second)
	h := New(Options{Logger: discard(), Ready: rd})
	if code, _ := readyz(t, h); code != http.StatusServiceUnavailable {
		t.Fatalf("before any check: %d, want 503", code)
	}
	rd.Check(t.Context())
	for range 1000 {
		if code, checks := readyz(t, h); code != http.StatusOK || checks["db"] != "ok" {
			t.Fatalf("after a passing round: %d %v", code, checks)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("1000 /readyz calls ran the check %d times, want only the background round's 1", n-1)
	}
	rd = NewReadiness(check, 20*time.Millisecond, 10*time.Millisecond)
	h = New(Options{Logger: discard(), Ready: rd})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); rd.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatal("Run does not check every interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done
	time.Sleep(2*20*time.Millisecond + 10*time.Millisecond + 20*time.Millisecond)
	if code, _ := readyz(t, h); code != http.StatusServiceUnavailable {
		t.Fatalf("results older than 2 intervals + timeout: %d, want 503", code)
	}
	if code, _ := readyz(t, New(Options{Logger: discard()})); code != http.StatusOK {
		t.Fatalf("no readiness configured: %d, want 200", code)
	}
}

// With fail_mode closed, a /readyz call must not end degraded mode: only
// the background checker's ping may (a drained instance gets no request
// that could probe the store). Here the budget store is a Redis that is
// gone while the readiness ping reaches a live one.
func TestReadyzCallsDoNotClearBreaker(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := gone.Addr().String()
	gone.Close() // nothing listens there any more
	dead := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	live := testenv.Redis(t)

	f := failover(throttle.NewRedisStore(dead, throttle.RedisOptions{Timeout: time.Second}), throttle.FailClosed)
	rd := checkedNow(t, map[string]Check{"redis": LimiterCheck(f, func(ctx context.Context) error { return live.Ping(ctx).Err() })})
	h := New(Options{Logger: discard(), Ready: rd})
	if a, err := f.Admit(t.Context(), oneToken); (err == nil && a.Allowed) || !f.Health().Degraded {
		t.Fatal("a request on a Redis that is gone did not open the breaker")
	}
	for range 20 {
		readyz(t, h)
	}
	if !f.Health().Degraded {
		t.Fatal("/readyz calls cleared the breaker of fail_mode closed")
	}
	rd.Check(t.Context()) // the background round: its ping passes
	if f.Health().Degraded {
		t.Fatal("the background readiness ping did not end degraded mode")
	}
}

// A pool whose every connection is busy is not a database that is down:
// the check runs on a connection of its own. A connection that dies is
// replaced at the next check.
func TestConnCheckIgnoresBusyPool(t *testing.T) {
	pool, _ := testenv.BusyPool(t) // its only connection is held
	app := "geotoll-test-ready-" + strings.TrimPrefix(testenv.Prefix(t), "geotoll-test-")
	check := &ConnCheck{Connect: func(ctx context.Context) (*pgx.Conn, error) {
		cfg := pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = app
		return pgx.ConnectConfig(ctx, cfg)
	}}
	t.Cleanup(func() { check.Close(context.Background()) })
	h := New(Options{Logger: discard(), Ready: checkedNow(t, map[string]Check{"postgres": check.Check})})
	if code, checks := readyz(t, h); code != http.StatusOK || checks["postgres"] != "ok" {
		t.Fatalf("busy pool: /readyz %d %v, want 200 ok", code, checks)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := pool.Ping(ctx); err == nil {
		t.Fatal("the pool is not busy: the test proves nothing")
	}

	var cut int
	if err := testenv.ReadPool(t).QueryRow(t.Context(),
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&cut); err != nil || cut != 1 {
		t.Fatalf("terminate the check's connection: %d %v", cut, err)
	}
	_ = check.Check(t.Context()) // may find the connection dead, and drop it
	if err := check.Check(t.Context()); err != nil {
		t.Fatalf("the check did not reconnect after its connection died: %v", err)
	}
}

// A stopping process is unready whatever its checks say: 503 with detail
// "shutting down", on the detailed and the public /readyz alike.
func TestReadyzStopping(t *testing.T) {
	rd := NewReadiness(map[string]Check{"db": func(context.Context) error { return nil }}, time.Hour, time.Second)
	rd.Check(t.Context())
	h := New(Options{Logger: discard(), Ready: rd})
	if code, _ := readyz(t, h); code != http.StatusOK {
		t.Fatalf("before Stopping: %d, want 200", code)
	}
	rd.Stopping()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"detail":"shutting down"`) {
		t.Errorf("after Stopping: %d %s, want 503 shutting down", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	New(Options{Logger: discard(), Ready: rd, OpsListener: true}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if w.Code != http.StatusServiceUnavailable || w.Body.String() != "{\"ready\":false}\n" {
		t.Errorf("public /readyz after Stopping: %d %s, want 503 ready false", w.Code, w.Body)
	}
}
