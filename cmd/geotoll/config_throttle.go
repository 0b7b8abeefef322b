package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/toll"
)

// TierConfig is a bucket shape.
type TierConfig struct {
	Rate     float64 `yaml:"rate"`     // tokens per second
	Capacity float64 `yaml:"capacity"` // bucket size
	// MaxCost, when positive, refuses (422) any single request dearer than
	// this in the tier. It is finite and not below the least base price of
	// the weights (validateTierCosts): none would pass it.
	MaxCost float64 `yaml:"max_cost"`
	// Shadow prices and records requests but never refuses them.
	Shadow bool `yaml:"shadow"`
	// MaxInFlight caps a caller's concurrent requests; 0 means
	// throttle.DefaultMaxInFlight, which bounds what Redis holds for one
	// caller.
	MaxInFlight int `yaml:"max_in_flight"`
}

func (t TierConfig) limit() throttle.Limit {
	return throttle.Limit{Rate: t.Rate, Capacity: t.Capacity}
}

// BucketConfig is a bucket shape without a tier's other settings.
type BucketConfig struct {
	Rate     float64 `yaml:"rate"`     // tokens per second
	Capacity float64 `yaml:"capacity"` // bucket size
}

func (b BucketConfig) limit() throttle.Limit {
	return throttle.Limit{Rate: b.Rate, Capacity: b.Capacity}
}

// AggregateConfig is the IPv6 network bucket: its prefix length and shape.
type AggregateConfig struct {
	Prefix   int     `yaml:"prefix"`
	Rate     float64 `yaml:"rate"`
	Capacity float64 `yaml:"capacity"`
}

// TarpitConfig configures toll.Tarpit.
type TarpitConfig struct {
	MaxHold time.Duration `yaml:"max_hold"`
	MaxHeld int64         `yaml:"max_held"`
}

// validate: a hold ends well before the request's deadline.
func (t TarpitConfig) validate(requestTimeout time.Duration) error {
	if t.MaxHold < 0 || t.MaxHold > requestTimeout/2 || (t.MaxHold > 0 && t.MaxHeld < 1) {
		return fmt.Errorf("throttle.tarpit: max_hold %s must be 0 (off) or at most half http.request_timeout (%s), and max_held (%d) at least 1",
			t.MaxHold, requestTimeout, t.MaxHeld)
	}
	return nil
}

// validateLimits refuses the values that would turn a limit off without
// saying so: only rate 0 turns the IPv6 aggregate or the global budget
// off, only 0 leaves a tier without max_cost, and only 0 gives it the
// store's own in-flight cap.
func (t ThrottleConfig) validateLimits() []error {
	var errs []error
	if a := t.IPv6Aggregate; !(a.Rate >= 0) || a.Rate > 0 && (a.Prefix < 16 || a.Prefix > 63) {
		errs = append(errs, fmt.Errorf("throttle.ipv6_aggregate: rate %g must be 0 (off) or positive, and with a rate the prefix (%d) within 16..63", a.Rate, a.Prefix))
	}
	if r := t.Global.Rate; !(r >= 0) {
		errs = append(errs, fmt.Errorf("throttle.global.rate %g must be 0 (off) or positive", r))
	}
	for _, name := range slices.Sorted(maps.Keys(t.Tiers)) {
		tc := t.Tiers[name]
		if !(tc.MaxCost >= 0) || math.IsInf(tc.MaxCost, 1) {
			errs = append(errs, fmt.Errorf("throttle.tiers.%s.max_cost %g must be 0 (none) or positive and finite", name, tc.MaxCost))
		}
		if tc.MaxInFlight < 0 {
			errs = append(errs, fmt.Errorf("throttle.tiers.%s.max_in_flight %d must be 0 (the default cap, %d) or positive", name, tc.MaxInFlight, throttle.DefaultMaxInFlight))
		}
	}
	return errs
}

