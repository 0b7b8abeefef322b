package toll

import "github.com/geotoll/geotoll/throttle"

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
