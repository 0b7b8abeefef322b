package throttle

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// maxFillSeconds bounds Limit.FillTime. A bucket that takes longer than about
// 31 years to refill is a configuration mistake, and the bound keeps every
// millisecond count the bucket produces (TTL, retry, reset) an exact integer in
// a float64 and in a Redis integer reply.
const maxFillSeconds = 1e9

// ErrInvalidCost is returned (wrapped) by Store.Spend when the cost is not a
// finite number greater than zero.
var ErrInvalidCost = errors.New("throttle: cost must be finite and > 0")

// ErrCostExceedsCapacity is returned (wrapped) by Store.Spend when the cost is
// larger than the bucket's capacity: such a request could never be admitted,
// however long the client waited.
var ErrCostExceedsCapacity = errors.New("throttle: cost exceeds bucket capacity")

// Limit is a token bucket's shape.
type Limit struct {
	Rate     float64 // tokens added per second, > 0
	Capacity float64 // most tokens the bucket holds, > 0
}

// Validate reports whether the limit can be used: Rate and Capacity must be
// finite and greater than zero — at least a micro-token (per second), the
// unit the stores count in, so that neither rounds to 0, and Capacity at
// most 9e9 tokens — and the bucket must refill from empty within about 31
// years.
func (l Limit) Validate() error {
	if !finitePositive(l.Rate) || toMicro(l.Rate) < 1 {
		return fmt.Errorf("throttle: limit rate %v must be finite and at least a micro-token (1e-6) per second", l.Rate)
	}
	if !finitePositive(l.Capacity) || toMicro(l.Capacity) < 1 || toMicro(l.Capacity) > maxMicro {
		return fmt.Errorf("throttle: limit capacity %v must be finite, at least a micro-token (1e-6) and at most 9e9 tokens", l.Capacity)
	}
	if fill := l.Capacity / l.Rate; !(fill <= maxFillSeconds) {
		return fmt.Errorf("throttle: limit refills in %g s, more than the %g s allowed", fill, float64(maxFillSeconds))
	}
	return nil
}

// FillTime is the time the bucket takes to refill from empty: Capacity/Rate.
// It is also how long Redis keeps an idle bucket.
func (l Limit) FillTime() time.Duration {
	return secondsToDuration(l.Capacity / l.Rate)
}

// secondsToDuration converts seconds to a Duration, saturating instead of
// overflowing and mapping NaN and negatives to 0.
func secondsToDuration(s float64) time.Duration {
	ns := s * float64(time.Second)
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(math.Round(ns))
}

func finitePositive(v float64) bool {
	return v > 0 && !math.IsInf(v, 1)
}

// Result is the outcome of one Spend (or Peek).
type Result struct {
	Allowed bool
	Cost    float64
	// Remaining is the tokens left after the spend; on a rejection, the
	// tokens the bucket holds now, unchanged by the request.
	Remaining float64
	// RetryAfter is 0 if the spend was allowed; otherwise the time until the
	// bucket holds Cost tokens: exactly ceil(deficit/rate) in whole
	// milliseconds, so a client that waits that long is admitted.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	Limit      Limit
}

// RetryAfterSeconds is the value of the Retry-After header: RetryAfter rounded
// up to whole seconds, at least 1 when the spend was rejected and 0 when it
// was allowed.
func (r Result) RetryAfterSeconds() int {
	if r.Allowed {
		return 0
	}
	return max(1, ceilSeconds(r.RetryAfter))
}

// ResetSeconds is ResetAfter rounded up to whole seconds, for the RateLimit
// and X-RateLimit-Reset headers.
func (r Result) ResetSeconds() int {
	return ceilSeconds(r.ResetAfter)
}

// After is r as it stands d later by the bucket's refill alone: the waits
// shorter by d, the tokens more by what refilled meanwhile (unknown
// without a limit).
func (r Result) After(d time.Duration) Result {
	if d <= 0 {
		return r
	}
	r.RetryAfter = max(0, r.RetryAfter-d)
	r.ResetAfter = max(0, r.ResetAfter-d)
	if r.Limit.Rate > 0 {
		r.Remaining = r.Limit.refilled(r.Remaining, d)
	}
	return r
}

// refilled is a bucket of l holding tokens, d later: at most its capacity.
func (l Limit) refilled(tokens float64, d time.Duration) float64 {
	return min(l.Capacity, tokens+d.Seconds()*l.Rate)
}

// ceilSeconds is d in whole seconds, rounded up (without overflowing
// near the longest Duration).
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int(s)
}

// checkSpend validates the arguments of Store.Spend.
func checkSpend(limit Limit, cost float64) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	if !finitePositive(cost) {
		return fmt.Errorf("%w: got %v", ErrInvalidCost, cost)
	}
	if cost > limit.Capacity {
		return fmt.Errorf("%w: cost %g > capacity %g", ErrCostExceedsCapacity, cost, limit.Capacity)
	}
	return nil
}

// BucketKey returns the Redis key for a (tier, identity) bucket, hash-tagged
// so that Redis Cluster keeps it in one slot: prefix + ":{" + tier + ":" +
// identity + "}".
//
// Tier names must not contain ':' (else two (tier, identity) pairs could share
// a key), and the prefix must not contain '{' (else its braces would become
// the hash tag and every bucket would land in one slot).
func BucketKey(prefix, tier, identity string) string {
	return prefix + ":{" + tier + ":" + identity + "}"
}
