package toll

import (
	"context"
	"net/http"
	"sync"

	"github.com/geotoll/geotoll/throttle"
)

// Pass is an admitted request, from Charge until it ends. Finish, the
// middleware, ends it when the handler returns; a handler that knows what
// the request really cost settles it first.
type Pass struct {
	toll   *Toll
	ticket *throttle.Ticket
	price  float64 // paid at the door
	global float64 // taken from the global budget
	once   sync.Once
}

// Price is what the request paid at the door.
func (p *Pass) Price() float64 {
	if p == nil {
		return 0
	}
	return p.price
}

// Settle ends the request at what it really cost, in tokens: the caller's
// bucket (and the global budget) get the difference back, or pay it. Only
// the first Settle (or the release by Finish) counts.
func (p *Pass) Settle(cost float64) {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.ticket.Settle(cost)
		if p.global > 0 && p.toll.Global != nil {
			p.toll.Global.Give(p.global - max(cost, 0))
		}
	})
}

// release ends the request at the price it paid.
func (p *Pass) release() { p.Settle(p.price) }

// passes carries the passes a request was given from Charge to Finish.
type passes struct {
	mu   sync.Mutex
	list []*Pass
}

type passesKey struct{}

// Finish is the middleware that ends every request Charge admitted when its
// handler returns (or panics): a request not settled by its handler is
// released at the price it paid. Ending a request never waits for Redis:
// its settlement rides on a later call.
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
// (Toll.InFlightTTL) is set to outlast it.
func Finish(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := &passes{}
		defer func() {
			held.mu.Lock()
			list := held.list
			held.mu.Unlock()
			for _, p := range list {
				p.release()
			}
		}()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), passesKey{}, held)))
	})
}

// hold gives a pass to the request's Finish. Without the middleware (a
// handler used on its own) nothing would end it: it is released at once.
func hold(r *http.Request, p *Pass) {
	held, _ := r.Context().Value(passesKey{}).(*passes)
	if held == nil {
		p.release()
		return
	}
	held.mu.Lock()
	held.list = append(held.list, p)
	held.mu.Unlock()
}

// PassOf returns the pass Charge gave the request, or nil.
func PassOf(r *http.Request) *Pass {
	held, _ := r.Context().Value(passesKey{}).(*passes)
	if held == nil {
		return nil
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	if len(held.list) == 0 {
		return nil
	}
	return held.list[len(held.list)-1]
}
