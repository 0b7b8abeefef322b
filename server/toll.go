package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
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
}

// Toll prices requests and spends the price from the caller's bucket. It is
// the Gate of the tiles (and later geofence) handlers.
type Toll struct {
	Store  throttle.Store
	Prefix string // bucket key prefix, e.g. "geotoll"
	// Anonymous applies to callers without an API key, keyed by client IP;
	// Keyed to callers with one.
	Anonymous, Keyed Tier
	// LayerWeights prices a tile layer; layers without an entry use Default.
	LayerWeights map[string]throttle.Weights
	Default      throttle.Weights
	// Timeout bounds one Store call on the hot path (default 50 ms).
	Timeout time.Duration
	// FailMode and Fallback decide what happens when Store fails; Fallback
	// is the in-process store used by FailLocal, charged at rate/Replicas.
	FailMode FailMode
	Fallback throttle.Store
	Replicas int
	Logger   *slog.Logger
}

// Validate checks that every price can be paid: the largest MaxCost of any
// weights must be below every tier's capacity, or some request could never
// be admitted.
func (t *Toll) Validate() error {
	var errs []error
	maxCost := t.Default.MaxCost
	if err := t.Default.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("default weights: %w", err))
	}
	for name, w := range t.LayerWeights {
		if err := w.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("layer %q weights: %w", name, err))
		}
		maxCost = max(maxCost, w.MaxCost)
	}
	for _, tier := range []Tier{t.Anonymous, t.Keyed} {
		if err := tier.Limit.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tier %q: %w", tier.Name, err))
			continue
		}
		if tier.Limit.Capacity <= maxCost {
			errs = append(errs, fmt.Errorf("tier %q: capacity %g must be above the largest max_cost %g, or the most expensive request could never be admitted",
				tier.Name, tier.Limit.Capacity, maxCost))
		}
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

// TilePrice is the price of a tile demand: the sum of its layers' prices,
// clamped to the largest of their MaxCost so that a composite tile stays
// payable by every tier.
func (t *Toll) TilePrice(d tiles.Demand) float64 {
	var sum, ceiling float64
	for _, l := range d.Layers {
		w := t.weights(l.Name)
		sum += w.Tile(d.Tile)
		ceiling = max(ceiling, w.MaxCost)
	}
	return math.Min(sum, ceiling)
}

// AdmitTile implements tiles.Gate.
func (t *Toll) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	return t.charge(w, r, t.TilePrice(d))
}

func (t *Toll) tier(c Caller) Tier {
	if c.Tier == t.Keyed.Name {
		return t.Keyed
	}
	return t.Anonymous
}

// charge spends cost from the caller's bucket, sets the budget headers, and
// writes the refusal itself when the budget cannot pay.
func (t *Toll) charge(w http.ResponseWriter, r *http.Request, cost float64) bool {
	caller := identify(r, t.Keyed.Name, t.Anonymous.Name)
	tier := t.tier(caller)
	key := throttle.BucketKey(t.Prefix, tier.Name, caller.Identity)
	res, err := t.spend(r.Context(), key, tier.Limit, cost)
	if err != nil {
		t.logger().LogAttrs(r.Context(), slog.LevelWarn, "budget unavailable",
			slog.String("tier", tier.Name), slog.Any("err", err))
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1, Err: err})
		return false
	}
	setBudgetHeaders(w.Header(), tier, res)
	if res.Allowed {
		return true
	}
	problem.Write(w, r, &problem.Error{
		Code:       problem.Exhausted,
		Detail:     fmt.Sprintf("this request costs %s tokens; %s remain. Retry in %d s.", fmtTokens(cost), fmtTokens(res.Remaining), res.RetryAfterSeconds()),
		RetryAfter: res.RetryAfterSeconds(),
		Extra: map[string]any{
			"cost":              round3(cost),
			"remaining":         round3(res.Remaining),
			"retry_after":       res.RetryAfterSeconds(),
			"violated-policies": []string{tier.Name},
		},
	})
	return false
}

// spend asks the Store, bounded by Timeout, and applies FailMode when it
// fails. A request whose own context is done is refused, never failed over.
func (t *Toll) spend(ctx context.Context, key string, limit throttle.Limit, cost float64) (throttle.Result, error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := t.Store.Spend(sctx, key, limit, cost)
	cancel()
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	switch t.FailMode {
	case FailOpen:
		return throttle.Result{Allowed: true, Cost: cost, Remaining: limit.Capacity, Limit: limit}, nil
	case FailLocal:
		local := limit
		if t.Replicas > 1 {
			local.Rate /= float64(t.Replicas)
		}
		return t.Fallback.Spend(ctx, key, local, cost)
	}
	return res, err
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
