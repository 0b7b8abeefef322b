package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Bucket names one token bucket: its key (see BucketKey) and shape.
type Bucket struct {
	Key   string
	Limit Limit
}

// Request asks a Store to admit one request.
type Request struct {
	Bucket
	// Aggregate, when set, is a second bucket every amount applies to as
	// well (e.g. the IPv6 /48 above a /64 caller). Its key must share
	// Bucket.Key's hash tag, so Redis Cluster keeps both in one slot.
	Aggregate *Bucket
	// Cost is the price, in tokens: > 0 and at most the capacity.
	Cost float64
	// Debt is how far below zero a settlement may take the bucket, in
	// tokens (>= 0): a request that cost more than it paid delays the next
	// one by the difference, up to this.
	Debt float64
	// MaxInFlight caps the caller's requests open at once (admitted, not
	// yet finished); 0 means DefaultMaxInFlight.
	MaxInFlight int
	// TTL is how long an admitted request stays open unless finished: the
	// longest a request can run. Its process may die; its slot must not
	// live forever. 0 means DefaultTTL.
	TTL time.Duration
	// Shadow admits even when the bucket cannot pay (then nothing is
	// spent); the in-flight cap still refuses.
	Shadow bool
}

// Defaults of Request.
const (
	DefaultMaxInFlight = 256
	DefaultTTL         = time.Minute
)

// Refusal says what refused a request.
type Refusal int

// Refusals.
const (
	NotRefused       Refusal = iota
	RefusedBucket            // the caller's bucket cannot pay: 429
	RefusedAggregate         // the aggregate bucket cannot pay: 429
	RefusedInFlight          // too many of the caller's requests are open: 429
)

// Admission is a Store's decision on one Request.
type Admission struct {
	// Allowed: the request may run. It then holds a slot until its Ticket
	// is finished.
	Allowed bool
	// Shadow: the bucket could not pay, and the request was admitted
	// anyway because it asked for shadow mode; nothing was spent.
	Shadow bool
	// Refusal says what refused it when not Allowed.
	Refusal Refusal
	// Result is the caller's bucket after the decision (the aggregate's
	// when the aggregate refused), for the budget headers and Retry-After.
	Result Result
	// Ticket finishes an allowed request; nil when refused (finishing a
	// nil Ticket does nothing).
	Ticket *Ticket
	// raced: the store answered while a settlement of the caller was on
	// its way behind the decision (a Failover keeps no free refusal of it).
	raced bool
	// inProcess: admitted from a lease this process holds, without a call
	// (a Failover takes it for no sign of the store's health).
	inProcess bool
}

// Store decides admissions atomically and keeps the buckets.
// Implementations: *RedisStore (shared by every replica), *MemoryStore
// (one process), *Failover (Redis, with a fail mode when it fails).
type Store interface {
	// Admit spends req.Cost from the bucket iff it (and the aggregate)
	// holds it and fewer than req.MaxInFlight requests of the caller are
	// open; then it opens the request. A refusal spends nothing.
	Admit(ctx context.Context, req Request) (Admission, error)
	// Peek reports a bucket without changing or creating it. It knows no
	// request's debt floor: a bucket a lease left below that floor (the
	// floor less what the lease held, where its process died with it) is
	// reported as deep until the caller's next write lifts it to the
	// floor, after the lease stopped counting too (a FloorPeeker reads
	// it as that write will find it).
	Peek(ctx context.Context, b Bucket) (Result, error)
}

// Ticket is an admitted request, to be finished exactly once with what it
// really cost: Finish closes its slot and settles the difference between
// the price paid at the door and the cost, in the same bucket, atomically.
// Finishing never waits for the store: a Redis store sends it with the
// caller's next batch or soon after. A nil Ticket finishes nothing.
type Ticket struct {
	owner   finisher
	key     string
	agg     *Bucket
	limit   Limit
	debt    float64
	id      string
	paid    float64 // micro-tokens
	cost    float64 // tokens, the price at the door
	shadow  bool
	maxOpen int
	ttl     time.Duration
	// at is when a lease admitted the request (zero when Redis or the
	// in-process store did): its own slot would expire ttl after it.
	at       time.Time
	finished atomic.Bool
	// carry is what the caller spent from a Failover's local bucket while
	// the primary failed, beyond what that bucket refilled to (micro-tokens):
	// the settlement debits it too.
	carry float64
	// carrier, when carry is not 0, counts it until the ticket settles
	// (lateSettlements.carrying).
	carrier *lateSettlements
	// known, when a Failover's primary admitted the request, is that
	// Failover's memory of the caller's bucket: the settlement changes it
	// too, so that a refund ends a free refusal it makes payable.
	known *known
}

