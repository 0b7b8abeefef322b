package toll

import (
	"context"
	"sync/atomic"
	"time"
)

// Tarpit holds a refusal by the caller's bucket before it is answered:
// for as long as the bucket needs to pay (the refusal's Retry-After), at
// most MaxHold. A client that honours Retry-After loses little by it —
// the Retry-After it is sent is what remains of the wait, in whole seconds
// and at least 1, so a hold that covered the whole wait adds at most a
// second — but one that asks again at once, as a crawler does, can no
// longer be refused thousands of times a second per connection: each of
// its connections is refused at most once per hold. Those refusals would not touch the
// database, but each still costs the server a request's work on the CPU
// the database and the other callers share.
//
// At most MaxHeld refusals are held at once; beyond, a refusal is answered
// at once. A held refusal ends early when its client hangs up. The
// in-flight cap's refusals are not held (the caller's own requests free a
// slot), nor the global budget's (the server is busy, not the caller
// greedy).
type Tarpit struct {
	MaxHold time.Duration // 0: refusals are answered at once
	MaxHeld int64
	// sleep waits d or until ctx ends (nil: a timer); tests set it.
	sleep func(ctx context.Context, d time.Duration)

	held atomic.Int64
}

// Defaults of Tarpit.
const (
	DefaultTarpitMaxHold = time.Second
	DefaultTarpitMaxHeld = 1024
)

// hold holds a refusal whose bucket could pay in retry, and returns how
// long it held it.
func (tp *Tarpit) hold(ctx context.Context, retry time.Duration) time.Duration {
	d := min(retry, tp.MaxHold)
	if d <= 0 {
		return 0
	}
	if tp.held.Add(1) > tp.MaxHeld {
		tp.held.Add(-1)
		return 0
	}
	defer tp.held.Add(-1)
	start := time.Now()
	if tp.sleep != nil {
		tp.sleep(ctx, d)
		return d
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return time.Since(start)
}
