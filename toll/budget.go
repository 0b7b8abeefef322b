package toll

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

func isDryRun(r *http.Request) bool {
	switch r.URL.Query().Get("dry_run") {
	case "1", "true":
		return true
	}
	return false
}

// peek charges the caller's bucket (and an anonymous IPv6 caller's
// network's) the base price for looking at it, as a cache hit pays, and
// returns the bucket after the charge. A bucket that cannot pay even that
// is returned as it stands, refused: the Failover then answers the same
// caller in process, without a Redis call, until its bucket could pay
// again — so that /budget and dry runs, which each cost a Redis call, are
// bounded like every other request.
func (t *Toll) peek(ctx context.Context, caller Caller, tier Tier) (res throttle.Result, refused bool, err error) {
	cost := t.Default.Base
	if cost <= 0 {
		cost = throttle.DefaultWeights().Base
	}
	req := throttle.Request{Bucket: throttle.Bucket{Key: caller.bucketKey(t.Prefix), Limit: tier.Limit}, Cost: cost,
		MaxInFlight: math.MaxInt32, TTL: time.Second} // holds no slot: released at once
	if caller.Network != "" {
		req.Aggregate = &throttle.Bucket{Key: throttle.BucketKey(t.Prefix, tier.Name, caller.Network), Limit: t.IPv6Aggregate.Limit}
	}
	a, err := t.Store.Admit(ctx, req)
	if err != nil {
		return throttle.Result{}, false, err
	}
	a.Ticket.Release()
	res = a.Result
	if a.Refusal == throttle.RefusedAggregate {
		// The network cannot pay; the caller's own bucket is what it asked about.
		res = throttle.Result{Remaining: 0, Limit: tier.Limit, ResetAfter: a.Result.ResetAfter}
	}
	return res, !a.Allowed, nil
}

// dryRun answers ?dry_run=1: the price and the budget, the query not run
// and the price not charged (the look at the budget pays the base price,
// see peek).
func (t *Toll) dryRun(w http.ResponseWriter, r *http.Request, tier Tier, pol string, caller Caller, p Price) {
	res, _, err := t.peek(r.Context(), caller, tier)
	if err != nil {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return
	}
	t.observe(tier.Name, p, DryRun)
	res.Cost = p.Cost
	setBudgetHeaders(w.Header(), pol, tier, res)
	allowed := res.Remaining >= p.Cost
	retry := 0
	if !allowed {
		retry = int(math.Ceil((p.Cost - res.Remaining) / tier.Limit.Rate))
	}
	w.Header().Set("Cache-Control", "no-store") // one caller's budget, at one moment
	writeJSON(w, http.StatusOK, map[string]any{
		"dry_run":     true,
		"tier":        tier.Name,
		"cost":        round3(p.Cost),
		"remaining":   round3(res.Remaining),
		"would_allow": allowed,
		"retry_after": retry,
	})
}

// ServeBudget answers GET /budget: the caller's own budget. Looking pays
// the base price (see peek); an unknown key costs its IP a failed-auth
// token.
func (t *Toll) ServeBudget(w http.ResponseWriter, r *http.Request) {
	caller, ok := t.identify(r)
	if !ok {
		t.refuseKey(w, r, caller, Price{Route: "budget", Zoom: -1})
		return
	}
	tier, known := t.Tiers[caller.Tier]
	if !known {
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this key's tier is not configured"})
		return
	}
	res, _, err := t.peek(r.Context(), caller, tier)
	if err != nil {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return
	}
	body := map[string]any{
		"tier":          tier.Name,
		"capacity":      tier.Limit.Capacity,
		"rate":          tier.Limit.Rate,
		"remaining":     round3(res.Remaining),
		"reset_after":   res.ResetSeconds(),
		"shadow":        tier.Shadow,
		"max_cost":      t.MaxCost(),
		"authenticated": caller.KeyName != "",
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
