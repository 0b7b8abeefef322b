package toll

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/throttle"
)

// Pass is an admitted request, from Charge until it ends. Finish, the
// middleware, settles it when the handler returns: at the database time
// the request really took (see Toll.Charged); at its base price when the
// database did no work for it (it waited for a render another request paid
// for, or found its tile cached after all); at its estimate when it was
// answered a busy 503 (pgcall.Meter.Busy: asked again at once, it must not
// be free), the global budget at its base (the database did no work); or
// — a cache hit, a request admitted without a ticket — at the price it
// paid. A shadow admission is
// cut at the time it paid for and settles the global budget at what it
// took, as every admission does; its own bucket, which did not pay, is
// left alone.
type Pass struct {
	toll   *Toll
	ticket *throttle.Ticket
	tier   Tier
	res    throttle.Result // the bucket after the admission
	price  Price           // paid at the door
	most   float64         // the most it settles at (Toll.settleCap)
	global float64         // taken from the global budget
	fixed  bool            // settles at its price: nothing to measure
	shadow bool            // admitted by shadow mode: its bucket paid nothing
	share  *pgcall.Share   // whose slots its statements take (Toll.share), if any
	once   sync.Once
}

// Price is what the request paid at the door.
func (p *Pass) Price() float64 {
	if p == nil {
		return 0
	}
	return p.price.Cost
}

// charged is what the caller's bucket is asked to pay of cost at
// settlement: nothing for a shadow admission (its bucket paid nothing)
// or one without a ticket (fail_mode open).
func (p *Pass) charged(cost float64) float64 {
	if p.shadow || p.ticket == nil {
		return 0
	}
	return cost
}

// Settle ends the request at what it really cost, in tokens: the caller's
// bucket (and the global budget) get the difference back, or pay it — the
// bucket down to one maximum price below zero. Only the first Settle (or
// Finish's) counts.
func (p *Pass) Settle(cost float64) { p.settle(cost, cost) }

// settle settles the caller's bucket at cost and the global budget at ran.
func (p *Pass) settle(cost, ran float64) {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.ticket.Settle(cost)
		if p.global > 0 && p.toll.Global != nil {
			p.toll.Global.Give(p.global - max(ran, 0))
		}
		p.toll.settled(p, cost)
	})
}

// costs is what the request costs, as m metered it, and ran what its
// database work costs the global budget: the time it ran (Toll.Charged),
// its base when the database did no work for it; a request answered a busy
// 503 costs at least its estimate (see pgcall.Meter.Busy), its work
// still what ran.
func (p *Pass) costs(m *pgcall.Meter) (cost, ran float64) {
	if p.fixed {
		return p.price.Cost, p.price.Cost
	}
	ran = p.price.Base
	if m.Used() {
		ran = p.toll.Charged(p.price.Cost, m.DB(), p.price.Base, p.most)
	}
	if m.Busy() {
		return max(p.price.Cost, ran), ran
	}
	return ran, ran
}

// passes carries, from Charge to Finish, the passes a request was given,
// the meter of its database time and the budget of its calls.
type passes struct {
	mu     sync.Mutex
	list   []*Pass
	meter  *pgcall.Meter
	budget *pgcall.Budget
}

type passesKey struct{}

// Finish is the middleware that ends every request Charge admitted when its
// handler returns (or panics). It meters the request's database time
// (pgcall.Meter) and caps it at what the request paid for (pgcall.Budget,
// set by Charge); when the response's header goes out, X-Request-Cost
// becomes the settled cost so far (X-Request-Cost-Estimate keeps the price
// paid at the door) and the budget headers follow; when the handler
// returns, the request is settled at its final database time. Ending a
// request never waits for Redis: its settlement rides on a later call.
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
// tier allows (max_in_flight; while Redis is out, with fail_mode local, the
// replicas' shares of it, rounded up), nor all of them the pool —
// whatever clients do. The wait is bounded by database.cancel_wait, and the slot's TTL
// (Toll.InFlightTTL) is set to outlast it. The time the backend ran until
// it stopped is the time the request is charged.
func Finish(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := &passes{}
		ctx, meter := pgcall.WithMeter(r.Context())
		ctx, budget := pgcall.WithBudget(ctx)
		held.meter, held.budget = meter, budget
		defer func() {
			held.mu.Lock()
			list := held.list
			held.mu.Unlock()
			for _, p := range list {
				cost, ran := p.costs(meter)
				p.settle(cost, ran)
				noteCharged(r.Context(), p.charged(cost))
			}
		}()
		next.ServeHTTP(&settling{ResponseWriter: w, held: held}, r.WithContext(context.WithValue(ctx, passesKey{}, held)))
	})
}

// hold gives a pass to the request's Finish and caps the request's
// database time at what it paid for (StatementBudget). Without the middleware (a handler
// used on its own) nothing would end it: it is released at its price.
func hold(r *http.Request, p *Pass) {
	held, _ := r.Context().Value(passesKey{}).(*passes)
	if held == nil {
		p.Settle(p.price.Cost)
		return
	}
	held.mu.Lock()
	held.list = append(held.list, p)
	held.mu.Unlock()
	if !p.fixed {
		held.budget.Set(p.toll.StatementBudget(p.price.Cost, p.most))
	}
	if p.share != nil {
		held.budget.Join(p.share)
	}
}

// headers rewrites the budget headers of the held passes at the settled
// cost so far, just before they are sent.
func (held *passes) headers(h http.Header) {
	held.mu.Lock()
	defer held.mu.Unlock()
	for _, p := range held.list {
		if p.fixed || p.shadow {
			continue // its bucket paid its price, or nothing
		}
		cost, _ := p.costs(held.meter)
		res := p.res
		res.Cost = cost
		res.Remaining -= cost - p.price.Cost
		res.ResetAfter = p.tier.Limit.FillTime() - time.Duration(res.Remaining/p.tier.Limit.Rate*float64(time.Second))
		setBudgetHeaders(h, h.Get("RateLimit-Policy"), p.tier, res) // the policy as Charge wrote it
		h.Set("X-Request-Cost-Estimate", fmtTokens(p.price.Cost))
	}
}

// settling is the response writer of a request under Finish: it rewrites
// the budget headers once, when the header goes out.
type settling struct {
	http.ResponseWriter
	held *passes
	sent bool
}

func (s *settling) WriteHeader(code int) {
	if !s.sent {
		s.sent = true
		s.held.headers(s.Header())
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *settling) Write(b []byte) (int, error) {
	if !s.sent {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

// FlushError sends the (rewritten) header first when nothing was written.
func (s *settling) FlushError() error {
	if !s.sent {
		s.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *settling) Unwrap() http.ResponseWriter { return s.ResponseWriter }

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
