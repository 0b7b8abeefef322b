package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geotoll/geotoll/throttle"
)

// DegradedError is a readiness result that is not a failure: the dependency
// is down but the process still serves, differently. /readyz reports it as
// "degraded: …" and stays 200.
type DegradedError struct{ Detail string }

func (e *DegradedError) Error() string { return "degraded: " + e.Detail }

// ReadyNote is a readiness result that passes with a detail: /readyz
// reports it as "ok: …".
type ReadyNote struct{ Detail string }

func (n *ReadyNote) Error() string { return "ok: " + n.Detail }

// LimiterCheck is the readiness check of the budget store, which begins
// and ends degraded mode when no request does: ping is a round
// trip to it that fails where a spend would (geotoll serve's runs a script
// that may write: Redis out of memory or paused for writes refuses it
// where it answers PING). With fail_mode local or open a failing store leaves the
// process ready (200, "degraded: using local buckets …"); with closed it is
// not ready. It runs in the background (Readiness), never on behalf of a
// /readyz caller.
func LimiterCheck(f *throttle.Failover, ping Check) Check {
	return func(ctx context.Context) error {
		perr := ping(ctx)
		h := f.Health()
		if perr == nil && h.Degraded {
			// The store answers pings again: end degraded mode here — in
			// the background checker, at most once per ready interval, on
			// a ping that fails where a spend would (every master of a
			// cluster) — without waiting for a request to probe it. With
			// fail_mode closed this instance is unready, so its load
			// balancer sends it none; with local or open an idle replica
			// gets none either, and its geotoll_limiter_degraded would say
			// 1, firing the alerts, on a healthy store.
			f.Recovered(ctx)
			return nil
		}
		if perr == nil && !h.Degraded {
			return nil
		}
		if perr != nil && !h.Degraded && !errors.Is(ctx.Err(), context.Canceled) {
			// The store fails with no request to find it out (down as the
			// process starts, or while none comes): degraded mode begins
			// here, as at a request's failed call, so that
			// geotoll_limiter_degraded and its alerts say so — a probe cut
			// by the round's deadline (a store that answers nothing)
			// included; a check cancelled (the process stopping) says
			// nothing of the store.
			f.Unreachable(ctx, perr)
			h = f.Health()
		}
		cause := h.Err
		if perr != nil {
			cause = perr.Error()
		}
		if !h.Since.IsZero() && h.Degraded {
			cause = fmt.Sprintf("since %s: %s", h.Since.UTC().Format(time.RFC3339), cause)
		}
		if h.Mode == throttle.FailClosed {
			return fmt.Errorf("%s (%s)", f.Doing(), cause)
		}
		return &DegradedError{Detail: fmt.Sprintf("%s (%s)", f.Doing(), cause)}
	}
}

// WatchLimiter exports the budget store's health: geotoll_limiter_degraded
// (1 while the store fails), geotoll_limiter_store_errors_total,
// geotoll_limiter_fallbacks_total (decisions made by fail_mode) and
// geotoll_limiter_free_refusals_total (refusals decided in process),
// geotoll_limiter_free_peeks_total (budget reads answered in process) and
// geotoll_limiter_local_spending_carried_tokens_total (what callers spent
// from local buckets, handed to the store's settlements after an outage).
func WatchLimiter(reg prometheus.Registerer, f *throttle.Failover) error {
	mode := prometheus.Labels{"fail_mode": string(f.Mode)}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "geotoll_limiter_degraded", ConstLabels: mode,
			Help: "1 while the budget store (Redis) fails and budgets follow fail_mode (local, open or closed), else 0.",
		}, func() float64 {
			if f.Health().Degraded {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_store_errors_total",
			Help: "Budget store calls that failed (error or timeout) and were decided by fail_mode, and background probes of the store that failed while it was not yet degraded.",
		}, func() float64 { return float64(f.Health().StoreErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_fallbacks_total", ConstLabels: mode,
			Help: "Budget decisions made without the store, by fail_mode (local, open or closed).",
		}, func() float64 { return float64(f.Health().Fallbacks) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_free_refusals_total",
			Help: "Requests refused in process, without a store call, because the store had refused their caller and its bucket still could not pay.",
		}, func() float64 { return float64(f.FreeRefusals()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_free_peeks_total",
			Help: "Budget reads (/budget, dry runs, the budget headers of a 422 or of the global budget's 503) answered in process, from what the store said of the caller's bucket within the last redis.peek_reuse.",
		}, func() float64 { return float64(f.FreePeeks()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "geotoll_limiter_local_spending_carried_tokens_total",
			Help: "Tokens callers spent from their local buckets (fail_mode local) beyond what those refilled, handed to the settlement of each caller's first request the store admitted after the outage, which charges them there (no lower than the bucket's debt floor, as any settlement).",
		}, f.LocalSpendingCarried),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
