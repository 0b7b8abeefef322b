package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// FailMode says what Toll does when its Store (Redis) fails.
type FailMode string

// Fail modes.
const (
	FailOpen   FailMode = "open"   // admit without charging
	FailClosed FailMode = "closed" // refuse with 503
	FailLocal  FailMode = "local"  // charge an in-process bucket at rate / replicas
)

// Tier is a named bucket shape.
type Tier struct {
	Name  string
	Limit throttle.Limit
	// MaxCost, when positive, is the most one request may cost in this
	// tier; a dearer one is refused with 422 before anything is spent.
	MaxCost float64
	// Shadow prices and records but never refuses (see Observer).
	Shadow bool
	// MaxInFlight, when positive, caps a caller's concurrent requests
	// (Stripe's concurrent-requests limiter); one more gets 429.
	MaxInFlight int
}

// Outcome of one charge, for metrics.
type Outcome string

// Outcomes.
const (
	Admitted       Outcome = "admitted"
	Refused        Outcome = "refused"         // 429
	ShadowRefused  Outcome = "shadow-refused"  // would have been 429; admitted in shadow mode
	Unauthorized   Outcome = "unauthorized"    // unknown key: 401 (or 429 once its IP's failed-auth bucket is dry)
	DryRun         Outcome = "dry-run"         // priced, not charged
	TooExpensive   Outcome = "too-expensive"   // above the tier's max cost: 422
	LimiterFailure Outcome = "limiter-failure" // the store failed and fail_mode refused
)

// Observer learns every priced request; server's metrics implement it.
type Observer interface {
	Priced(tier string, p Price, o Outcome)
}

// Price is what one request costs and what it is for.
type Price struct {
	Cost  float64
	Route string // "tile", "within", "bbox", "contains", "check"
	Layer string // layer name(s), "" when none
	Zoom  int    // tile zoom, -1 when not a tile
	// CacheHit: served without database work, so the global database
	// budget is not spent.
	CacheHit bool
}

// Toll prices requests and spends the price from the caller's bucket. It is
// the Gate of the tiles and geofence handlers.
type Toll struct {
	Store  throttle.Store
	Prefix string // bucket key prefix, e.g. "geotoll"
	// Tiers by name. AnonymousTier must be present; keys name their tier.
	Tiers map[string]Tier
	// FailedAuth buckets unknown keys per client IP (cost 1 each).
	FailedAuth throttle.Limit
	Keys       KeyLookup // nil: every presented key is unknown
	Proxies    Proxies   // trusted reverse proxies for X-Forwarded-For
	// LayerWeights prices a layer; layers without an entry use Default.
	LayerWeights map[string]throttle.Weights
	Default      throttle.Weights
	// IPv6Aggregate, when on, is the bucket an anonymous IPv6 caller's
	// whole network pays besides its own /64.
	IPv6Aggregate IPv6Aggregate
	// Global, when set, is one bucket shared by every caller, sized to what
	// the database sustains: a request must pass its own bucket and this one
	// (one Redis round trip); a refusal here is a 503 and refunds the caller.
	Global *throttle.Limit
	// InFlightTTL is how long an unreleased in-flight slot lives (a crashed
	// process's slots expire): the longest a request can run.
	InFlightTTL time.Duration
	// ShadowLayers are layers whose requests are priced but never refused.
	ShadowLayers map[string]bool
	// Timeout bounds one Store call on the hot path (default 50 ms).
	Timeout time.Duration
	// FailMode and Fallback decide what happens when Store fails; Fallback
	// is the in-process store used by FailLocal, charged at rate/Replicas.
	FailMode FailMode
	Fallback throttle.Store
	Replicas int
	// ProbeInterval (default 500 ms): after a Store failure, budget calls
	// follow FailMode without asking Store for this long; then one request
	// probes it. A dead Redis so costs one Timeout per interval, and a
	// recovered one is back in use within one interval (see LimiterHealth).
	ProbeInterval time.Duration
	Observer      Observer
	Logger        *slog.Logger

	lim breaker
}