// finisher is a store that can finish its tickets.
type finisher interface {
	finish(t *Ticket, deltaMicro float64)
}

// Paid is the price the request paid at admission, in tokens (0 in shadow
// mode).
func (t *Ticket) Paid() float64 {
	if t == nil {
		return 0
	}
	return fromMicro(t.paid)
}

// Settle finishes the request with what it really cost, in tokens: more
// than it paid is debited (down to the request's Debt below zero), less is
// refunded (never more than it paid: a negative cost counts as 0, a NaN one
// as the price paid). A shadow admission spent nothing and settles nothing.
// Settle after the first call does nothing.
func (t *Ticket) Settle(cost float64) {
	if t == nil || t.owner == nil || !t.finished.CompareAndSwap(false, true) {
		return
	}
	delta := 0.0
	if !t.shadow {
		if cost == cost {
			delta = toMicro(max(cost, 0)) - t.paid
		}
		delta = min(delta+t.carry, maxMicro)
	}
	if t.known != nil && delta != 0 {
		t.known.settled(t, delta, time.Now())
	}
	if t.carrier != nil {
		t.carrier.carry(t.key, -t.carry)
	}
	t.owner.finish(t, delta)
}

// Release finishes the request at the price it paid: its slot is freed
// and nothing is settled.
func (t *Ticket) Release() {
	if t != nil {
		t.Settle(fromMicro(t.paid))
	}
}

// Charge spends cost from b once, holding no slot: a one-off charge (an
// unknown API key charges its client IP one token). It is Admit and an
// immediate Release.
func Charge(ctx context.Context, s Store, b Bucket, cost float64) (Result, error) {
	a, err := s.Admit(ctx, Request{Bucket: b, Cost: cost, MaxInFlight: math.MaxInt32, TTL: time.Second})
	if err != nil {
		return Result{}, err
	}
	a.Ticket.Release()
	return a.Result, nil
}

// shapeOf is the batch shape of req (amounts in micro-tokens).
func shapeOf(req Request) shape {
	sh := shape{
		rate:     toMicro(req.Limit.Rate),
		capacity: toMicro(req.Limit.Capacity),
		floor:    toMicro(req.Debt),
		max:      req.MaxInFlight,
		ttlMS:    req.TTL.Milliseconds(),
	}
	if sh.max <= 0 {
		sh.max = DefaultMaxInFlight
	}
	if req.TTL <= 0 {
		sh.ttlMS = DefaultTTL.Milliseconds()
	}
	sh.ttlMS = max(sh.ttlMS, 1)
	if a := req.Aggregate; a != nil {
		sh.aggRate, sh.aggCap = toMicro(a.Limit.Rate), toMicro(a.Limit.Capacity)
	}
	return sh
}

// peekShape is the batch shape of a peek: as an admission whose debt
// floor is debt tokens loads the bucket (lifted to that floor, less what
// is leased, as of its last write, then refilled; see FloorPeeker), or,
// for debt < 0, as stored, in debt or not (below a request's debt floor
// too, where a lease that no longer counts left it: see Store.Peek).
func peekShape(b Bucket, debt float64) shape {
	sh := shapeOf(Request{Bucket: b, Debt: max(debt, 0)})
	if debt < 0 {
		sh.floor = maxMicro
	}
	sh.read = true
	return sh
}

// FloorPeeker is a Store that reads a bucket as the admission of a request
// would find it: PeekFloor is Peek, with the bucket lifted to the
// request's debt floor (Request.Debt) as the admission lifts it — as of
// the bucket's last write, less what is leased while leases count — so
// that a bucket run deeper in debt under a deeper floor (a tier's
// max_cost lowered since), or left there by a lease's process that died,
// reads as the admission will find it. cost is the request's price, for a
// store whose bucket depends on it (Failover: a replica's share under
// fail_mode local). A negative debt reads as Peek does.
type FloorPeeker interface {
	PeekFloor(ctx context.Context, b Bucket, debt, cost float64) (Result, error)
}

