package toll

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/dryrun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/paulmach/orb/maptile"
)

// Toll prices requests and charges the price to the caller's bucket.
type Toll struct {
	// Store decides admissions: a *throttle.Failover over Redis, or a
	// *throttle.MemoryStore for a single instance.
	Store  throttle.Store
	Prefix string // bucket key prefix, e.g. "geotoll"
	// Tiers by name. AnonymousTier must be present; keys name their tier.
	Tiers map[string]Tier
	// FailedAuth buckets unknown keys per client address (cost 1 each).
	FailedAuth throttle.Limit
	Keys       KeyLookup          // nil: every presented key is unknown
	Proxies    *forwarded.Trusted // trusted reverse proxies
	// LayerWeights prices a tile layer; tile layers without an entry use
	// Default. Tile layers only: a geofence layer is priced with Default
	// (and its GeofenceWork), even where it shares a tile layer's name —
	// the demo's places and districts are both — since the two run
	// different queries, and a tile layer's settings must not reprice, or
	// cap, another route.
	LayerWeights map[string]throttle.Weights
	Default      throttle.Weights
	// Estimator estimates what a request reads (features, vertices), from
	// density models kept in memory; a request without an estimate (no
	// Estimator, or its model not built yet) is priced by its size.
	Estimator Estimator
	// GeofenceWork is the work model of within and bbox queries by
	// geofence layer, and FenceWork that of contains and check; a layer
	// without an entry, and a zero FenceWork, take the defaults
	// (DefaultGeofenceWork, DefaultFenceWork). A tile layer's is its
	// weights' Work.
	GeofenceWork map[string]throttle.WorkModel
	FenceWork    throttle.WorkModel
	// ContainmentWork is the work model of contains and check on a
	// polygon layer (?layer=), by geofence layer; a layer without an
	// entry takes the fences' (FenceWork, else DefaultFenceWork).
	ContainmentWork map[string]throttle.WorkModel
	// IPv6Aggregate, when on, is the bucket an anonymous IPv6 caller's
	// whole network pays besides its own /64.
	IPv6Aggregate IPv6Aggregate
	// Global, when set, is one budget shared by every caller, sized to
	// what the database sustains; a refusal there is a 503 and charges the
	// caller nothing.
	Global *throttle.Global
	// InFlightTTL is how long an unfinished request holds its slot (a
	// crashed process's slots expire): the longest a request can run.
	InFlightTTL time.Duration
	// ShadowLayers are tile layers whose tiles are priced but never
	// refused for an empty bucket. Tile layers only: a geofence query on a
	// geofence layer of the same name is refused like any other.
	ShadowLayers map[string]bool
	// MsPerToken is the unit of every price: one token is this much
	// database time (default 10 ms). A request is settled at the database
	// time it took, in tokens, at least its base price and at most the
	// dearest price it could have had (its weights' MaxCost per query: each
	// tile layer's own), within what its tier lets one request cost.
	MsPerToken float64
	// SettleFloor (default 5 ms): a request whose database time stays
	// below it keeps its estimate. Below a few milliseconds the time
	// PostgreSQL clocks is mostly planning — a statement's first plans on
	// a connection, 1-5 ms for a tile query — not what the request reads,
	// and the density model ranks such requests better (BENCHMARKS.md,
	// "Cost fidelity"). What this leaves unsettled is under 0.5 token a
	// request.
	SettleFloor time.Duration
	// TimeoutFactor and TimeoutFloor (defaults 4 and 250 ms): the
	// statements of each of a request's calls, all together, run under at
	// most max(TimeoutFloor, min(TimeoutFactor × the database time it paid
	// for, the time the most it may be charged pays for)) — each within
	// its layer's statement_timeout — so one whose price was far too low
	// is cut near what it paid for, and none is given more time than it
	// can be charged for but TimeoutFloor.
	TimeoutFactor float64
	TimeoutFloor  time.Duration
	// AnonymousShare, when set, is the share of the database pool the
	// anonymous callers' statements use, all of them together: each has a
	// bucket of its own, and a crawl from many addresses adds them up.
	AnonymousShare *pgcall.Share
	// KeyShares, when set, gives every other caller (an API key) a share
	// of the pool of its own, so that no one key holds every connection.
	KeyShares *pgcall.Shares
	// Tarpit, when set, holds the bucket's refusals before answering them.
	Tarpit   *Tarpit
	Observer Observer
	Logger   *slog.Logger
	// Tracer, when set, makes every charge a span ("toll.charge"), the
	// parent of the budget store's call.
	Tracer trace.Tracer

	// unknownTiers holds, by key name, when a key naming an unconfigured
	// tier was last logged (see tier).
	unknownTiers sync.Map
}