// MaxCost is the largest price any request can have.
func (t *Toll) MaxCost() float64 {
	m := t.Default.MaxCost
	for _, w := range t.LayerWeights {
		m = max(m, w.MaxCost)
	}
	return m
}

var validTierName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Validate checks that every price can be paid: each tier's capacity must be
// above the most a request may cost in it, or that request could never be
// admitted.
func (t *Toll) Validate() error {
	var errs []error
	if err := t.Default.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("default weights: %w", err))
	}
	for name, w := range t.LayerWeights {
		if err := w.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("layer %q weights: %w", name, err))
		}
	}
	maxCost := t.MaxCost()
	if _, ok := t.Tiers[AnonymousTier]; !ok {
		errs = append(errs, fmt.Errorf("tier %q must be configured", AnonymousTier))
	}
	names := make([]string, 0, len(t.Tiers))
	for name := range t.Tiers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tier := t.Tiers[name]
		if name == FailedAuthTier {
			errs = append(errs, fmt.Errorf("tier name %q is reserved", name))
		}
		if !validTierName.MatchString(name) {
			// Tier names appear in keys, headers (as structured-field
			// strings) and metrics labels.
			errs = append(errs, fmt.Errorf("tier name %q must match %s", name, validTierName))
		}
		if err := tier.Limit.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tier %q: %w", name, err))
			continue
		}
		top := maxCost
		if tier.MaxCost > 0 {
			top = math.Min(top, tier.MaxCost)
		}
		if tier.Limit.Capacity <= top {
			errs = append(errs, fmt.Errorf("tier %q: capacity %g must be above %g, the most one request may cost in it, or that request could never be admitted",
				name, tier.Limit.Capacity, top))
		}
	}
	if err := t.IPv6Aggregate.validate(maxCost); err != nil {
		errs = append(errs, err)
	}
	if t.Global != nil && t.Global.Capacity <= maxCost {
		errs = append(errs, fmt.Errorf("global budget: capacity %g must be above the largest price %g", t.Global.Capacity, maxCost))
	}
	if err := t.FailedAuth.Validate(); err != nil || t.FailedAuth.Capacity < 1 {
		errs = append(errs, fmt.Errorf("failed-auth limit: capacity must be at least 1 (%v)", err))
	}
	switch t.FailMode {
	case FailOpen, FailClosed, FailLocal:
	default:
		errs = append(errs, fmt.Errorf("fail_mode %q must be open, closed or local", t.FailMode))
	}
	if t.FailMode == FailLocal && t.Fallback == nil {
		errs = append(errs, errors.New("fail_mode local needs a fallback store"))
	}
	return errors.Join(errs...)
}

func (t *Toll) weights(layer string) throttle.Weights {
	if w, ok := t.LayerWeights[layer]; ok {
		return w
	}
	return t.Default
}

// TilePrice is the price of a tile demand: the sum of its layers' prices —
// a composite runs one query per layer — or, for a cache hit, the base
// price. A composite dearer than the caller's bucket can hold is refused
// with 422 by Charge (ask for fewer layers).
func (t *Toll) TilePrice(d tiles.Demand) float64 {
	if d.CacheHit { // served from the tile cache: the database does no work
		var base float64
		for _, l := range d.Layers {
			base = max(base, t.weights(l.Name).Base)
		}
		return base
	}
	var sum float64
	for _, l := range d.Layers {
		sum += t.weights(l.Name).Tile(d.Tile)
	}
	return sum
}

// AdmitTile implements tiles.Gate.
func (t *Toll) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	names := make([]string, len(d.Layers))
	for i, l := range d.Layers {
		names[i] = l.Name
	}
	return t.Charge(w, r, Price{Cost: t.TilePrice(d), Route: "tile", Layer: strings.Join(names, ","), Zoom: int(d.Tile.Z), CacheHit: d.CacheHit})
}

// charge spends cost for a request that is not about one layer.
func (t *Toll) charge(w http.ResponseWriter, r *http.Request, cost float64) bool {
	return t.Charge(w, r, Price{Cost: cost, Route: "other", Zoom: -1})
}

