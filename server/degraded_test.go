package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/throttle"
)

// flakyStore is a budget store that fails every call while down,
// counting the calls that reach it.
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

func (s *flakyStore) Admit(ctx context.Context, req throttle.Request) (throttle.Admission, error) {
	if err := s.hit(); err != nil {
		return throttle.Admission{}, err
	}
	return s.MemoryStore.Admit(ctx, req)
}

func (s *flakyStore) Peek(ctx context.Context, b throttle.Bucket) (throttle.Result, error) {
	if err := s.hit(); err != nil {
		return throttle.Result{}, err
	}
	return s.MemoryStore.Peek(ctx, b)
}

// failover is a Failover over store in mode, its probe interval an hour
// (no request probes within a test).
func failover(store throttle.Store, mode throttle.FailMode) *throttle.Failover {
	return &throttle.Failover{Primary: store, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}), Mode: mode,
		ProbeInterval: time.Hour, Logger: discard()}
}

var oneToken = throttle.Request{Bucket: throttle.Bucket{Key: "k", Limit: throttle.Limit{Rate: 1, Capacity: 100}}, Cost: 1}

func TestReadyzDegraded(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	ping := func(context.Context) error { return store.hit() }
	for _, tc := range []struct {
		mode   throttle.FailMode
		status int
		detail string
	}{
		{throttle.FailLocal, http.StatusOK, "degraded: using local buckets"},
		{throttle.FailOpen, http.StatusOK, "degraded: admitting without charging"},
		{throttle.FailClosed, http.StatusServiceUnavailable, "down: refusing with 503"},
	} {
		f := failover(store, tc.mode)
		h := New(Options{Ready: checkedNow(t, map[string]Check{
			"redis":    LimiterCheck(f, ping),
			"postgres": func(context.Context) error { return nil },
		})})
		code, checks := readyz(t, h)
		if code != tc.status || !strings.HasPrefix(checks["redis"], tc.detail) || checks["postgres"] != "ok" {
			t.Errorf("%s: %d %v", tc.mode, code, checks)
		}
	}
	// A healthy store is plain "ok".
	store.set(false)
	if err := LimiterCheck(failover(store, throttle.FailLocal), ping)(context.Background()); err != nil {
		t.Fatalf("healthy: %v", err)
	}
}

