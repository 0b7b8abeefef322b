package toll

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Tarpit holds a refusal by the caller's bucket before it is answered:
// for as long as the bucket needs to pay (the refusal's Retry-After, and
// the waits of the bucket's refusals held before it, below), at most
// MaxHold. A client that honours Retry-After loses little by it —
// the Retry-After it is sent is what remains of the wait, in whole seconds
// and at least 1, so a hold that covered the whole wait adds at most a
// second — but one that asks again at once, as a crawler does, can no
// longer be refused thousands of times a second per connection: each of
// its connections is refused at most once per hold. Those refusals would not touch the
// database, but each still costs the server a request's work on the CPU
// the database and the other callers share.
//
// A bucket's refusals held at once queue: each is held until its bucket
// could pay it after the ones held before it (each of those needing the
// bucket's wait again, its own price being alike), at most MaxHold. A
// crawler's connections, refused together, so do not all come back at the
// moment the bucket could pay one of them: the bucket is refused about as
// often as it pays, not once per connection each time.
//
// At most MaxHeld refusals are held at once; beyond, a refusal is answered
// at once. A held refusal ends early when its client hangs up, and gives
// its place in its bucket's queue back. The
// in-flight cap's refusals are not held (the caller's own requests free a
// slot), nor the global budget's (the server is busy, not the caller
// greedy).
type Tarpit struct {
	MaxHold time.Duration // 0: refusals are answered at once
	MaxHeld int64
	// sleep waits d or until ctx ends (nil: a timer); now is the clock
	// (nil: time.Now). Tests set them.
	sleep func(ctx context.Context, d time.Duration)
	now   func() time.Time

	held atomic.Int64
	mu   sync.Mutex
	// queue is, per bucket, when the last of its refusals held is
	// answered: at most one entry in the future per refusal held, and
	// past ones until the next sweep (sweepAt entries).
	queue   map[string]time.Time
	sweepAt int64
}

// Defaults of Tarpit.
const (
	DefaultTarpitMaxHold = time.Second
	DefaultTarpitMaxHeld = 1024
)

// hold holds a refusal of bucket key, which could pay it in retry, and
// returns how long it held it. A hold that ends early (its client hung
// up) gives its place in the bucket's queue back, unless a refusal queued
// behind it since.
func (tp *Tarpit) hold(ctx context.Context, key string, retry time.Duration) time.Duration {
	if min(retry, tp.MaxHold) <= 0 {
		return 0
	}
	if tp.held.Add(1) > tp.MaxHeld {
		tp.held.Add(-1)
		return 0
	}
	defer tp.held.Add(-1)
	d, until, before := tp.turn(key, retry)
	if tp.sleep != nil {
		tp.sleep(ctx, d)
		return d
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		tp.leave(key, until, before)
	case <-t.C:
	}
	return time.Since(start)
}

// turn is how long a refusal of bucket key, which could pay it in retry,
// is held: until retry after the bucket's last refusal held is answered,
// or after now when none is, at most MaxHold. until is when it is
// answered (the bucket's queue ends there now), before what the queue
// held before it.
func (tp *Tarpit) turn(key string, retry time.Duration) (d time.Duration, until, before time.Time) {
	now := time.Now()
	if tp.now != nil {
		now = tp.now()
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	at := now.Add(retry)
	before, queued := tp.queue[key]
	if queued && before.After(now) {
		at = before.Add(retry)
	}
	d = min(at.Sub(now), tp.MaxHold)
	if int64(len(tp.queue)) >= max(tp.sweepAt, 2*tp.MaxHeld) {
		// Entries in the future belong to refusals held now (MaxHeld at
		// most, as a hold that ends early gives its place back): the
		// others go, and the next sweep waits for the map to double.
		for k, v := range tp.queue {
			if !v.After(now) {
				delete(tp.queue, k)
			}
		}
		tp.sweepAt = 2 * int64(len(tp.queue))
	}
	if tp.queue == nil {
		tp.queue = map[string]time.Time{}
	}
	until = now.Add(d)
	tp.queue[key] = until
	return d, until, before
}

// leave gives back the place in bucket key's queue of a refusal answered
// before its turn (until): the queue ends where it did before it, unless
// a refusal queued behind it since.
func (tp *Tarpit) leave(key string, until, before time.Time) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if v, ok := tp.queue[key]; ok && v.Equal(until) {
		if before.IsZero() {
			delete(tp.queue, key)
		} else {
			tp.queue[key] = before
		}
	}
}