// shadowed reports whether every one of a price's layers is in shadow
// mode: adding a shadowed layer to a composite must not lift the limit on
// the others.
func (t *Toll) shadowed(p Price) bool {
	if p.Layer == "" {
		return false
	}
	for _, l := range strings.Split(p.Layer, ",") {
		if !t.ShadowLayers[l] {
			return false
		}
	}
	return true
}

// Charge identifies the caller, spends p.Cost from its bucket and sets the
// budget headers. When it returns false it has written the response: 401
// for an unknown key, 422 above the tier's max cost, 429 for an empty
// budget, 503 when the limiter failed, or the price preview of ?dry_run=1.
func (t *Toll) Charge(w http.ResponseWriter, r *http.Request, p Price) bool {
	caller, ok := t.identify(r)
	if !ok {
		t.refuseKey(w, r, caller, p)
		return false
	}
	tier, known := t.Tiers[caller.Tier]
	if !known {
		t.logger().LogAttrs(r.Context(), slog.LevelError, "API key names an unconfigured tier",
			slog.String("key", caller.KeyName), slog.String("tier", caller.Tier))
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this key's tier is not configured"})
		return false
	}
	key := caller.bucketKey(t.Prefix)
	if most := t.mostPerRequest(tier); p.Cost > most {
		// Never payable in this tier (a composite of many layers, or above
		// the tier's max_cost): 422, nothing spent, with the budget headers.
		t.observe(tier.Name, p, TooExpensive)
		if res, err := t.peek(r.Context(), key, tier.Limit); err == nil {
			res.Cost = p.Cost
			setBudgetHeaders(w.Header(), tier, res)
		}
		problem.Write(w, r, &problem.Error{Code: problem.OutOfRange,
			Detail: fmt.Sprintf("this request costs %s tokens; tier %q allows at most %s per request: zoom in, narrow it or ask for fewer layers",
				fmtTokens(p.Cost), tier.Name, fmtTokens(most)),
			Extra: map[string]any{"cost": round3(p.Cost), "max_cost": round3(most)}})
		return false
	}
	if isDryRun(r) {
		t.dryRun(w, r, tier, key, p)
		return false
	}
	// The caller's own buckets first (its own, and its IPv6 network's),
	// then the global one.
	ask := throttle.Ask{Spends: []throttle.Spend{{Key: key, Limit: tier.Limit, Cost: p.Cost}}}
	if caller.Network != "" {
		ask.Spends = append(ask.Spends, throttle.Spend{Key: throttle.BucketKey(t.Prefix, tier.Name, caller.Network), Limit: t.IPv6Aggregate.Limit, Cost: p.Cost})
	}
	own := len(ask.Spends)
	if t.Global != nil && !p.CacheHit { // a cache hit costs the database nothing
		ask.Spends = append(ask.Spends, throttle.Spend{Key: t.globalKey(), Limit: *t.Global, Cost: p.Cost})
	}
	if tier.MaxInFlight > 0 {
		ask.Slot = &throttle.Slot{Key: throttle.SlotKey(key), ID: slotID(r), Max: tier.MaxInFlight, TTL: t.inFlightTTL()}
	}
	ans, granted, err := t.admit(r.Context(), ask)
	if err != nil {
		t.limiterFailed(w, r, tier, p, err)
		return false
	}
	t.logLostRefund(r, tier, ans)
	res := ans.Results[0]
	setBudgetHeaders(w.Header(), tier, res)
	if ans.Admitted {
		if ask.Slot != nil && granted != nil {
			holdSlot(r, t, granted, *ask.Slot)
		}
		t.observe(tier.Name, p, Admitted)
		return true
	}
	if (tier.Shadow || t.shadowed(p)) && !allowed(ans.Results[:own]) {
		return t.chargeShadow(w, r, tier, p, ask, own, ans)
	}
	t.observe(tier.Name, p, Refused)
	t.writeRefusal(w, r, tier, p, ans, own, false)
	return false
}