func TestWatchLimiter(t *testing.T) {
	store, f, reg := watchedDown(t, throttle.FailLocal)
	// A refill too slow to show over the test: what was spent locally is
	// what is handed back.
	slow := oneToken
	slow.Limit.Rate = 1e-6
	for range 3 {
		if a, err := f.Admit(context.Background(), slow); err != nil {
			t.Fatal(err)
		} else {
			a.Ticket.Release()
		}
	}
	// Back: the store admits the caller, and is handed the 3 tokens spent
	// locally with that request's settlement.
	store.set(false)
	f.Recovered(context.Background())
	if a, err := f.Admit(context.Background(), slow); err != nil || !a.Allowed {
		t.Fatalf("after the recovery: %+v, %v", a, err)
	} else {
		a.Ticket.Release()
	}
	want := `
# HELP geotoll_limiter_degraded 1 while the budget store (Redis) fails and budgets follow fail_mode (local, open or closed), else 0.
# TYPE geotoll_limiter_degraded gauge
geotoll_limiter_degraded{fail_mode="local"} 0
# HELP geotoll_limiter_local_spending_carried_tokens_total Tokens callers spent from their local buckets (fail_mode local) beyond what those refilled, handed to the settlement of each caller's first request the store admitted after the outage, which charges them there (no lower than the bucket's debt floor, as any settlement).
# TYPE geotoll_limiter_local_spending_carried_tokens_total counter
geotoll_limiter_local_spending_carried_tokens_total 3
# HELP geotoll_limiter_free_peeks_total Budget reads (/budget, dry runs, the budget headers of a 422 or of the global budget's 503) answered in process, from what the store said of the caller's bucket within the last redis.peek_reuse.
# TYPE geotoll_limiter_free_peeks_total counter
geotoll_limiter_free_peeks_total 0
# HELP geotoll_limiter_free_refusals_total Requests refused in process, without a store call, because the store had refused their caller and its bucket still could not pay.
# TYPE geotoll_limiter_free_refusals_total counter
geotoll_limiter_free_refusals_total 0
# HELP geotoll_limiter_fallbacks_total Budget decisions made without the store, by fail_mode (local, open or closed).
# TYPE geotoll_limiter_fallbacks_total counter
geotoll_limiter_fallbacks_total{fail_mode="local"} 3
# HELP geotoll_limiter_store_errors_total Budget store calls that failed (error or timeout) and were decided by fail_mode, and background probes of the store that failed while it was not yet degraded.
# TYPE geotoll_limiter_store_errors_total counter
geotoll_limiter_store_errors_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// watchedDown is a store that is down, a Failover over it in mode, and a
// registry of its WatchLimiter metrics.
func watchedDown(t *testing.T, mode throttle.FailMode) (*flakyStore, *throttle.Failover, *prometheus.Registry) {
	t.Helper()
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{}), down: true}
	f := failover(store, mode)
	reg := prometheus.NewRegistry()
	if err := WatchLimiter(reg, f); err != nil {
		t.Fatal(err)
	}
	return store, f, reg
}

// With fail_mode closed a degraded instance is drained by its load balancer,
// so no request comes to probe the store: a successful readiness ping must
// bring it back by itself. So must it with local or open on a replica
// that gets no request: its geotoll_limiter_degraded stayed 1 (the alerts
// firing) for as long as it stayed idle after the store came back.
func TestReadyzRecoversWithoutTraffic(t *testing.T) {
	for _, mode := range []throttle.FailMode{throttle.FailClosed, throttle.FailLocal, throttle.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			store, f, reg := watchedDown(t, mode)
			a, err := f.Admit(context.Background(), oneToken)
			if mode == throttle.FailClosed && err == nil {
				t.Fatal("admitted while the store is down (closed)")
			}
			if err == nil {
				a.Ticket.Release()
			}
			degraded := func() float64 {
				return gathered(t, reg, "geotoll_limiter_degraded")
			}
			if degraded() != 1 {
				t.Fatal("geotoll_limiter_degraded is not 1 after a failed call")
			}
			check := LimiterCheck(f, func(context.Context) error { return store.hit() })
			if err := check(context.Background()); err == nil {
				t.Fatal("the check passed plainly while the store is down")
			}
			store.set(false)
			if err := check(context.Background()); err != nil {
				t.Fatalf("still degraded or not ready after the store answers: %v", err)
			}
			if degraded() != 0 {
				t.Error("geotoll_limiter_degraded is still 1 after readiness saw the store recover")
			}
			calls := store.calls
			if a, err := f.Admit(context.Background(), oneToken); err != nil || !a.Allowed {
				t.Fatalf("requests still refused after readiness saw the store recover: %+v %v", a, err)
			} else {
				a.Ticket.Release()
			}
			if store.calls == calls {
				t.Error("the next request was decided by the fail mode, not the store")
			}
		})
	}
}

// A store that is down from the start (Redis unreachable as the process
// starts, or failing while no request comes) degrades the instance at the
// background check's first failed ping, as a request's failed call would:
// geotoll_limiter_degraded said 0, the alerts silent, until a request came.
func TestReadyzDegradesWithoutTraffic(t *testing.T) {
	for _, mode := range []throttle.FailMode{throttle.FailClosed, throttle.FailLocal, throttle.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			store, f, reg := watchedDown(t, mode)
			check := LimiterCheck(f, func(context.Context) error { return store.hit() })
			err := check(context.Background())
			var degraded *DegradedError
			if mode == throttle.FailClosed && (err == nil || errors.As(err, &degraded)) {
				t.Fatalf("check with the store down (closed): %v, want not ready", err)
			}
			if mode != throttle.FailClosed && !errors.As(err, &degraded) {
				t.Fatalf("check with the store down (%s): %v, want degraded", mode, err)
			}
			if got := gathered(t, reg, "geotoll_limiter_degraded"); got != 1 {
				t.Errorf("geotoll_limiter_degraded %v after a failed readiness ping, want 1", got)
			}
			if got := gathered(t, reg, "geotoll_limiter_store_errors_total"); got != 1 {
				t.Errorf("geotoll_limiter_store_errors_total %v, want 1", got)
			}
			calls := store.calls
			if a, err := f.Admit(context.Background(), oneToken); err == nil {
				a.Ticket.Release()
			}
			if store.calls != calls {
				t.Error("the next request went to the store the check found down, not to the fail mode")
			}
			// Back: the next check ends it.
			store.set(false)
			if err := check(context.Background()); err != nil {
				t.Fatalf("check after the store came back: %v", err)
			}
			if got := gathered(t, reg, "geotoll_limiter_degraded"); got != 0 {
				t.Errorf("geotoll_limiter_degraded %v after the store came back, want 0", got)
			}
		})
	}
}

// A store that answers nothing (paused, partitioned) fails the probe at
// the round's own deadline, which is the probe's failure, not the end of
// the check: degraded mode begins there too. Only a check cancelled (the
// process stopping) says nothing of the store.
func TestReadinessDegradesOnAStoreThatAnswersNothing(t *testing.T) {
	store := &flakyStore{MemoryStore: throttle.NewMemoryStore(throttle.MemoryOptions{})}
	f := failover(store, throttle.FailLocal)
	hung := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	rd := NewReadiness(map[string]Check{"redis": LimiterCheck(f, hung)}, time.Hour, 100*time.Millisecond)
	rd.Check(context.Background())
	if h := f.Health(); !h.Degraded || h.StoreErrors != 1 {
		t.Errorf("after a probe that timed out: degraded %v, %d store errors; want degraded, 1", h.Degraded, h.StoreErrors)
	}
	g := failover(store, throttle.FailLocal)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = LimiterCheck(g, hung)(ctx)
	if h := g.Health(); h.Degraded || h.StoreErrors != 0 {
		t.Errorf("after a cancelled check: degraded %v, %d store errors; want neither", h.Degraded, h.StoreErrors)
	}
}

// gathered is the value of reg's metric name (a gauge or counter of one
// series).
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		if g := mf.GetMetric()[0].GetGauge(); g != nil {
			return g.GetValue()
		}
		return mf.GetMetric()[0].GetCounter().GetValue()
	}
	t.Fatalf("no metric %s of one series", name)
	return 0
}
