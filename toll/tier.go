package toll

import (
	"fmt"
	"math"
	"regexp"

	"github.com/geotoll/geotoll/throttle"
)

// Tier is a named bucket shape.
type Tier struct {
	Name  string
	Limit throttle.Limit
	// MaxCost, when positive, is the most one request may cost in this
	// tier; a dearer one is refused with 422 before anything is spent.
	MaxCost float64
	// Shadow prices and records but never refuses for an empty bucket; the
	// in-flight cap and the global budget still refuse.
	Shadow bool
	// MaxInFlight caps a caller's concurrent requests (Stripe's
	// concurrent-requests limiter); one more gets 429. 0 means
	// throttle.DefaultMaxInFlight.
	MaxInFlight int
}

var validTierName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (t *Toll) validateTier(name string, tier Tier, maxCost float64) []error {
	var errs []error
	if name == FailedAuthTier {
		errs = append(errs, fmt.Errorf("tier name %q is reserved", name))
	}
	if !validTierName.MatchString(name) {
		// Tier names appear in keys, headers (as structured-field strings)
		// and metrics labels.
		errs = append(errs, fmt.Errorf("tier name %q must match %s", name, validTierName))
	}
	if err := tier.Limit.Validate(); err != nil {
		return append(errs, fmt.Errorf("tier %q: %w", name, err))
	}
	top := maxCost
	if tier.MaxCost > 0 {
		top = math.Min(top, tier.MaxCost)
	}
	if tier.Limit.Capacity <= top {
		errs = append(errs, fmt.Errorf("tier %q: capacity %g must be above %g, the most one request may cost in it, or that request could never be admitted",
			name, tier.Limit.Capacity, top))
	}
	return errs
}

// mostPerRequest is the most one request may cost in tier: below its
// capacity (and the global budget's, and the IPv6 aggregate's), and its
// max_cost when set. It is also how far below zero a settlement may take
// the caller's bucket.
func (t *Toll) mostPerRequest(tier Tier) float64 {
	most := tier.Limit.Capacity
	if tier.MaxCost > 0 {
		most = math.Min(most, tier.MaxCost)
	}
	if t.Global != nil {
		most = math.Min(most, t.Global.Bucket.Limit.Capacity)
	}
	if t.IPv6Aggregate.Bits > 0 && tier.Name == AnonymousTier {
		most = math.Min(most, t.IPv6Aggregate.Limit.Capacity)
	}
	return most
}
