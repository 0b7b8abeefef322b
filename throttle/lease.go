package throttle

import (
	"context"
	"sync"
	"time"
)

// Global is one budget shared by every caller — the database's — spent by
// each replica through leases: a replica takes a chunk of tokens from the
// shared bucket in one call (an admission, so it is settled like any
// request) and hands them out in process. So a request pays its own bucket
// and the global budget with one call, not two; a request its own bucket
// refuses gives its global tokens back at once, in process, without
// touching the shared bucket; and an unused lease goes back after Hold.
//
// The cost of that: a replica holds up to Chunk tokens that others cannot
// use until it spends or returns them, so the global budget admits up to
// Chunk × replicas less than its bucket at any moment — never more.
type Global struct {
	Store  Store
	Bucket Bucket
	// Chunk is how many tokens one lease takes (default Capacity / 20,
	// and always at least the request that needs it).
	Chunk float64
	// Hold is how long an unused lease is kept before its tokens go back
	// (default 1 s).
	Hold time.Duration

	mu      sync.Mutex
	lease   *Ticket
	taken   float64 // tokens of the lease
	used    float64 // tokens spent from it (settlements included)
	leased  time.Time
	returns *time.Timer
}

// Take spends cost from the global budget. When the replica's lease cannot
// pay, it is settled and a new one taken: one call. A refusal returns the
// shared bucket's Result (for Retry-After) with ok false.
func (g *Global) Take(ctx context.Context, cost float64) (res Result, ok bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease != nil && g.taken-g.used >= cost && time.Since(g.leased) < g.hold() {
		g.used += cost
		return Result{Allowed: true, Cost: cost, Remaining: g.taken - g.used, Limit: g.Bucket.Limit}, true, nil
	}
	g.returnLocked()
	chunk := max(cost, g.chunk())
	a, err := g.Store.Admit(ctx, Request{Bucket: g.Bucket, Cost: min(chunk, g.Bucket.Limit.Capacity),
		MaxInFlight: 1 << 20, TTL: 2*g.hold() + time.Minute, Debt: g.Bucket.Limit.Capacity})
	if err != nil {
		return Result{}, false, err
	}
	if !a.Allowed {
		if chunk > cost { // the bucket may still hold this one request
			a, err = g.Store.Admit(ctx, Request{Bucket: g.Bucket, Cost: cost, MaxInFlight: 1 << 20,
				TTL: 2*g.hold() + time.Minute, Debt: g.Bucket.Limit.Capacity})
			if err != nil {
				return Result{}, false, err
			}
		}
		if !a.Allowed {
			return a.Result, false, nil
		}
	}
	g.lease, g.taken, g.used, g.leased = a.Ticket, a.Ticket.Paid(), cost, time.Now()
	if a.Ticket == nil { // fail_mode open: nothing is charged, nothing to return
		g.taken = cost
	}
	lease := g.lease
	g.returns = time.AfterFunc(g.hold(), func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.lease == lease {
			g.returnLocked()
		}
	})
	return Result{Allowed: true, Cost: cost, Remaining: g.taken - g.used, Limit: g.Bucket.Limit}, true, nil
}

// Give returns cost taken for a request that did not run (its own bucket
// refused it), or adjusts the lease by a settlement: give a negative
// amount for a request that cost more than it took.
func (g *Global) Give(cost float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease != nil {
		g.used -= cost
	}
}

// Close returns the current lease (at shutdown).
func (g *Global) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.returnLocked()
}

// returnLocked settles the current lease at what was used of it: the rest
// goes back to the shared bucket, an overuse (settlements) is debited.
func (g *Global) returnLocked() {
	if g.returns != nil {
		g.returns.Stop()
		g.returns = nil
	}
	if g.lease != nil {
		g.lease.Settle(max(g.used, 0))
	}
	g.lease, g.taken, g.used = nil, 0, 0
}

func (g *Global) chunk() float64 {
	if g.Chunk > 0 {
		return g.Chunk
	}
	return g.Bucket.Limit.Capacity / 20
}

func (g *Global) hold() time.Duration {
	if g.Hold > 0 {
		return g.Hold
	}
	return time.Second
}
