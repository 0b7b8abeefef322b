package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

// chargeShadow decides a request of a shadowed tier or layer whose own
// bucket refused. Shadow mode waives only that bucket: the in-flight cap
// and the global database budget still hold, and an admitted request
// still pays the global budget and holds its slot until it finishes.
//
// The caller's own buckets are the first own spends of the ask (its
// bucket, and its IPv6 network's). The store undid the whole ask when one
// of them refused, so unless the cap or the global budget refused as well,
// the rest of the ask is asked again. Only requests that shadow mode admits
// pay this second round trip.
func (t *Toll) chargeShadow(w http.ResponseWriter, r *http.Request, tier Tier, p Price, ask throttle.Ask, own int, ans throttle.Answer) bool {
	if !ans.SlotRefused && allowed(ans.Results[own:]) {
		rest := throttle.Ask{Spends: ask.Spends[own:], Slot: ask.Slot}
		again := throttle.Answer{Admitted: true}
		var granted throttle.Store
		if len(rest.Spends) > 0 || rest.Slot != nil {
			var err error
			if again, granted, err = t.admit(r.Context(), rest); err != nil {
				t.limiterFailed(w, r, tier, p, err)
				return false
			}
			t.logLostRefund(r, tier, again)
		}
		if again.Admitted {
			if rest.Slot != nil && granted != nil {
				holdSlot(r, t, granted, *rest.Slot)
			}
			t.observe(tier.Name, p, ShadowRefused)
			w.Header().Set("X-RateLimit-Shadow", "would-refuse")
			return true
		}
		ans.SlotRefused, ans.InFlight = again.SlotRefused, again.InFlight
		copy(ans.Results[own:], again.Results)
	}
	t.observe(tier.Name, p, Refused)
	t.writeRefusal(w, r, tier, p, ans, own, true)
	return false
}

// allowed reports whether every one of results was allowed.
func allowed(results []throttle.Result) bool {
	for _, res := range results {
		if !res.Allowed {
			return false
		}
	}
	return true
}

// writeRefusal answers a refused ask: 429 for the caller's own bucket or
// its IPv6 network's (unless shadow mode waived them) or its in-flight cap,
// 503 for the global database budget (which did not charge the caller).
// own is the number of the caller's own spends (see chargeShadow).
func (t *Toll) writeRefusal(w http.ResponseWriter, r *http.Request, tier Tier, p Price, ans throttle.Answer, own int, ownWaived bool) {
	res := ans.Results[0]
	network := own > 1 && !ans.Results[1].Allowed
	switch {
	case !res.Allowed && !ownWaived:
		problem.Write(w, r, exhausted(tier.Name, res))
	case network && !ownWaived:
		problem.Write(w, r, exhausted(t.IPv6Aggregate.policy(tier.Name), ans.Results[1]))
	case ans.SlotRefused:
		problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 1,
			Detail: fmt.Sprintf("%d requests of yours are already in flight, the most tier %q allows; retry when one finishes", ans.InFlight, tier.Name),
			Extra:  map[string]any{"in_flight": ans.InFlight, "max_in_flight": tier.MaxInFlight, "violated-policies": []string{tier.Name + "-concurrency"}}})
	default: // the global database budget refused; the caller was refunded
		g := ans.Results[len(ans.Results)-1]
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, RetryAfter: g.RetryAfterSeconds(),
			Detail: "the database is at its budget for everyone; your own budget was not charged",
			Extra:  map[string]any{"cost": round3(p.Cost), "retry_after": g.RetryAfterSeconds(), "violated-policies": []string{"global"}}})
	}
}

// limiterFailed answers a request whose budget could not be decided: 503.
// A failing store is logged once, when it starts failing (see breaker); a
// client that hung up is routine.
func (t *Toll) limiterFailed(w http.ResponseWriter, r *http.Request, tier Tier, p Price, err error) {
	t.observe(tier.Name, p, LimiterFailure)
	if level := slog.LevelWarn; !errors.Is(err, errStoreFailing) {
		if r.Context().Err() != nil {
			level = slog.LevelDebug
		}
		t.logger().LogAttrs(r.Context(), level, "budget unavailable",
			slog.String("tier", tier.Name), slog.Any("err", err))
	}
	problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
}

// logLostRefund logs a refusal whose refund failed: some bucket stays
// charged for a request that did not run.
func (t *Toll) logLostRefund(r *http.Request, tier Tier, ans throttle.Answer) {
	if ans.RefundErr != nil {
		t.logger().LogAttrs(r.Context(), slog.LevelWarn, "refund after a refusal failed; the caller stays charged",
			slog.String("tier", tier.Name), slog.Any("err", ans.RefundErr))
	}
}
