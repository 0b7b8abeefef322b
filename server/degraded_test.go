package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/throttle"
)

// flakyStore is a MemoryStore that fails every call while down, counting
// the calls that reach it.
type flakyStore struct {
	*throttle.MemoryStore
	mu    sync.Mutex
	down  bool
	calls int
}

func (s *flakyStore) hit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.down {
		return errors.New("redis: connection refused")
	}
	return nil
}

func (s *flakyStore) set(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }
func (s *flakyStore) n() int        { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

func (s *flakyStore) Admit(ctx context.Context, a throttle.Ask) (throttle.Answer, error) {
	if err := s.hit(); err != nil {
		return throttle.Answer{}, err
	}
	return s.MemoryStore.Admit(ctx, a)
}

func (s *flakyStore) Spend(ctx context.Context, k string, l throttle.Limit, c float64) (throttle.Result, error) {
	if err := s.hit(); err != nil {
		return throttle.Result{}, err
	}
	return s.MemoryStore.Spend(ctx, k, l, c)
}

func (s *flakyStore) Peek(ctx context.Context, k string, l throttle.Limit) (throttle.Result, error) {
	if err := s.hit(); err != nil {
		return throttle.Result{}, err
	}
	return s.MemoryStore.Peek(ctx, k, l)
}

// A failing store is asked once per probe interval, not once per request;
// the transitions are logged once each; it is used again once it recovers.
func TestTollBreaker(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{})}
	fallback := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.FailMode, toll.Fallback, toll.Replicas = FailLocal, fallback, 2
	toll.ProbeInterval = 200 * time.Millisecond
	toll.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	z14 := tileDemand(14, "places")

	if _, ok := admit(t, toll, "k", z14); !ok || toll.LimiterHealth().Degraded {
		t.Fatal("healthy store: refused or degraded")
	}
	store.set(true)
	start := time.Now()
	for i := 0; i < 20; i++ {
		if w, ok := admit(t, toll, "k", z14); !ok {
			t.Fatalf("request %d while the store fails: %d %s", i, w.Code, w.Body)
		}
	}
	h := toll.LimiterHealth()
	if elapsed := time.Since(start); elapsed < toll.ProbeInterval && store.n() != 2 {
		t.Fatalf("store asked %d times in %v: want 2 (one success, one failure), the rest by fail_mode", store.n(), elapsed)
	}
	if !h.Degraded || h.Err == "" || h.StoreErrors != 1 || h.Fallbacks != 20 {
		t.Fatalf("health while failing: %+v", h)
	}
	// Local buckets run at rate/replicas; the client's key is in the
	// fallback, not the store.
	if r, _ := fallback.Peek(context.Background(), throttle.BucketKey("test", "free", "k:4"), throttle.Limit{Rate: 10, Capacity: 100}); r.Remaining > 100-19 {
		t.Fatalf("fallback not charged: %+v", r)
	}

	store.set(false)
	time.Sleep(toll.ProbeInterval + 20*time.Millisecond)
	if _, ok := admit(t, toll, "k", z14); !ok {
		t.Fatal("probe request refused")
	}
	if h := toll.LimiterHealth(); h.Degraded {
		t.Fatalf("still degraded after a successful probe: %+v", h)
	}
	n := store.n()
	admit(t, toll, "k", z14)
	if store.n() != n+1 {
		t.Fatal("a recovered store is not asked again")
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if strings.Count(out, "budget store failing") != 1 || strings.Count(out, "budget store recovered") != 1 {
		t.Fatalf("want one failing and one recovered line, got:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A request whose context is cancelled is refused: never failed over to
// the local bucket, whether or not the breaker is open, and it does not
// count against the store.
func TestTollCancelledRequestIsRefused(t *testing.T) {
	for _, degraded := range []bool{false, true} {
		store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{})}
		fallback := throttle.NewMemoryStore(throttle.MemoryOptions{})
		toll := testToll(store)
		toll.FailMode, toll.Fallback = FailLocal, fallback
		toll.ProbeInterval = time.Minute
		if degraded {
			store.set(true)
			admit(t, toll, "k", tileDemand(14, "places"))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/14/0/0.mvt", nil).WithContext(ctx)
		r.Header.Set("X-API-Key", "a")
		w := httptest.NewRecorder()
		if toll.AdmitTile(w, r, tileDemand(14, "places")) {
			t.Fatalf("degraded=%v: a cancelled request was admitted", degraded)
		}
		if res, _ := fallback.Peek(context.Background(), throttle.BucketKey("test", "free", "k:2"), throttle.Limit{Rate: 20, Capacity: 100}); res.Remaining != 100 {
			t.Fatalf("degraded=%v: the fallback charged a cancelled request: %+v", degraded, res)
		}
		if h := toll.LimiterHealth(); h.StoreErrors > 1 {
			t.Fatalf("degraded=%v: a cancelled request counted as a store error: %+v", degraded, h)
		}
	}
}

func TestTollClosedWhileDegraded(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	toll := testToll(store)
	toll.ProbeInterval = time.Minute
	for i := 0; i < 3; i++ {
		w, ok := admit(t, toll, "k", tileDemand(14, "places"))
		if ok || w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("request %d: ok=%v %d %v", i, ok, w.Code, w.Header())
		}
	}
	if store.n() != 1 {
		t.Fatalf("store asked %d times, want once per probe interval", store.n())
	}
}

func TestReadyzDegraded(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	ping := func(context.Context) error { return store.hit() }
	for _, tc := range []struct {
		mode   FailMode
		status int
		detail string
	}{
		{FailLocal, http.StatusOK, "degraded: using local buckets"},
		{FailOpen, http.StatusOK, "degraded: admitting without charging"},
		{FailClosed, http.StatusServiceUnavailable, "down: refusing with 503"},
	} {
		toll := testToll(store)
		toll.FailMode, toll.Fallback = tc.mode, throttle.NewMemoryStore(throttle.MemoryOptions{})
		h := New(Options{Ready: checkedNow(t, map[string]Check{
			"redis":    toll.ReadyCheck(ping),
			"postgres": func(context.Context) error { return nil },
		})})
		code, checks := readyz(t, h)
		if code != tc.status || !strings.HasPrefix(checks["redis"], tc.detail) || checks["postgres"] != "ok" {
			t.Errorf("%s: %d %v", tc.mode, code, checks)
		}
	}
	// A healthy store is plain "ok".
	toll := testToll(store)
	store.set(false)
	if err := toll.ReadyCheck(ping)(context.Background()); err != nil {
		t.Fatalf("healthy: %v", err)
	}
}

func TestWatchLimiter(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	toll := testToll(store)
	toll.FailMode, toll.Fallback = FailLocal, throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll.ProbeInterval = time.Minute
	reg := prometheus.NewRegistry()
	if err := WatchLimiter(reg, toll); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		admit(t, toll, "k", tileDemand(14, "places"))
	}
	want := `
# HELP geotoll_limiter_degraded 1 while the budget store (Redis) fails and budgets follow fail_mode, else 0.
# TYPE geotoll_limiter_degraded gauge
geotoll_limiter_degraded{fail_mode="local"} 1
# HELP geotoll_limiter_fallbacks_total Budget decisions made without the store, by fail_mode.
# TYPE geotoll_limiter_fallbacks_total counter
geotoll_limiter_fallbacks_total{fail_mode="local"} 3
# HELP geotoll_limiter_store_errors_total Budget store calls that failed (error or timeout) and were decided by fail_mode.
# TYPE geotoll_limiter_store_errors_total counter
geotoll_limiter_store_errors_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// With fail_mode closed a degraded instance is drained by its load balancer,
// so no request comes to probe the store: a successful readiness ping must
// bring it back by itself.
func TestReadyzRecoversWithoutTraffic(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	toll := testToll(store)
	toll.FailMode = FailClosed
	toll.ProbeInterval = time.Hour // no request would probe within the test
	if _, ok := admit(t, toll, "k1", tileDemand(14, "places")); ok {
		t.Fatal("admitted while the store is down (closed)")
	}
	check := toll.ReadyCheck(func(context.Context) error { return store.hit() })
	if err := check(context.Background()); err == nil {
		t.Fatal("ready while the store is down with fail_mode closed")
	}
	store.set(false)
	if err := check(context.Background()); err != nil {
		t.Fatalf("still not ready after the store answers: %v", err)
	}
	if _, ok := admit(t, toll, "k1", tileDemand(14, "places")); !ok {
		t.Fatal("requests still refused after readiness saw the store recover")
	}
}