// WeightsConfig overrides cost weights; unset fields inherit.
type WeightsConfig struct {
	Base          *float64 `yaml:"base,omitempty"`
	AreaWeight    *float64 `yaml:"area_weight,omitempty"`
	RadiusWeight  *float64 `yaml:"radius_weight,omitempty"`
	FeatureWeight *float64 `yaml:"feature_weight,omitempty"`
	PointWeight   *float64 `yaml:"point_weight,omitempty"`
	MaxCost       *float64 `yaml:"max_cost,omitempty"`
	// The work model: database time in ms per query, per feature read and
	// per vertex read (fitted by `geotoll calibrate`).
	QueryMS   *float64 `yaml:"query_ms,omitempty"`
	FeatureMS *float64 `yaml:"feature_ms,omitempty"`
	VertexMS  *float64 `yaml:"vertex_ms,omitempty"`
}

// defaultWeights is throttle.DefaultWeights as configuration.
func defaultWeights() WeightsConfig {
	w := throttle.DefaultWeights()
	return WeightsConfig{Base: &w.Base, AreaWeight: &w.AreaWeight, RadiusWeight: &w.RadiusWeight,
		FeatureWeight: &w.FeatureWeight, PointWeight: &w.PointWeight, MaxCost: &w.MaxCost,
		QueryMS: &w.Work.QueryMS, FeatureMS: &w.Work.FeatureMS, VertexMS: &w.Work.VertexMS}
}

// apply returns base with w's set fields.
func (w *WeightsConfig) apply(base throttle.Weights) throttle.Weights {
	if w == nil {
		return base
	}
	set := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&base.Base, w.Base)
	set(&base.AreaWeight, w.AreaWeight)
	set(&base.RadiusWeight, w.RadiusWeight)
	set(&base.FeatureWeight, w.FeatureWeight)
	set(&base.PointWeight, w.PointWeight)
	set(&base.MaxCost, w.MaxCost)
	set(&base.Work.QueryMS, w.QueryMS)
	set(&base.Work.FeatureMS, w.FeatureMS)
	set(&base.Work.VertexMS, w.VertexMS)
	return base
}

// ThrottleConfig prices requests and shapes buckets.
type ThrottleConfig struct {
	Prefix string `yaml:"prefix"`
	// Tiers by name. "anonymous" (callers without a key, per client IP) is
	// required; API keys name their tier.
	Tiers TierMap `yaml:"tiers"`
	// FailedAuth buckets unknown or revoked keys per client IP (1 token each).
	FailedAuth BucketConfig  `yaml:"failed_auth"`
	Weights    WeightsConfig `yaml:"weights"` // defaults for every layer
	// Global, when its rate is positive, is one bucket shared by all
	// callers, sized to what the database sustains (tokens per second and
	// burst). A request must pass its own bucket and this one.
	Global BucketConfig `yaml:"global"`
	// IPv6Aggregate is the bucket every anonymous IPv6 caller's network
	// (its /prefix) pays besides the caller's own /64; rate 0 turns it off.
	IPv6Aggregate AggregateConfig `yaml:"ipv6_aggregate"`
	// Tarpit holds a refusal by the caller's bucket up to max_hold (the
	// time the bucket needs to pay, at most), max_held at once: a client
	// that asks again at once is refused once per hold and connection, not
	// as fast as the server can answer. 0s turns it off.
	Tarpit TarpitConfig `yaml:"tarpit"`
	// KeyRefresh is how often the API keys are reloaded from the database:
	// the longest a revoked key keeps working.
	KeyRefresh time.Duration `yaml:"key_refresh"`
	// KeyMaxAge is how old the loaded keys may get (the reloads failing all
	// that time) before admin keys are refused.
	KeyMaxAge time.Duration `yaml:"key_max_age"`
	// MsPerToken is the unit of every price: one token is this much
	// database time, in milliseconds. Requests settle at the time they took.
	MsPerToken float64 `yaml:"ms_per_token"`
	// TimeoutFactor and TimeoutFloor bound a request's statements, all
	// together, at max(floor, factor × the database time it paid for),
	// each within its layer's statement_timeout.
	TimeoutFactor float64       `yaml:"timeout_factor"`
	TimeoutFloor  time.Duration `yaml:"timeout_floor"`
	// Pricing is "density" (the default: requests are priced by the work
	// the density models estimate they read) or "size" (by their area,
	// radius and points alone: predictable prices that follow no data).
	Pricing string `yaml:"pricing"`
	// SettleFloor: a request measured below this much database time keeps
	// its estimate (the measurement is mostly planning there).
	SettleFloor time.Duration `yaml:"settle_floor"`
	// WeightsFile names the work models `geotoll calibrate` wrote for this
	// database: they replace the defaults of the layers they name (a
	// layer's own weights in this config still win). Empty: the defaults.
	WeightsFile string `yaml:"weights_file"`
}

