package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/throttle"
)

// DefaultProbeInterval is Toll.ProbeInterval when left 0.
const DefaultProbeInterval = 500 * time.Millisecond

// LimiterHealth is the state of the shared budget store (Redis) as Toll sees
// it.
type LimiterHealth struct {
	// Degraded is true from the first failed store call until a later call
	// succeeds. Meanwhile budgets follow FailMode, and one request per
	// ProbeInterval tries the store again.
	Degraded bool
	Since    time.Time // when it became degraded
	Err      string    // the last store error
	// StoreErrors counts failed store calls; Fallbacks counts budget
	// decisions made without the store (by FailMode).
	StoreErrors, Fallbacks uint64
}

// breaker is Toll's view of its Store: after a failure, calls go straight to
// the fail mode for a probe interval, then one call probes the store again.
// A store that stays down so costs one Timeout per interval, not one per
// request, and a recovered one is used again within one interval.
type breaker struct {
	mu       sync.Mutex
	degraded bool
	since    time.Time
	retryAt  time.Time
	lastErr  string

	storeErrors, fallbacks atomic.Uint64
}

// allow reports whether this call may use the store: always when healthy;
// when degraded, only the first call after the probe interval (the probe).
func (b *breaker) allow(now time.Time, interval time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.degraded {
		return true
	}
	if now.Before(b.retryAt) {
		return false
	}
	b.retryAt = now.Add(interval) // other calls keep falling back meanwhile
	return true
}

// succeeded records a store call that worked, logging a recovery once.
func (b *breaker) succeeded(ctx context.Context, log *slog.Logger, now time.Time) {
	b.mu.Lock()
	was, since := b.degraded, b.since
	b.degraded = false
	b.mu.Unlock()
	if was {
		log.LogAttrs(ctx, slog.LevelWarn, "budget store recovered: budgets are shared again",
			slog.Duration("degraded_for", now.Sub(since).Round(time.Millisecond)))
	}
}

// failed records a store call that failed, logging the transition to
// degraded once (not once per request).
func (b *breaker) failed(ctx context.Context, log *slog.Logger, now time.Time, interval time.Duration, err error, mode FailMode) {
	b.storeErrors.Add(1)
	b.mu.Lock()
	was := b.degraded
	b.degraded, b.retryAt, b.lastErr = true, now.Add(interval), err.Error()
	if !was {
		b.since = now
	}
	b.mu.Unlock()
	if !was {
		log.LogAttrs(ctx, slog.LevelError, "budget store failing: "+mode.doing(),
			slog.String("fail_mode", string(mode)), slog.Duration("probe_interval", interval), slog.Any("err", err))
	}
}

func (b *breaker) health() LimiterHealth {
	b.mu.Lock()
	defer b.mu.Unlock()
	return LimiterHealth{Degraded: b.degraded, Since: b.since, Err: b.lastErr,
		StoreErrors: b.storeErrors.Load(), Fallbacks: b.fallbacks.Load()}
}

// doing says what a fail mode does with budgets while the store fails.
func (m FailMode) doing() string {
	switch m {
	case FailLocal:
		return "using local buckets"
	case FailOpen:
		return "admitting without charging"
	}
	return "refusing with 503"
}

// LimiterHealth reports the state of the budget store.
func (t *Toll) LimiterHealth() LimiterHealth { return t.lim.health() }

func (t *Toll) probeInterval() time.Duration {
	if t.ProbeInterval <= 0 {
		return DefaultProbeInterval
	}
	return t.ProbeInterval
}

