package throttle

import (
	"math"
	"time"
)

// bucketState is a bucket as stored: Tokens held at time TS (Unix seconds,
// microsecond resolution), the two fields of the Redis hash.
type bucketState struct {
	Tokens float64
	TS     float64
}

// outcome is what one bucket step decides. It mirrors bucket.lua's reply
// plus the write the script performs.
type outcome struct {
	Allowed bool
	// Tokens is the tokens left after the step (the reply's remaining).
	Tokens  float64
	RetryMS int64 // 0 if allowed, else ceil(deficit/rate*1000), at least 1
	ResetMS int64 // ceil((capacity-Tokens)/rate*1000)
	// Write reports whether the step stores Next with a TTL of TTLMS
	// milliseconds. Only an admitted spend writes.
	Write bool
	Next  bucketState
	TTLMS int64
}

// step is THE bucket arithmetic: the single Go statement of what bucket.lua
// computes, used by MemoryStore and by the tests that compare Redis against
// it. Keep the two in lock step, operation for operation: both run IEEE
// doubles, so the same operations in the same order give the same bits.
//
// prev is the stored state, valid only if found. now is the current time in
// Unix seconds (see unixSeconds). cost > 0 is a spend; cost == 0 is a peek,
// which is always allowed and never writes. rate and capacity come from a
// validated Limit; cost from checkSpend.
//
// Products are wrapped in float64() so the compiler cannot fuse a multiply
// and an add into an FMA (the Go spec allows that on arm64 and others),
// which would round differently from Lua.
func step(prev bucketState, found bool, now, rate, capacity, cost float64) outcome {
	tokens, ts := prev.Tokens, prev.TS
	// A missing bucket, or a corrupt one, is a full bucket as of now.
	if !found || tokens != tokens || ts != ts {
		tokens, ts = capacity, now
	}
	if tokens < 0 {
		tokens = 0
	}
	if tokens > capacity {
		tokens = capacity
	}
	elapsed := now - ts
	if !(elapsed > 0) { // a clock that stepped back refills nothing
		elapsed = 0
	}
	tokens = tokens + float64(elapsed*rate)
	if tokens > capacity {
		tokens = capacity
	}

	var o outcome
	o.Allowed = tokens >= cost
	if o.Allowed {
		if cost > 0 {
			tokens = tokens - cost
			o.Write = true
			o.Next = bucketState{Tokens: tokens, TS: now}
			o.TTLMS = ceilMS(capacity / rate)
		}
	} else {
		o.RetryMS = max(1, ceilMS((cost-tokens)/rate))
	}
	o.Tokens = tokens
	o.ResetMS = ceilMS((capacity - tokens) / rate)
	return o
}

// refundStep is bucket.lua's "refund" mode: give cost back to a bucket,
// capped at capacity. A missing bucket is full and stays unwritten.
func refundStep(prev bucketState, found bool, now, rate, capacity, cost float64) outcome {
	o := step(prev, found, now, rate, capacity, 0) // refill as of now
	o.Allowed = true
	if found {
		o.Tokens = min(capacity, o.Tokens+cost)
		o.Write = true
		o.Next = bucketState{Tokens: o.Tokens, TS: now}
		o.TTLMS = ceilMS(capacity / rate)
	}
	o.ResetMS = ceilMS((capacity - o.Tokens) / rate)
	return o
}

// ceilMS is math.ceil(s * 1000) as bucket.lua computes it, for seconds s in
// [0, maxFillSeconds].
func ceilMS(s float64) int64 {
	return int64(math.Ceil(s * 1000))
}

// unixSeconds is the bucket clock: whole seconds plus microseconds, computed
// exactly as bucket.lua computes it from Redis TIME.
func unixSeconds(sec, usec int64) float64 {
	return float64(sec) + float64(usec)/1000000
}

// timeSeconds is unixSeconds for a time.Time, truncated to microseconds like
// Redis TIME.
func timeSeconds(t time.Time) float64 {
	return unixSeconds(t.Unix(), int64(t.Nanosecond()/1000))
}

// result turns an outcome into the Result a Store returns.
func (o outcome) result(limit Limit, cost float64) Result {
	return Result{
		Allowed:    o.Allowed,
		Cost:       cost,
		Remaining:  o.Tokens,
		RetryAfter: time.Duration(o.RetryMS) * time.Millisecond,
		ResetAfter: time.Duration(o.ResetMS) * time.Millisecond,
		Limit:      limit,
	}
}