// mostPerRequest is the most one request may cost in tier: below its
// capacity (and the global budget's), and its max_cost when set.
func (t *Toll) mostPerRequest(tier Tier) float64 {
	most := tier.Limit.Capacity
	if tier.MaxCost > 0 {
		most = math.Min(most, tier.MaxCost)
	}
	if t.Global != nil {
		most = math.Min(most, t.Global.Capacity)
	}
	if t.IPv6Aggregate.Bits > 0 && tier.Name == AnonymousTier {
		most = math.Min(most, t.IPv6Aggregate.Limit.Capacity)
	}
	return most
}

func (t *Toll) globalKey() string { return throttle.BucketKey(t.Prefix, "global", "database") }

func (t *Toll) inFlightTTL() time.Duration {
	if t.InFlightTTL > 0 {
		return t.InFlightTTL
	}
	return time.Minute
}

// admit runs ask on Store, bounded by Timeout, with FailMode when it fails
// (or the breaker keeps Store out of the way). granted is the store that
// holds the ask's slot, nil when none does (fail_mode open).
func (t *Toll) admit(ctx context.Context, ask throttle.Ask) (ans throttle.Answer, granted throttle.Store, err error) {
	fallback, err := t.onStore(ctx, func(sctx context.Context) (err error) {
		ans, err = t.Store.Admit(sctx, ask)
		return err
	})
	if !fallback {
		return ans, t.Store, err
	}
	switch t.FailMode {
	case FailOpen:
		ans = throttle.Answer{Admitted: true}
		for _, sp := range ask.Spends {
			ans.Results = append(ans.Results, throttle.Result{Allowed: true, Cost: sp.Cost, Remaining: sp.Limit.Capacity, Limit: sp.Limit})
		}
		return ans, nil, nil
	case FailLocal:
		local := ask
		local.Spends = make([]throttle.Spend, len(ask.Spends))
		for i, sp := range ask.Spends {
			sp.Limit = t.localLimit(sp.Limit)
			local.Spends[i] = sp
		}
		ans, err = t.Fallback.Admit(ctx, local)
		return ans, t.Fallback, err
	}
	return throttle.Answer{}, nil, t.errStoreDown()
}

