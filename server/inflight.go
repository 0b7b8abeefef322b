package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/geotoll/geotoll/throttle"
)

// slotHolder carries the in-flight slot a request acquired from Charge to
// the middleware that releases it when the handler returns.
type slotHolder struct {
	mu    sync.Mutex
	toll  *Toll
	slots []heldSlot
}

// heldSlot is a slot and the store that granted it (Redis, or the local
// fallback while Redis failed).
type heldSlot struct {
	store throttle.Store
	slot  throttle.Slot
}

type slotKey struct{}

// withInFlight releases, when the handler returns, any in-flight slot the
// request acquired, in the store that granted it, after the response has
// been flushed. Release runs on its own short context: the request's may
// already be cancelled (a client that hung up still frees its slot).
//
// The guarantee: a slot is held for as long as the database works for its
// request, not merely until the request is answered. The tile and geofence
// handlers return only once every statement they started (or, for a shared
// tile render, the last one waiting for it) has stopped in PostgreSQL: a
// statement cut by its deadline, or whose client went away, is cancelled
// with a cancel request on a connection that stays out of the pool until
// the backend answers (package pgcall), and the handler sends its answer
// first and then waits for that (pgcall.Respond). So the statements running
// in pg_stat_activity on a caller's behalf never outnumber the slots its
// tier allows (max_in_flight), nor all of them the pool — whatever clients
// do. The wait is bounded by database.cancel_wait, and the slot's TTL
// (InFlightTTL) is set to outlast it.
func withInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &slotHolder{}
		defer func() { // deferred: a handler that panics still frees its slot
			h.mu.Lock()
			slots, toll := h.slots, h.toll
			h.mu.Unlock()
			for _, s := range slots {
				toll.release(r, s.store, s.slot)
			}
		}()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, h)))
		h.mu.Lock()
		held := len(h.slots) > 0
		h.mu.Unlock()
		if held {
			// Send the response before the release's round trip to Redis,
			// so the client does not wait for it.
			_ = http.NewResponseController(w).Flush()
		}
	})
}

func holdSlot(r *http.Request, t *Toll, store throttle.Store, s throttle.Slot) {
	h, _ := r.Context().Value(slotKey{}).(*slotHolder)
	if h == nil {
		// No middleware (a handler used on its own): release at once rather
		// than leak the slot until its TTL.
		t.release(r, store, s)
		return
	}
	h.mu.Lock()
	h.toll = t
	h.slots = append(h.slots, heldSlot{store, s})
	h.mu.Unlock()
}

// slotID names one request's in-flight slot. It is always ours: a client's
// X-Request-ID could repeat and so share one slot among many requests.
func slotID(*http.Request) string { return newID() }

// release frees a slot in the store that granted it. It is tried even
// while the breaker keeps that store out of the budget path: the breaker is
// process-wide, and one other caller's timeout must not leave every
// finishing request's slot behind (its client would then be refused with
// nothing in flight until the slots expire). While degraded the release is
// bounded by Timeout, so a store that is really down delays only this
// request's goroutine — its response is already sent — and a slot it could
// not free expires after its TTL.
func (t *Toll) release(r *http.Request, store throttle.Store, s throttle.Slot) {
	bound := time.Second
	if store == t.Store && t.LimiterHealth().Degraded {
		bound = t.timeout()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), bound)
	defer cancel()
	_ = store.Release(ctx, s)
}
