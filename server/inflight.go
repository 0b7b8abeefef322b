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
	slots []throttle.Slot
}

type slotKey struct{}

// withInFlight releases, when the handler returns, any in-flight slot the
// request acquired. Release runs on its own short context: the request's
// may already be cancelled (a client that hung up still frees its slot).
func withInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &slotHolder{}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, h)))
		h.mu.Lock()
		slots, toll := h.slots, h.toll
		h.mu.Unlock()
		for _, s := range slots {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
			if err := toll.Store.Release(ctx, s); err != nil && toll.Fallback != nil {
				_ = toll.Fallback.Release(ctx, s) // it may have come from the fallback
			}
			cancel()
		}
	})
}

func holdSlot(r *http.Request, t *Toll, s throttle.Slot) {
	h, _ := r.Context().Value(slotKey{}).(*slotHolder)
	if h == nil {
		// No middleware (a handler used on its own): release at once rather
		// than leak the slot until its TTL.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
		defer cancel()
		_ = t.Store.Release(ctx, s)
		return
	}
	h.mu.Lock()
	h.toll = t
	h.slots = append(h.slots, s)
	h.mu.Unlock()
}

// slotID names one request's in-flight slot. It is always ours: a client's
// X-Request-ID could repeat and so share one slot among many requests.
func slotID(*http.Request) string { return newID() }
