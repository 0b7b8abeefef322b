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
// One lease call at most is on its way at a time, and no lock is held
// across it: a request the tokens in hand can pay takes them at once, a
// give-back never waits, and a request that needs the lease waits for it
// only as long as its own context allows.
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
	// Hold is how long leased tokens are kept before what is left of them
	// goes back (default 1 s).
	Hold time.Duration

	mu      sync.Mutex
	leases  []*Ticket // taken since the last return
	have    float64   // tokens in hand: leased, not yet spent (negative after an overuse)
	returns *time.Timer
	// leasing is closed when the store call on its way (a lease, or
	// Close's charge of an overuse) ends; nil when none is.
	leasing chan struct{}
	// afterFunc makes the hold's timer: time.AfterFunc when nil (a test's
	// timer, that it fires itself, otherwise).
	afterFunc func(time.Duration, func()) *time.Timer
}

// Take spends cost from the global budget: from the tokens this replica
// holds, or — when they cannot pay — from a new lease, in one call, or
// from the one another request is taking meanwhile. A refusal returns the
// shared bucket's Result (for Retry-After) with ok false; a request whose
// ctx ends while it waits for another's lease gets ctx's error. An
// admission's Result.Cost is what it charged the budget: cost, or 0 when
// the store admitted the lease without charging it (fail_mode open) — then
// nothing was taken, and nothing may be given back (Give): tokens never
// charged must not be refunded into the shared bucket.
func (g *Global) Take(ctx context.Context, cost float64) (res Result, ok bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.have < cost {
		if g.leasing != nil { // another request's lease may pay this one too
			if err := g.awaitLocked(ctx); err != nil {
				return Result{}, false, err
			}
			continue
		}
		a, err := g.leaseLocked(ctx, cost)
		if err != nil {
			return Result{}, false, err
		}
		if !a.Allowed {
			return a.Result, false, nil
		}
		if a.Ticket == nil { // fail_mode open: nothing charged, nothing to hold or return
			return Result{Allowed: true, Remaining: max(g.have, 0), Limit: g.Bucket.Limit}, true, nil
		}
		g.keepLocked(a.Ticket)
		// Its own lease pays this request, though others may have spent
		// from what was in hand during the call (or the hold returned it):
		// the tokens in hand then go below zero, an overuse the next lease
		// pays, as a settlement's does. Leasing again could go on for as
		// long as others keep spending.
		break
	}
	g.have -= cost
	return Result{Allowed: true, Cost: cost, Remaining: g.have, Limit: g.Bucket.Limit}, true, nil
}

// Peek reports whether Take(cost) would be paid now, spending nothing:
// by the tokens in hand, or else by a lease of what they lack, as a read
// of the shared bucket shows it (a budget read: one store call). When it
// would not, res is the shared bucket as read, with the wait a lease of
// what is lacking would have (RetryAfter).
func (g *Global) Peek(ctx context.Context, cost float64) (res Result, ok bool, err error) {
	g.mu.Lock()
	have := g.have
	g.mu.Unlock()
	if have >= cost {
		return Result{Allowed: true, Remaining: have, Limit: g.Bucket.Limit}, true, nil
	}
	need := min(cost-have, g.Bucket.Limit.Capacity)
	// Read as a lease of need would be admitted: under its debt floor,
	// and — while Redis is out, with fail_mode local — by this replica's
	// share of the bucket, lifted to need (Failover.localLimit).
	if res, _, err = peekWith(ctx, g.Store, g.Bucket, g.Bucket.Limit.Capacity, need); err != nil {
		return Result{}, false, err
	}
	if res.Remaining >= need {
		return res, true, nil
	}
	rate := g.Bucket.Limit.Rate
	if res.Limit.Rate > 0 { // the share's, while Redis is out
		rate = res.Limit.Rate
	}
	res.Allowed, res.Cost = false, need
	res.RetryAfter = secondsToDuration((need - res.Remaining) / rate)
	return res, false, nil
}

