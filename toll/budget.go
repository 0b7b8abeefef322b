package toll

import (
	"context"
	"encoding/json"
	"math"
	"net/http"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

// dryRun answers ?dry_run=1: the price and the budget, nothing charged and
// nothing queried. would_allow and retry_after answer as the request
// would be answered: by the global database budget when one is set (its
// 503, unless the request is a cache hit, which it does not pay), its own
// bucket and, for an anonymous IPv6 caller, its network's aggregate (agg,
// else nil) — neither of the last two refuses it when its tier or every
// layer it asks for is in shadow.
func (t *Toll) dryRun(w http.ResponseWriter, r *http.Request, tier Tier, pol string, own throttle.Bucket, agg *throttle.Bucket, p Price) {
	res, err := t.read(r.Context(), tier, own, p.Cost)
	var ares throttle.Result
	if err == nil && agg != nil {
		ares, err = t.read(r.Context(), tier, *agg, p.Cost)
	}
	if err != nil {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return
	}
	t.observe(tier.Name, p, DryRun)
	res.Cost = p.Cost
	setBudgetHeaders(w.Header(), pol, tier, res)
	allowed, retry := true, 0
	wait := func(remaining, rate float64) {
		if remaining < p.Cost {
			allowed = false
			retry = max(retry, int(math.Ceil((p.Cost-remaining)/rate)))
		}
	}
	if !tier.Shadow && !t.shadowed(p) { // a shadow request is never refused for want of tokens
		wait(res.Remaining, rateOf(res, tier.Limit))
		if agg != nil {
			wait(ares.Remaining, rateOf(ares, agg.Limit))
		}
	}
	if t.Global != nil && !p.CacheHit { // shadow or not: the global budget refuses (Toll.Admit)
		g, ok, err := t.Global.Peek(r.Context(), p.Cost)
		if err != nil {
			problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
			return
		}
		if !ok {
			allowed = false
			retry = max(retry, g.RetryAfterSeconds())
		}
	}
	w.Header().Set("Cache-Control", "no-store") // one caller's budget, at one moment
	writeJSON(w, http.StatusOK, map[string]any{
		"dry_run":     true,
		"tier":        tier.Name,
		"cost":        micro(p.Cost),
		"remaining":   micro(res.Remaining),
		"would_allow": allowed,
		"retry_after": retry,
	})
}

// ServeBudget answers GET /budget: the caller's own budget. It is never
// charged (an unknown key still costs its IP a failed-auth token).
func (t *Toll) ServeBudget(w http.ResponseWriter, r *http.Request) {
	if keyRepeated(w, r, true) {
		return
	}
	caller, ok := t.identify(r)
	if !ok {
		t.refuseKey(w, r, caller, Price{Route: "budget", Zoom: -1}, unknownKey)
		return
	}
	tier, known := t.Tiers[caller.Tier]
	if !known {
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this key's tier is not configured"})
		return
	}
	res, err := t.read(r.Context(), tier, throttle.Bucket{Key: caller.bucketKey(t.Prefix), Limit: tier.Limit}, 0)
	if err != nil {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return
	}
	body := map[string]any{
		"tier":        tier.Name,
		"capacity":    tier.Limit.Capacity,
		"rate":        tier.Limit.Rate,
		"remaining":   micro(res.Remaining),
		"reset_after": res.ResetSeconds(),
		"shadow":      tier.Shadow,
		"max_cost":    t.MaxCost(),
		// What a dearer request is refused for (422): the tier's
		// max_cost, or less when its capacity (or a global or aggregate
		// budget's) is — a composite tile prices each layer up to max_cost.
		"max_request_cost": micro(t.mostPerRequest(tier)),
		"authenticated":    caller.KeyName != "",
	}
	if tier.MaxCost > 0 {
		body["max_cost"] = math.Min(tier.MaxCost, t.MaxCost())
	}
	if caller.KeyName != "" {
		body["key"] = caller.KeyName
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
}

// read reads b, a bucket of a caller of tier (its own, or its network's
// aggregate), as the admission of a request of cost (0: any) would find
// it, where the store can tell (throttle.FloorPeeker: a bucket deeper in
// debt than the tier's debt floor is lifted to it, as the admission lifts
// it; a replica's share under fail_mode local holds at least the price),
// else as Peek does: /budget, a preview and the budget headers so say
// what the admission will do, not a wait many times as long (a tier's
// max_cost lowered since its debt was run up).
func (t *Toll) read(ctx context.Context, tier Tier, b throttle.Bucket, cost float64) (throttle.Result, error) {
	if fp, ok := t.Store.(throttle.FloorPeeker); ok {
		return fp.PeekFloor(ctx, b, t.mostPerRequest(tier), cost)
	}
	return t.Store.Peek(ctx, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// rateOf is the rate res's bucket refills at: the store's, which while
// Redis is out with fail_mode local is this replica's share of the
// bucket's (throttle.Failover), else the bucket's own.
func rateOf(res throttle.Result, l throttle.Limit) float64 {
	if res.Limit.Rate > 0 {
		return res.Limit.Rate
	}
	return l.Rate
}