// toll builds the throttle gate (without its stores and keys).
func (c Config) toll() (*toll.Toll, error) {
	_, weights, err := c.catalog()
	if err != nil {
		return nil, err
	}
	file, err := c.weightsFile()
	if err != nil {
		return nil, err
	}
	proxies, err := forwarded.New(c.HTTP.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("http.trusted_proxies: %w", err)
	}
	if proxies, err = proxies.WithHeader(c.HTTP.ForwardedHeader); err != nil {
		return nil, fmt.Errorf("http.forwarded_header: %w", err)
	}
	t := &toll.Toll{
		Prefix:          c.Throttle.Prefix,
		Tiers:           make(map[string]toll.Tier, len(c.Throttle.Tiers)),
		FailedAuth:      c.Throttle.FailedAuth.limit(),
		Proxies:         proxies,
		LayerWeights:    weights,
		Default:         c.Throttle.Weights.apply(throttle.DefaultWeights()),
		ShadowLayers:    map[string]bool{},
		GeofenceWork:    file.Geofence,
		ContainmentWork: file.Containment,
		MsPerToken:      c.Throttle.MsPerToken, TimeoutFactor: c.Throttle.TimeoutFactor, TimeoutFloor: c.Throttle.TimeoutFloor,
		SettleFloor: c.Throttle.SettleFloor,
	}
	if file.Fences != nil {
		t.FenceWork = *file.Fences
	}
	for name, tc := range c.Throttle.Tiers {
		t.Tiers[name] = toll.Tier{Name: name, Limit: tc.limit(), MaxCost: tc.MaxCost, Shadow: tc.Shadow, MaxInFlight: tc.MaxInFlight}
	}
	if c.Throttle.Global.Rate > 0 {
		g := c.Throttle.Global.limit()
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("throttle.global: %w", err)
		}
		// Its store is the toll's, set when the stores are opened.
		t.Global = &throttle.Global{Bucket: throttle.Bucket{Key: throttle.BucketKey(c.Throttle.Prefix, "global", "database"), Limit: g}}
	}
	// A share as large as the pool leaves the keyed callers one connection
	// (a pool of one has none to spare).
	if n := min(c.Database.AnonymousMaxConns, max(1, c.Database.MaxConns-1)); n > 0 {
		t.AnonymousShare = pgcall.NewShare(int(n))
	}
	if n := c.Database.keyShare(); n > 0 {
		// A key's share is forgotten once idle for longer than a request
		// lives between its admission and its statement.
		t.KeyShares = pgcall.NewShares(int(n), max(time.Minute, 2*c.HTTP.RequestTimeout))
	}
	if tp := c.Throttle.Tarpit; tp.MaxHold > 0 {
		t.Tarpit = &toll.Tarpit{MaxHold: tp.MaxHold, MaxHeld: tp.MaxHeld}
	}
	if a := c.Throttle.IPv6Aggregate; a.Rate > 0 {
		t.IPv6Aggregate = toll.IPv6Aggregate{Bits: a.Prefix, Limit: throttle.Limit{Rate: a.Rate, Capacity: a.Capacity}}
	}
	// A request holds its slot until its handler returns: at most its
	// deadline, then the wait for its statement to stop.
	t.InFlightTTL = max(c.HTTP.WriteTimeout, c.HTTP.RequestTimeout+c.Database.CancelWait+time.Second)
	// A tile layer's shadow shadows its tiles only (toll.ShadowLayers),
	// not the geofence layer that may share its name.
	for _, l := range c.Layers {
		if l.Shadow {
			t.ShadowLayers[l.Name] = true
		}
	}
	return t, nil
}