// checkPeek checks a peek of b under the debt floor debt (a negative one
// reads as stored), as Request.validate checks a request, and that ctx
// has not ended.
func checkPeek(ctx context.Context, b Bucket, debt float64) error {
	if err := checkPeekArgs(b, debt); err != nil {
		return err
	}
	return ctx.Err()
}

// checkPeekArgs is checkPeek but for ctx.
func checkPeekArgs(b Bucket, debt float64) error {
	if err := b.Limit.Validate(); err != nil {
		return err
	}
	if debt != debt || toMicro(debt) > maxMicro {
		return fmt.Errorf("throttle: debt %v must be within 0..9e9 tokens", debt)
	}
	return nil
}

// ticketShape is the batch shape of a ticket's finish.
func (t *Ticket) shape() shape {
	return shapeOf(Request{Bucket: Bucket{Key: t.key, Limit: t.limit}, Aggregate: t.agg, Debt: t.debt, MaxInFlight: t.maxOpen, TTL: t.ttl})
}

// validate checks a Request before it reaches a store.
func (req Request) validate() error {
	if err := checkSpend(req.Limit, req.Cost); err != nil {
		return err
	}
	if req.Key == "" {
		return errors.New("throttle: a request needs a bucket key")
	}
	if !(req.Debt >= 0) || toMicro(req.Debt) > maxMicro {
		return fmt.Errorf("throttle: debt %v must be within 0..9e9 tokens", req.Debt)
	}
	if toMicro(req.Cost) < 1 {
		return fmt.Errorf("%w: %v is below a micro-token", ErrInvalidCost, req.Cost)
	}
	if a := req.Aggregate; a != nil {
		if err := checkSpend(a.Limit, req.Cost); err != nil {
			return fmt.Errorf("throttle: aggregate: %w", err)
		}
		if a.Key == "" || a.Key == req.Key {
			return errors.New("throttle: the aggregate bucket needs a key of its own")
		}
	}
	return nil
}

// errLate reports an admit that Redis did not apply: its batch reached
// Redis after its deadline by Redis's clock (a Redis clock more than
// Timeout + ClockSkew ahead of this process's makes every batch late), or
// a void had turned it away first. It is no refusal: no bucket said no, so
// its caller is decided as one whose call failed (a Failover's fail mode).
var errLate = errors.New("throttle: the budget call reached Redis after its deadline (is Redis's clock ahead of this process's by more than the timeout and max clock skew?)")

// admission turns a script status into an Admission, or an error for an
// admit the script did not apply (late).
func admission(req Request, sh shape, cost float64, r opResult) (Admission, error) {
	a := Admission{raced: r.raced}
	switch r.status {
	case stAdmitted, stAlreadyOpen:
		a.Allowed = true
	case stShadow:
		a.Allowed, a.Shadow = true, true
	case stRefused:
		a.Refusal = RefusedBucket
	case stAggregate:
		a.Refusal = RefusedAggregate
	case stInFlight:
		a.Refusal = RefusedInFlight
	case stLate:
		return a, fmt.Errorf("%w (bucket %q)", errLate, req.Key)
	}
	rate, capacity, limit := sh.rate, sh.capacity, req.Limit
	if a.Refusal == RefusedAggregate {
		rate, capacity, limit = sh.aggRate, sh.aggCap, req.Aggregate.Limit
	}
	res := Result{
		Allowed:    a.Allowed && !a.Shadow,
		Cost:       req.Cost,
		Remaining:  fromMicro(r.tokens),
		ResetAfter: millis(resetMS(r.tokens, rate, capacity)),
		Limit:      limit,
	}
	if a.Refusal == RefusedBucket || a.Refusal == RefusedAggregate {
		res.RetryAfter = millis(retryMS(cost, r.tokens, rate))
	}
	if a.Refusal == RefusedInFlight {
		res.Allowed = false
	}
	a.Result = res
	return a, nil
}
