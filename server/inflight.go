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
// request acquired, in the store that granted it. Release runs on its own
// short context: the request's may already be cancelled (a client that hung
// up still frees its slot). A slot in a store that is failing is not
// released (the response would wait for it); it expires after its TTL.
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

// release frees a slot in the store that granted it, unless that is the
// shared store and it is failing.
func (t *Toll) release(r *http.Request, store throttle.Store, s throttle.Slot) {
	if store == t.Store && t.LimiterHealth().Degraded {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
	defer cancel()
	_ = store.Release(ctx, s)
}