// onStore runs call on Store, bounded by Timeout, unless the breaker keeps
// the store out of the way. fallback reports that the caller must decide by
// FailMode instead. A request whose own context is done gets its error:
// it is refused, never failed over, and says nothing about the store.
func (t *Toll) onStore(ctx context.Context, call func(context.Context) error) (fallback bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	interval := t.probeInterval()
	if !t.lim.allow(time.Now(), interval) {
		t.lim.fallbacks.Add(1)
		return true, nil
	}
	sctx, cancel := context.WithTimeout(ctx, t.timeout())
	err = call(sctx)
	cancel()
	switch {
	case err == nil:
		t.lim.succeeded(ctx, t.logger(), time.Now())
		return false, nil
	case ctx.Err() != nil:
		return false, err
	case errors.Is(err, throttle.ErrInvalidCost), errors.Is(err, throttle.ErrCostExceedsCapacity):
		return false, err // a bug in the caller, not a failing store
	}
	t.lim.failed(ctx, t.logger(), time.Now(), interval, err, t.FailMode)
	t.lim.fallbacks.Add(1)
	return true, nil
}

// errStoreFailing marks the refusals of fail_mode closed.
var errStoreFailing = errors.New("the budget store is failing (fail_mode closed)")

// errStoreDown is what fail_mode closed answers while the store fails.
func (t *Toll) errStoreDown() error {
	return fmt.Errorf("%w: %s", errStoreFailing, t.lim.health().Err)
}

// DegradedError is a readiness result that is not a failure: the dependency
// is down but the process still serves, differently. /readyz reports it as
// "degraded: …" and stays 200.
type DegradedError struct{ Detail string }

func (e *DegradedError) Error() string { return "degraded: " + e.Detail }

// ReadyNote is a readiness result that passes with a detail: /readyz
// reports it as "ok: …".
type ReadyNote struct{ Detail string }

func (n *ReadyNote) Error() string { return "ok: " + n.Detail }

// ReadyCheck is the readiness check of the budget store: ping is a round
// trip to it. With fail_mode local or open a failing store leaves the
// process ready (200, "degraded: using local buckets …"); with closed it is
// not ready. It runs in the background (Readiness), never on behalf of a
// /readyz caller.
func (t *Toll) ReadyCheck(ping Check) Check {
	return func(ctx context.Context) error {
		perr := ping(ctx)
		h := t.LimiterHealth()
		if perr == nil && h.Degraded && t.FailMode == FailClosed {
			// The store answers pings again. With fail_mode closed this
			// instance is unready, so its load balancer sends it no request
			// that could probe the store: end degraded mode here — in the
			// background checker, at most once per ready interval. (With
			// local or open, requests keep coming and probe the store for
			// real — a PING passes where a spend can still fail, e.g. when
			// Redis is out of memory.)
			t.lim.succeeded(ctx, t.logger(), time.Now())
			return nil
		}
		if perr == nil && !h.Degraded {
			return nil
		}
		cause := h.Err
		if perr != nil {
			cause = perr.Error()
		}
		if !h.Since.IsZero() && h.Degraded {
			cause = fmt.Sprintf("since %s: %s", h.Since.UTC().Format(time.RFC3339), cause)
		}
		if t.FailMode == FailClosed {
			return fmt.Errorf("%s (%s)", FailClosed.doing(), cause)
		}
		return &DegradedError{Detail: fmt.Sprintf("%s (%s)", t.FailMode.doing(), cause)}
	}
}

// WatchLimiter exports the budget store's health: geotoll_limiter_degraded
// (1 while the store fails), geotoll_limiter_store_errors_total and
// geotoll_limiter_fallbacks_total (decisions made by fail_mode).
func WatchLimiter(reg prometheus.Registerer, t *Toll) error {
	mode := prometheus.Labels{"fail_mode": string(t.FailMode)}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_limiter_degraded", ConstLabels: mode,
			Help: "1 while the budget store (Redis) fails and budgets follow fail_mode, else 0.",
		}, func() float64 {
			if t.LimiterHealth().Degraded {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_store_errors_total",
			Help: "Budget store calls that failed (error or timeout) and were decided by fail_mode.",
		}, func() float64 { return float64(t.lim.storeErrors.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_fallbacks_total", ConstLabels: mode,
			Help: "Budget decisions made without the store, by fail_mode.",
		}, func() float64 { return float64(t.lim.fallbacks.Load()) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