// unknownTierLogEvery is how often a key that names an unconfigured tier
// is logged: each of its requests is refused, free of charge, and one log
// line per request would let its holder flood the log.
const unknownTierLogEvery = time.Minute

// DefaultGeofenceWork and DefaultFenceWork are the work models of geofence
// queries that no calibration replaced, fitted as throttle.DefaultWeights'
// Work was: within and bbox on 1M points (3 µs a point) and on country
// polygons (0.1 µs a vertex); contains and check on 300 fences of about 25
// vertices (0.3 µs a vertex of a candidate fence).
var (
	DefaultGeofenceWork = throttle.WorkModel{QueryMS: 0.3, FeatureMS: 0.003, VertexMS: 0.0001}
	DefaultFenceWork    = throttle.WorkModel{QueryMS: 0.1, FeatureMS: 0.001, VertexMS: 0.0003}
)

// Defaults of Toll's settlement.
const (
	DefaultMsPerToken    = 10.0
	DefaultTimeoutFactor = 4.0
	DefaultTimeoutFloor  = 250 * time.Millisecond
	DefaultSettleFloor   = 5 * time.Millisecond
)

// Estimator estimates, in memory and without a call, what a request will
// read; ok is false while it cannot tell. *pricing.Estimator is the
// production one.
type Estimator interface {
	Tile(l *tiles.Layer, t maptile.Tile) (density.Estimate, bool)
	Geofence(d geofence.Demand) (density.Estimate, bool)
}

// Outcome of one charge, for metrics.
type Outcome string

// Outcomes.
const (
	Admitted       Outcome = "admitted"
	Refused        Outcome = "refused"         // 429
	ShadowRefused  Outcome = "shadow-refused"  // would have been 429; admitted in shadow mode
	Unauthorized   Outcome = "unauthorized"    // unknown key: 401 (once its IP's failed-auth bucket is dry, its 429 is Refused)
	KeysUnread     Outcome = "keys-unread"     // a key presented before the API keys were ever read: 503 (charged as an unknown key)
	DryRun         Outcome = "dry-run"         // priced, not charged
	TooExpensive   Outcome = "too-expensive"   // above the tier's max cost: 422
	LimiterFailure Outcome = "limiter-failure" // the store failed and the fail mode refused
	GlobalRefused  Outcome = "global-refused"  // the global database budget refused: 503
)

// Observer learns every priced request and every settlement; server's
// metrics implement it.
type Observer interface {
	Priced(tier string, p Price, o Outcome)
	// Settled reports an admitted request's cost once it has run.
	Settled(tier string, p Price, cost float64)
}

// MaxCost is the largest price any request can have.
func (t *Toll) MaxCost() float64 {
	m := t.Default.MaxCost
	for _, w := range t.LayerWeights {
		m = max(m, w.MaxCost)
	}
	return m
}

// Validate checks that every price can be paid: each tier's capacity must be
// above the most a request may cost in it, or that request could never be
// admitted.
func (t *Toll) Validate() error {
	var errs []error
	if t.Store == nil {
		errs = append(errs, errors.New("no budget store"))
	}
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
		errs = append(errs, t.validateTier(name, t.Tiers[name], maxCost)...)
	}
	if g := t.Global; g != nil && g.Bucket.Limit.Capacity <= maxCost {
		errs = append(errs, fmt.Errorf("global budget: capacity %g must be above the largest price %g", g.Bucket.Limit.Capacity, maxCost))
	}
	if err := t.IPv6Aggregate.validate(maxCost); err != nil {
		errs = append(errs, err)
	}
	if err := t.FailedAuth.Validate(); err != nil || t.FailedAuth.Capacity < 1 {
		errs = append(errs, fmt.Errorf("failed-auth limit: capacity must be at least 1 (%v)", err))
	}
	return errors.Join(errs...)
}

// tileWeights are a tile layer's weights (LayerWeights, else Default).
func (t *Toll) tileWeights(layer string) throttle.Weights {
	if w, ok := t.LayerWeights[layer]; ok {
		return w
	}
	return t.Default
}