// awaitLocked waits, with g.mu released, until the store call on its way
// ends or ctx does (then it returns ctx's error).
func (g *Global) awaitLocked(ctx context.Context) error {
	done := g.leasing
	g.mu.Unlock()
	defer g.mu.Lock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaseLocked takes a lease for a request of cost — the chunk, or, when
// the bucket refuses that, what the tokens in hand lack — with g.mu
// released during the calls, while g.leasing tells other requests that it
// is on its way.
func (g *Global) leaseLocked(ctx context.Context, cost float64) (a Admission, err error) {
	need := cost - g.have
	end := g.callingLocked()
	defer end()
	a, err = g.lease(ctx, max(need, g.chunk()))
	if err == nil && !a.Allowed && g.chunk() > need { // the bucket may still hold this one request
		a, err = g.lease(ctx, need)
	}
	return a, err
}

// callingLocked marks a store call as on its way and releases g.mu; the
// function it returns takes g.mu again and wakes the requests that wait
// for the call.
func (g *Global) callingLocked() (end func()) {
	done := make(chan struct{})
	g.leasing = done
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.leasing = nil
		close(done)
	}
}

// keepLocked adds a lease's tokens to those in hand, and starts the hold
// after which what is left of the period's leases goes back. A hold's
// timer that Close stopped too late (it had fired, its func waiting for
// g.mu) does nothing when its func runs: Close returned its leases, and
// those taken since are held by a timer of their own.
func (g *Global) keepLocked(t *Ticket) {
	g.leases = append(g.leases, t)
	g.have += t.Paid()
	if g.returns == nil {
		var hold *time.Timer
		hold = afterFunc(g.afterFunc, g.hold(), func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.returns != hold { // stopped by Close after it fired
				return
			}
			g.returns = nil
			g.returnLocked()
		})
		g.returns = hold
	}
}

func (g *Global) lease(ctx context.Context, n float64) (Admission, error) {
	return g.Store.Admit(ctx, Request{Bucket: g.Bucket, Cost: min(n, g.Bucket.Limit.Capacity), MaxInFlight: 1 << 20,
		TTL: 2*g.hold() + time.Minute, Debt: g.Bucket.Limit.Capacity})
}

// Give returns tokens: those taken for a request that did not run (its
// own bucket refused it), or the difference a settlement makes — negative
// for a request that cost more than it took. What a Take charged
// (Result.Cost) bounds what may come back for it. It never waits for a
// store call.
func (g *Global) Give(tokens float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.have += tokens
}

// Close returns what is left of the leases (at shutdown) — a lease on its
// way first arrives — and charges the shared bucket an overuse settled
// after the last lease went back (have below zero with none to debit),
// which the next lease would have paid.
func (g *Global) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.leasing != nil {
		_ = g.awaitLocked(context.Background()) // the call is bounded by its own request's context
	}
	if g.returns != nil {
		g.returns.Stop()
		g.returns = nil
	}
	g.returnLocked()
	if g.have >= 0 {
		return
	}
	owed := -g.have
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// The smallest lease the bucket takes, settled at the overuse on top:
	// a debit down to the bucket's debt floor, as a lease's own overuse.
	const least = 1e-6
	a, err := func() (Admission, error) {
		defer g.callingLocked()()
		return g.lease(ctx, least)
	}()
	if err == nil && a.Ticket != nil {
		a.Ticket.Settle(a.Ticket.Paid() + owed)
		g.have += owed // what was given meanwhile stays in hand
	}
}

// returnLocked settles the leases taken since the last return: the tokens
// still in hand go back to the shared bucket (from the newest lease back),
// an overuse is debited to the newest.
func (g *Global) returnLocked() {
	for i := len(g.leases) - 1; i >= 0; i-- {
		t := g.leases[i]
		back := min(max(g.have, 0), t.Paid())
		if i == len(g.leases)-1 && g.have < 0 {
			back = g.have // a debit
		}
		t.Settle(t.Paid() - back)
		g.have -= back
	}
	// What is still in hand now was paid in an earlier period (a refund
	// that came after its lease went back): the next request may spend it.
	g.leases = nil
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