// refuseKey answers an unknown or revoked key: 401, charged 1 token to the
// caller IP's failed-auth bucket; 429 once that bucket is dry.
func (t *Toll) refuseKey(w http.ResponseWriter, r *http.Request, caller Caller, p Price) {
	tier := Tier{Name: FailedAuthTier, Limit: t.FailedAuth}
	res, err := t.spend(r.Context(), caller.bucketKey(t.Prefix), tier.Limit, 1)
	t.observe(FailedAuthTier, p, Unauthorized)
	if err == nil {
		setBudgetHeaders(w.Header(), tier, res)
		if !res.Allowed {
			problem.Write(w, r, exhausted(tier.Name, res))
			return
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="geotoll"`)
	problem.Write(w, r, &problem.Error{Code: problem.Unauthorized, Detail: "unknown or revoked API key"})
}

func exhausted(tier string, res throttle.Result) *problem.Error {
	return &problem.Error{
		Code: problem.Exhausted,
		Detail: fmt.Sprintf("this request costs %s tokens; %s remain. Retry in %d s.",
			fmtTokens(res.Cost), fmtTokens(res.Remaining), res.RetryAfterSeconds()),
		RetryAfter: res.RetryAfterSeconds(),
		Extra: map[string]any{
			"cost":              round3(res.Cost),
			"remaining":         round3(res.Remaining),
			"retry_after":       res.RetryAfterSeconds(),
			"violated-policies": []string{tier},
		},
	}
}

func isDryRun(r *http.Request) bool {
	switch r.URL.Query().Get("dry_run") {
	case "1", "true":
		return true
	}
	return false
}

// dryRun answers ?dry_run=1: the price and the budget, nothing charged and
// nothing queried.
func (t *Toll) dryRun(w http.ResponseWriter, r *http.Request, tier Tier, key string, p Price) {
	res, err := t.peek(r.Context(), key, tier.Limit)
	if err != nil {
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return
	}
	t.observe(tier.Name, p, DryRun)
	res.Cost = p.Cost
	setBudgetHeaders(w.Header(), tier, res)
	allowed := res.Remaining >= p.Cost
	retry := 0
	if !allowed {
		retry = int(math.Ceil((p.Cost - res.Remaining) / tier.Limit.Rate))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"dry_run":     true,
		"tier":        tier.Name,
		"cost":        round3(p.Cost),
		"remaining":   round3(res.Remaining),
		"would_allow": allowed,
		"retry_after": retry,
	})
}

// ServeBudget answers GET /budget: the caller's own budget. It is never
// charged (an unknown key still costs its IP a failed-auth token).
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
	res, err := t.peek(r.Context(), caller.bucketKey(t.Prefix), tier.Limit)
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

func (t *Toll) observe(tier string, p Price, o Outcome) {
	if t.Observer != nil {
		t.Observer.Priced(tier, p, o)
	}
}

func (t *Toll) timeout() time.Duration {
	if t.Timeout <= 0 {
		return 50 * time.Millisecond
	}
	return t.Timeout
}

// spend asks the Store, bounded by Timeout, and applies FailMode when it
// fails. A request whose own context is done is refused, never failed over.
func (t *Toll) spend(ctx context.Context, key string, limit throttle.Limit, cost float64) (res throttle.Result, err error) {
	fallback, err := t.onStore(ctx, func(sctx context.Context) (err error) {
		res, err = t.Store.Spend(sctx, key, limit, cost)
		return err
	})
	if !fallback {
		return res, err
	}
	switch t.FailMode {
	case FailOpen:
		return throttle.Result{Allowed: true, Cost: cost, Remaining: limit.Capacity, Limit: limit}, nil
	case FailLocal:
		return t.Fallback.Spend(ctx, key, t.localLimit(limit), cost)
	}
	return throttle.Result{}, t.errStoreDown()
}

// peek reads a bucket, with the same fallback as spend.
func (t *Toll) peek(ctx context.Context, key string, limit throttle.Limit) (res throttle.Result, err error) {
	fallback, err := t.onStore(ctx, func(sctx context.Context) (err error) {
		res, err = t.Store.Peek(sctx, key, limit)
		return err
	})
	if !fallback {
		return res, err
	}
	switch t.FailMode {
	case FailOpen:
		return throttle.Result{Allowed: true, Remaining: limit.Capacity, Limit: limit}, nil
	case FailLocal:
		return t.Fallback.Peek(ctx, key, t.localLimit(limit))
	}
	return throttle.Result{}, t.errStoreDown()
}

func (t *Toll) localLimit(l throttle.Limit) throttle.Limit {
	if t.Replicas > 1 {
		l.Rate /= float64(t.Replicas)
	}
	return l
}

func (t *Toll) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}

// setBudgetHeaders writes the budget of one priced response:
// draft-ietf-httpapi-ratelimit-headers (RateLimit-Policy, RateLimit), the
// older X-RateLimit-* trio, and X-Request-Cost.
func setBudgetHeaders(h http.Header, tier Tier, res throttle.Result) {
	capacity := int(math.Floor(tier.Limit.Capacity))
	// Round to 1e-4 tokens first: float seconds since 1970 carry ~5e-6
	// tokens of noise (42 arrives as 41.999995).
	remaining := int(math.Floor(math.Round(res.Remaining*1e4) / 1e4))
	window := int(math.Ceil(tier.Limit.FillTime().Seconds()))
	h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", tier.Name, capacity, window))
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", tier.Name, remaining, res.ResetSeconds()))
	h.Set("X-RateLimit-Limit", strconv.Itoa(capacity))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.Itoa(res.ResetSeconds()))
	h.Set("X-Request-Cost", fmtTokens(res.Cost))
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func fmtTokens(v float64) string { return strconv.FormatFloat(round3(v), 'f', -1, 64) }