// shadowed reports whether every one of a tile price's layers is in
// shadow mode: adding a shadowed layer to a composite must not lift the
// limit on the others. ShadowLayers names tile layers, so a price of
// another route is never shadowed by them, whatever its Layer: a geofence
// layer often has a tile layer's name.
func (t *Toll) shadowed(p Price) bool {
	if p.Route != routeTile || p.Layer == "" {
		return false
	}
	for l := range strings.SplitSeq(p.Layer, ",") {
		if !t.ShadowLayers[l] {
			return false
		}
	}
	return true
}

// Charge identifies the caller, charges p.Cost to its bucket and sets the
// budget headers. When it returns nil it has written the response: 400
// for a dry_run it cannot read (see dryrun.Parse), 401 for an unknown key,
// 422 above the tier's max cost, 429 for an empty budget or a full
// in-flight cap, 503 when the global budget refused or the limiter
// failed, or the price preview of ?dry_run=1. An admitted
// request's Pass is also in its context, for Finish to settle.
func (t *Toll) Charge(w http.ResponseWriter, r *http.Request, p Price) *Pass {
	ctx := r.Context()
	if t.Tracer != nil {
		var span trace.Span
		ctx, span = t.Tracer.Start(ctx, "toll.charge", trace.WithAttributes(
			attribute.String("geotoll.route", p.Route), attribute.Float64("geotoll.cost", p.Cost)))
		defer span.End()
	}
	dry, err := dryrun.Parse(r) // bad input costs nothing, not even a failed-auth token
	if err != nil {
		problem.Write(w, r, err)
		return nil
	}
	if keyRepeated(w, r, true) {
		return nil
	}
	caller, ok := t.identify(r)
	if !ok {
		t.refuseKey(w, r, caller, p, unknownKey)
		return nil
	}
	tier, known := t.tier(w, r, caller)
	if !known {
		return nil
	}
	own := throttle.Bucket{Key: caller.bucketKey(t.Prefix), Limit: tier.Limit}
	pol := t.policies(tier, caller.Network != "")
	if most := t.mostPerRequest(tier); p.Cost > most {
		t.tooExpensive(w, r, tier, pol, own, p, most)
		return nil
	}
	var agg *throttle.Bucket
	if caller.Network != "" {
		agg = &throttle.Bucket{Key: throttle.BucketKey(t.Prefix, tier.Name, caller.Network), Limit: t.IPv6Aggregate.Limit}
	}
	if dry {
		t.dryRun(w, r, tier, pol, own, agg, p)
		return nil
	}
	var global float64
	if t.Global != nil && !p.CacheHit { // a cache hit costs the database nothing
		res, ok, err := t.Global.Take(ctx, p.Cost)
		if err != nil {
			t.limiterFailed(w, r, tier, p, err)
			return nil
		}
		if !ok {
			t.globalRefused(w, r, tier, pol, own, p, res)
			return nil
		}
		global = res.Cost // 0 when admitted without a charge (fail_mode open): nothing to give back
	}
	req := throttle.Request{Bucket: own, Cost: p.Cost, Debt: t.mostPerRequest(tier), MaxInFlight: tier.MaxInFlight,
		TTL: t.inFlightTTL(), Shadow: tier.Shadow || t.shadowed(p)}
	req.Aggregate = agg
	a, err := t.Store.Admit(ctx, req)
	if err != nil || !a.Allowed {
		if global > 0 {
			t.Global.Give(global) // it did not run: the lease keeps it
		}
		if err != nil {
			t.limiterFailed(w, r, tier, p, err)
		} else {
			t.refused(w, r, tier, pol, refusing(a, own, agg), p, a)
		}
		return nil
	}
	setBudgetHeaders(w.Header(), pol, tier, a.Result)
	outcome := Admitted
	if a.Shadow {
		outcome = ShadowRefused
		w.Header().Set("X-RateLimit-Shadow", "would-refuse")
	}
	t.observe(tier.Name, p, outcome)
	if p.Base <= 0 {
		p.Base = t.Default.Base
	}
	pass := &Pass{toll: t, ticket: a.Ticket, tier: tier, res: a.Result, price: p, most: t.settleCap(tier, p),
		global: global, fixed: p.CacheHit || a.Ticket == nil, shadow: a.Shadow, share: t.share(tier, own)}
	hold(r, pass)
	return pass
}

// share is the share of the pool the caller's statements take a slot of:
// the anonymous callers', all together, or the key's own.
func (t *Toll) share(tier Tier, own throttle.Bucket) *pgcall.Share {
	switch {
	case tier.Name == AnonymousTier:
		return t.AnonymousShare // nil: none
	case t.KeyShares != nil:
		return t.KeyShares.Of(own.Key)
	}
	return nil
}

// tier is the caller's tier; a key naming a tier that is not configured
// is answered 403 (nothing charged) and logged — once a minute per key —,
// and known is false.
func (t *Toll) tier(w http.ResponseWriter, r *http.Request, caller Caller) (tier Tier, known bool) {
	tier, known = t.Tiers[caller.Tier]
	if !known {
		now := time.Now()
		if last, seen := t.unknownTiers.Load(caller.KeyName); !seen || now.Sub(last.(time.Time)) >= unknownTierLogEvery {
			t.unknownTiers.Store(caller.KeyName, now)
			t.logger().LogAttrs(r.Context(), slog.LevelError, "API key names an unconfigured tier (logged once a minute per key)",
				slog.String("key", caller.KeyName), slog.String("tier", caller.Tier))
		}
		problem.Write(w, r, &problem.Error{Code: problem.Forbidden, Detail: "this key's tier is not configured"})
	}
	return tier, known
}

// settleCap is the most a request admitted at p settles at: the dearest
// price it could have had (dearest), and never below what it paid, within
// what its tier lets one request cost, the bound admission holds it to.
// So a composite admitted above MaxCost is charged the time it ran, as a
// single layer is.
func (t *Toll) settleCap(tier Tier, p Price) float64 {
	return min(t.mostPerRequest(tier), max(t.dearest(p), p.Cost))
}

// dearest is the dearest price the request of p could have had: for a
// tile, the MaxCost of each of its layers' weights (a composite's layers
// each run one query, each priced up to its own); for any other request,
// the default weights' MaxCost, which prices it.
func (t *Toll) dearest(p Price) float64 {
	if p.Route != routeTile {
		return t.Default.MaxCost
	}
	var sum float64
	for name := range strings.SplitSeq(p.Layer, ",") {
		sum += t.tileWeights(name).MaxCost
	}
	return sum
}

// Settled is what a request that took db of database time costs, in
// tokens: db / MsPerToken, at least base and at most most.
func (t *Toll) Settled(db time.Duration, base, most float64) float64 {
	return min(max(float64(db)/float64(time.Millisecond)/t.msPerToken(), base), most)
}

// Charged is what a request priced estimate, which took db of database
// time, is charged: its estimate under SettleFloor (there the time is
// mostly planning, not what it read), else Settled.
func (t *Toll) Charged(estimate float64, db time.Duration, base, most float64) float64 {
	if db < cmp.Or(t.SettleFloor, DefaultSettleFloor) {
		return estimate
	}
	return t.Settled(db, base, most)
}

// StatementBudget is the database time a request of price, which may be
// charged at most most tokens, may take: the time it paid for, times
// TimeoutFactor, but no more than the time most pays for — past it the
// request would run uncharged — and at least TimeoutFloor.
func (t *Toll) StatementBudget(price, most float64) time.Duration {
	factor, floor := t.TimeoutFactor, t.TimeoutFloor
	if factor <= 0 {
		factor = DefaultTimeoutFactor
	}
	if floor <= 0 {
		floor = DefaultTimeoutFloor
	}
	ns := min(price*factor, most) * t.msPerToken() * float64(time.Millisecond)
	if ns >= math.MaxInt64 { // a conversion past it would wrap
		return time.Duration(math.MaxInt64)
	}
	return max(floor, time.Duration(ns))
}

func (t *Toll) msPerToken() float64 {
	if t.MsPerToken > 0 {
		return t.MsPerToken
	}
	return DefaultMsPerToken
}

// settled reports a request's settled cost to the Observer.
func (t *Toll) settled(p *Pass, cost float64) {
	if t.Observer != nil && !p.fixed && !p.shadow {
		t.Observer.Settled(p.tier.Name, p.price, cost)
	}
}

func (t *Toll) inFlightTTL() time.Duration {
	if t.InFlightTTL > 0 {
		return t.InFlightTTL
	}
	return time.Minute
}

func (t *Toll) observe(tier string, p Price, o Outcome) {
	if t.Observer != nil {
		t.Observer.Priced(tier, p, o)
	}
}

func (t *Toll) logger() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.Default()
}
