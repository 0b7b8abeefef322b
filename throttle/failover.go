package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// FailMode says what a Failover does while its primary store fails.
type FailMode string

// Fail modes.
const (
	FailOpen   FailMode = "open"   // admit without charging
	FailClosed FailMode = "closed" // refuse: ErrStoreDown (a 503)
	FailLocal  FailMode = "local"  // decide on an in-process share of each bucket: 1 / replicas of it
)

// Valid reports whether m is a fail mode.
func (m FailMode) Valid() bool { return m == FailOpen || m == FailClosed || m == FailLocal }

// doing says what a fail mode does with budgets while the store fails.
func (m FailMode) doing() string {
	switch m {
	case FailLocal:
		return "using local buckets"
	case FailOpen:
		return "admitting without charging"
	}
	return "refusing with 503"
}

// ErrStoreDown is what a Failover in FailClosed answers while its primary
// store fails.
var ErrStoreDown = errors.New("throttle: the budget store is failing (fail_mode closed)")

// Failover is the Store the server uses: the shared primary store (Redis),
// and while it fails, the fail mode — the one place where that decision is
// made. After a failed call (an error or a timeout) every decision follows
// the fail mode without asking the primary for ProbeInterval; then one
// request probes it. A dead Redis so costs one Timeout per interval, not
// one per request, and a recovered one is used again within one interval.
//
// It also refuses for free: a caller whose bucket the primary found unable
// to pay is refused in process, without a call, until that bucket could
// hold the price again (the refusal's remaining tokens plus the refill
// since, and the settlements of the caller's requests this Failover
// admitted); the first request after that asks the primary again. Each
// replica learns this on its own, and a refund another replica makes can
// only make such a refusal conservative, never too lenient.
//
// In FailLocal each replica decides on its share of the caller's budget:
// a fallback bucket — and so for its aggregate bucket, and for any shared
// bucket admitted through it, such as the global budget's — that starts
// from what the primary last reported of the shared one divided by
// Replicas, as of that report (its capacity divided by them, as of the
// outage's start, when nothing was reported), and refills at rate /
// Replicas up to capacity / Replicas — or, for a request that costs more,
// up to its price, so that it can still be paid once the share has
// refilled to it; and the caller's in-flight cap divided by them, rounded
// up (at least 1). So over an outage of T seconds the replicas together
// admit from a shared bucket at most what it held, as each last heard of
// it, plus rate × T; at once, at most its capacity — or, of requests
// priced above a replica's share, one such price on each replica; and
// they hold at most Replicas × ceil(MaxInFlight / Replicas) of a caller's
// requests open (MaxInFlight when Replicas divides it), beside those
// the primary had opened before the outage. With Replicas 1 the fallback
// bucket is the shared one's twin: the last report, refilled since, or
// full. The primary reports an aggregate's tokens only when the aggregate
// refuses (and in a budget read of it): a fallback aggregate starts from
// the last such report, refilled since, less what this replica's
// admissions through it spent and plus what their settlements gave back.
// One the primary never so reported, or admitted a request that this
// estimate could not have paid (tokens came back that this replica did not
// see: other replicas' refunds), starts full (its share of full). Once the
// primary admits the caller again, what it spent from its fallback bucket
// beyond what that bucket refilled to is settled in the primary's with
// that request (see reconcile): the primary, which saw none of it, would
// otherwise hand the caller a second bucket after each outage. A request
// admitted locally and still running then settles, when it ends, with the
// caller's next admission by the primary (localFinisher): its local bucket
// is gone.
type Failover struct {
	Primary Store
	Local   *MemoryStore // FailLocal's buckets; may be nil for the other modes
	Mode    FailMode
	// Replicas is how many processes share the primary's budgets: in
	// FailLocal each decides on 1 / Replicas of them.
	Replicas int
	// Timeout bounds one admission by the primary, waiting included
	// (default 3 × DefaultTimeout: a request may wait for its caller's
	// batch on its way and a budget read's before its own).
	Timeout time.Duration
	// ProbeInterval (default DefaultProbeInterval) is how long decisions
	// follow the fail mode after a failure before one request probes.
	ProbeInterval time.Duration
	// Remember bounds the callers whose last known budget is kept (for
	// free refusals and fallback seeding), apart from them the callers
	// whose last peek is kept (for PeekReuse and fallback seeding), and
	// apart from both the aggregate buckets whose last known tokens are
	// kept (for fallback seeding); 0 means 65536 of each.
	Remember int
	// PeekReuse is how long after the primary last answered of a caller's
	// bucket (an admission, a refusal or a peek) what this Failover knows
	// of it — that answer and the settlements since — answers a Peek
	// without a call, refilled to the moment asked: 0 means
	// DefaultPeekReuse, a negative value asks the primary every time (and
	// keeps nothing of its answers). Peeks are free to their caller
	// (budget reads, dry runs), so this is what bounds the primary's calls
	// they cost: one per caller and interval on each replica, peeks that
	// miss at once sharing one call. Other replicas' spends within the
	// interval are not seen. While the primary fails, peeks follow the
	// fail mode.
	PeekReuse time.Duration
	Logger    *slog.Logger

	lim       breaker
	known     known
	peeks     singleflight.Group // the primary's peeks under way, by caller
	free      atomic.Uint64
	freePeeks atomic.Uint64
	carried   atomic.Uint64 // micro-tokens (see reconcile)
	late      lateSettlements
}

// DefaultPeekReuse is Failover.PeekReuse when left 0.
const DefaultPeekReuse = time.Second

// DefaultProbeInterval is Failover.ProbeInterval when left 0.
const DefaultProbeInterval = 500 * time.Millisecond

var _ Store = (*Failover)(nil)

// Validate checks the configuration.
func (f *Failover) Validate() error {
	if f.Primary == nil {
		return errors.New("throttle: a failover needs a primary store")
	}
	if !f.Mode.Valid() {
		return fmt.Errorf("throttle: fail_mode %q must be open, closed or local", f.Mode)
	}
	if f.Mode == FailLocal && f.Local == nil {
		return errors.New("throttle: fail_mode local needs a local store")
	}
	return nil
}

// Admit implements Store.
func (f *Failover) Admit(ctx context.Context, req Request) (Admission, error) {
	if err := req.validate(); err != nil {
		return Admission{}, err
	}
	if err := ctx.Err(); err != nil {
		return Admission{}, err
	}
	a, refused, from := f.known.refuse(req, time.Now())
	if refused {
		f.free.Add(1)
		return a, nil
	}
	fallback, err := f.onPrimary(ctx, f.timeout(), func(ctx context.Context) (called bool, err error) {
		a, err = f.Primary.Admit(ctx, req)
		return !a.inProcess, err
	})
	if !fallback {
		if err == nil {
			f.known.note(req, a, from, time.Now(), f.remember())
			if a.Ticket != nil {
				a.Ticket.known = &f.known // its settlement counts in what is known
			}
			if !a.inProcess { // a lease's answer says nothing of Redis now
				// What it spent locally goes with this request's
				// settlement: its answer says so already.
				owes := f.reconcile(req.Bucket, a.Ticket)
				if !a.Allowed {
					owes = max(owes, 0) // a refund owed travels only with an admission
				}
				if a.Refusal != RefusedAggregate { // else the result is the aggregate's
					a.Result.Remaining = owing(a.Result.Remaining, owes, req.Debt, req.Limit.Capacity)
				}
				if req.Aggregate != nil {
					f.forgetLocal(req.Aggregate.Key)
				}
			}
		}
		return a, err
	}
	switch f.Mode {
	case FailOpen:
		return Admission{Allowed: true, Result: Result{Allowed: true, Cost: req.Cost, Remaining: req.Limit.Capacity, Limit: req.Limit}}, nil
	case FailLocal:
		return f.admitLocal(ctx, req)
	}
	return Admission{}, f.errDown()
}

// admitLocal decides req on this replica's share of its buckets (FailLocal):
// each shared bucket's local twin, seeded with the replica's share of what
// the primary last reported (seedLocal), and the replica's share of the
// in-flight cap.
func (f *Failover) admitLocal(ctx context.Context, req Request) (Admission, error) {
	local := req
	local.Limit = f.localLimit(req.Limit, req.Cost)
	local.MaxInFlight = f.localInFlight(req.MaxInFlight)
	now := time.Now()
	f.seedLocal(req.Bucket, local.Bucket, now)
	// The aggregate is seeded as the caller's bucket is, and like it
	// forgotten once the primary answers for it again: otherwise a /48
	// the primary had drained would start full on every replica.
	if a := req.Aggregate; a != nil {
		local.Aggregate = &Bucket{Key: a.Key, Limit: f.localLimit(a.Limit, req.Cost)}
		f.seedLocal(*a, *local.Aggregate, now)
	}
	a, err := f.Local.Admit(ctx, local)
	if a.Ticket != nil {
		a.Ticket.owner = localFinisher{f}
	}
	return a, err
}

// localFinisher settles a request the fail mode admitted locally: in its
// local bucket while that holds it open; else — the bucket ended when
// the primary answered for the caller again (reconcile), or it expired —
// as a debt (or refund) of the caller's that the primary's next
// admission of it carries, where it was dropped: a request that ran long
// across a recovery cost only its price at the door, though its
// X-Request-Cost said what it ran. An aggregate's share of it is not
// carried (the next admission's settlement debits its aggregate too).
type localFinisher struct{ f *Failover }

func (l localFinisher) finish(t *Ticket, delta float64) {
	if !l.f.Local.finishOpen(t, delta) && !t.shadow {
		l.f.late.owe(t.key, delta)
	}
}

// lateSettlements are the settlements localFinisher could not make
// locally, by bucket key (micro-tokens), until the primary's next
// admission of each caller carries them (reconcile); and what the tickets
// the primary admitted carry of those and of local spending, until each
// settles (so that an answer meanwhile counts it: the primary has not
// seen it yet). At most maxLateSettlements callers are kept of each;
// beyond them a settlement is dropped, as all were before, and a carry
// not counted in answers.
type lateSettlements struct {
	n        atomic.Int64 // len(by) + len(carrying), read without mu on every admission
	mu       sync.Mutex
	by       map[string]float64
	carrying map[string]float64
}

const maxLateSettlements = 1 << 16

func (l *lateSettlements) owe(key string, delta float64) {
	l.add(&l.by, key, delta)
}

// carry adds d to what key's admitted tickets carry (a settled one's
// carry, negated, takes it away), and reports whether it was counted.
func (l *lateSettlements) carry(key string, d float64) bool {
	return l.add(&l.carrying, key, d)
}

func (l *lateSettlements) add(m *map[string]float64, key string, d float64) bool {
	if d == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if *m == nil {
		*m = make(map[string]float64)
	}
	v, ok := (*m)[key]
	if !ok && len(*m) >= maxLateSettlements {
		return false
	}
	if v += d; math.Abs(v) < 0.5 { // micro-tokens: nothing left
		delete(*m, key)
	} else {
		(*m)[key] = v
	}
	l.n.Store(int64(len(l.by) + len(l.carrying)))
	return true
}

// peek returns what key owes and what its admitted tickets carry, keeping
// both.
func (l *lateSettlements) peek(key string) (owed, carrying float64) {
	if l.n.Load() == 0 {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[key], l.carrying[key]
}

// take returns and forgets what key owes.
func (l *lateSettlements) take(key string) float64 {
	if l.n.Load() == 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.by[key]
	delete(l.by, key)
	l.n.Store(int64(len(l.by) + len(l.carrying)))
	return d
}

// seedLocal starts the local bucket local of the shared bucket b, unless
// it is there already. On one replica, from what the primary last
// reported of b, refilled since (full when nothing is known). On one of
// Replicas, from that report's tokens divided by them, as of the report
// and refilled since at the local rate — or, for a bucket the primary
// never reported, from its capacity divided by them, as of the outage's
// start — and kept until it would hold b's whole capacity, so that a
// request its share gives a larger capacity (see localLimit) finds it
// as it left it.
//
// What admissions still running carry to the primary from the last
// outage (lateSettlements.carrying), which the primary has not seen, is
// taken off first: a second outage while the first admission after the
// last one runs would otherwise start from a bucket that never paid it.
func (f *Failover) seedLocal(b, local Bucket, now time.Time) {
	_, carrying := f.late.peek(b.Key)
	owed := fromMicro(max(carrying, 0))
	n := f.Replicas
	if n <= 1 {
		tokens, ok := f.known.tokens(b.Key, now)
		if !ok && owed > 0 {
			tokens, ok = b.Limit.Capacity, true // a missing bucket is a full one
		}
		if ok {
			f.Local.seed(b.Key, local, tokens-owed, 0, 0)
		}
		return
	}
	tokens, at := b.Limit.Capacity, now
	if kb, ok := f.known.last(b.Key); ok {
		tokens, at = kb.remaining, kb.at
	} else if h := f.lim.health(); h.Degraded && h.Since.Before(now) {
		at = h.Since
	}
	f.Local.seed(b.Key, local, (tokens-owed)/float64(n), now.Sub(at), b.Limit.Capacity)
}

// Peek implements Store, with the same fallback as Admit. What the
// Failover learnt of the bucket within PeekReuse answers it without a
// call; peeks of one caller that miss it at once share one call. While
// the primary fails, every peek follows the fail mode, as admissions do.
func (f *Failover) Peek(ctx context.Context, b Bucket) (Result, error) {
	return f.peek(ctx, b, -1)
}

// PeekFloor implements FloorPeeker: Peek with the request's debt floor
// (what an admission taught, and a read within PeekReuse, answer it as
// they answer Peek: an admission's answer is lifted to its floor). While
// the primary fails with fail_mode local, the replica's share of b is
// read as an admission of cost would find it — its capacity never below
// cost (see localLimit) — so that a dry run of a price above the share
// says what the admission would do.
func (f *Failover) PeekFloor(ctx context.Context, b Bucket, debt, cost float64) (Result, error) {
	if f.Mode != FailLocal || !f.lim.health().Degraded || cost <= 0 {
		return f.peek(ctx, b, debt)
	}
	if err := checkPeek(ctx, b, debt); err != nil {
		return Result{}, err
	}
	return f.peekLocal(ctx, b, cost, debt)
}

// peek is Peek (debt < 0) or PeekFloor with the debt floor debt.
func (f *Failover) peek(ctx context.Context, b Bucket, debt float64) (Result, error) {
	if err := checkPeek(ctx, b, debt); err != nil {
		return Result{}, err
	}
	reuse := f.peekReuse()
	if reuse <= 0 || f.lim.health().Degraded {
		return f.peekPrimary(ctx, b, false, debt)
	}
	if res, ok := f.known.peek(b, time.Now(), reuse, debt); ok {
		f.freePeeks.Add(1)
		return f.owingRead(res, b, debt), nil
	}
	// The shared call is not cut short by the first asker hanging up; the
	// failover's Timeout bounds it. Only the first asker's function runs,
	// and it ends before any asker receives.
	called := false
	ch := f.peeks.DoChan(b.Key+"\x00"+strconv.FormatFloat(b.Limit.Rate, 'g', -1, 64)+"\x00"+strconv.FormatFloat(b.Limit.Capacity, 'g', -1, 64)+
		"\x00"+strconv.FormatFloat(debt, 'g', -1, 64), func() (v any, err error) {
		// A panic here would end the process (singleflight re-panics on
		// a goroutine of its own), not only this request.
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("throttle: a budget read panicked: %v", p)
			}
		}()
		// A call that ended since this peek missed may have answered it.
		if res, ok := f.known.peek(b, time.Now(), reuse, debt); ok {
			return f.owingRead(res, b, debt), nil
		}
		called = true
		return f.peekPrimary(context.WithoutCancel(ctx), b, true, debt)
	})
	select {
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case r := <-ch:
		if !called {
			f.freePeeks.Add(1)
		}
		res, _ := r.Val.(Result)
		return res, r.Err
	}
}

// peekLocal reads this replica's share of b, as an admission of cost
// (0: any) with the debt floor debt (< 0: none) would start from it while
// the primary fails.
func (f *Failover) peekLocal(ctx context.Context, b Bucket, cost, debt float64) (Result, error) {
	local := Bucket{Key: b.Key, Limit: f.localLimit(b.Limit, cost)}
	f.seedLocal(b, local, time.Now())
	res, _, err := peekWith(ctx, f.Local, local, debt, 0)
	return res, err
}

// peekWith reads b from s, with the debt floor debt where s can (a
// FloorPeeker) and debt is one (>= 0), for an admission of cost (0: any),
// else as Peek does; read is the floor it read under (-1: as stored).
func peekWith(ctx context.Context, s Store, b Bucket, debt, cost float64) (res Result, read float64, err error) {
	if fp, ok := s.(FloorPeeker); ok && debt >= 0 {
		res, err = fp.PeekFloor(ctx, b, debt, cost)
		return res, debt, err
	}
	res, err = s.Peek(ctx, b)
	return res, -1, err
}

// peekPrimary asks the primary (or the fail mode), with the debt floor
// debt (< 0: none), noting its answer for later peeks when note is set.
func (f *Failover) peekPrimary(ctx context.Context, b Bucket, note bool, debt float64) (Result, error) {
	var (
		res  Result
		read float64 // the floor res was read under
	)
	sent := time.Now()
	// A read waits for the caller's call on its way and for a finish's
	// call (a read rides with no other operation) before its own: half as
	// long again as an admission may.
	fallback, err := f.onPrimary(ctx, f.timeout()*3/2, func(ctx context.Context) (called bool, err error) {
		res, read, err = peekWith(ctx, f.Primary, b, debt, 0)
		return true, err
	})
	if !fallback {
		if err == nil {
			if note {
				f.known.notePeek(b, res, sent, time.Now(), f.remember(), read)
			}
			res = f.owingRead(res, b, debt)
		}
		return res, err
	}
	switch f.Mode {
	case FailOpen:
		return Result{Allowed: true, Remaining: b.Limit.Capacity, Limit: b.Limit}, nil
	case FailLocal: // the bucket the caller's next admission would start from
		return f.peekLocal(ctx, b, 0, debt)
	}
	return Result{}, f.errDown()
}

// FreeRefusals counts the requests refused without asking the primary.
func (f *Failover) FreeRefusals() uint64 { return f.free.Load() }

// RefusesFree reports whether an admission of cost from b would now be
// refused in process (see Failover: the primary refused the caller and its
// bucket still cannot pay), with that refusal's result. It asks nothing
// and spends nothing.
func (f *Failover) RefusesFree(b Bucket, cost float64) (Result, bool) {
	a, refused, _ := f.known.refuse(Request{Bucket: b, Cost: cost}, time.Now())
	return a.Result, refused
}

// KnownSince is b's bucket as this replica learnt of it after since —
// from the primary's answers to the admissions and budget reads of its
// caller, with the settlements of the caller's requests it admitted —
// refilled to now, and what a request of cost would wait for it; ok is
// false when nothing was learnt of it since (under b's limit). It asks
// nothing: a refusal held before it is answered (toll's tarpit) so shows
// what the caller's requests admitted meanwhile spent.
func (f *Failover) KnownSince(b Bucket, since time.Time, cost float64) (res Result, ok bool) {
	f.known.mu.Lock()
	kb, ok := f.known.latest(b.Key, b.Limit)
	f.known.mu.Unlock()
	if !ok || !kb.at.After(since) {
		return Result{}, false
	}
	est := kb.estimate(time.Now())
	res = Result{Cost: cost, Remaining: est, Limit: b.Limit, ResetAfter: millis(resetMS(est, b.Limit.Rate, b.Limit.Capacity))}
	if est < cost {
		res.RetryAfter = millis(retryMS(cost, est, b.Limit.Rate))
	}
	return res, true
}

// LocalSpendingCarried is the tokens reconcile has handed to requests the
// primary admitted after an outage, for their settlements to charge
// there (no lower than the debt floor, as any settlement): what callers
// spent from local buckets beyond what those refilled.
func (f *Failover) LocalSpendingCarried() float64 { return fromMicro(float64(f.carried.Load())) }

// FreePeeks counts the peeks answered without asking the primary.
func (f *Failover) FreePeeks() uint64 { return f.freePeeks.Load() }

func (f *Failover) peekReuse() time.Duration {
	if f.PeekReuse == 0 {
		return DefaultPeekReuse
	}
	return f.PeekReuse
}

// localLimit is l on one of Replicas processes, for a request of cost (0
// for a read): its capacity and rate divided by them — but the capacity
// never below cost, so that a request its share cannot hold can still be
// paid once the share has refilled to its price, and neither below what
// a limit may be (a micro-token, a micro-token per second, and a refill
// from empty within maxFillSeconds).
func (f *Failover) localLimit(l Limit, cost float64) Limit {
	if n := float64(f.Replicas); n > 1 {
		l.Capacity = max(l.Capacity/n, cost, 1e-6)
		l.Rate = max(l.Rate/n, 1e-6, l.Capacity/maxFillSeconds)
	}
	return l
}

// localInFlight is the in-flight cap max (0: DefaultMaxInFlight) on one of
// Replicas processes: max divided by them, rounded up (so at least 1).
func (f *Failover) localInFlight(most int) int {
	n := f.Replicas
	if n <= 1 {
		return most
	}
	if most <= 0 {
		most = DefaultMaxInFlight
	}
	return most/n + min(most%n, 1)
}

func (f *Failover) remember() int {
	if f.Remember > 0 {
		return f.Remember
	}
	return 1 << 16
}

func (f *Failover) timeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return 3 * DefaultTimeout
}

func (f *Failover) probeInterval() time.Duration {
	if f.ProbeInterval > 0 {
		return f.ProbeInterval
	}
	return DefaultProbeInterval
}

func (f *Failover) logger() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}

// onPrimary runs call on the primary, bounded by Timeout, unless the
// breaker keeps it out of the way. fallback reports that the caller must
// decide by the fail mode instead. A request whose own context is done
// gets its error: it is refused, never failed over, and says nothing about
// the store. call reports whether it reached the store: an admission the
// primary answered in process (from a lease it holds) is no sign that the
// store is back, and ends no outage.
func (f *Failover) onPrimary(ctx context.Context, timeout time.Duration, call func(context.Context) (called bool, err error)) (fallback bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	interval := f.probeInterval()
	if !f.lim.allow(time.Now(), interval) {
		f.lim.fallbacks.Add(1)
		return true, nil
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	called, err := call(sctx)
	cancel()
	switch {
	case err == nil:
		if called {
			f.succeeded(ctx)
		}
		return false, nil
	case ctx.Err() != nil:
		return false, err
	case errors.Is(err, ErrInvalidCost), errors.Is(err, ErrCostExceedsCapacity):
		return false, err // a bug in the caller, not a failing store
	case errors.Is(err, ErrBusy):
		return false, err // one caller's flood, not a failing store
	}
	f.lim.failed(ctx, f.logger(), time.Now(), interval, err, f.Mode)
	f.lim.fallbacks.Add(1)
	return true, nil
}

func (f *Failover) errDown() error {
	return fmt.Errorf("%w: %s", ErrStoreDown, f.lim.health().Err)
}

// Health is the state of the primary store as the Failover sees it.
type Health struct {
	// Degraded is true from the first failed call until a later call
	// succeeds. Meanwhile decisions follow the fail mode, and one request
	// per ProbeInterval tries the primary again.
	Degraded bool
	Since    time.Time // when it became degraded
	Err      string    // the last error
	// StoreErrors counts failed calls; Fallbacks counts decisions made
	// without the primary (by the fail mode).
	StoreErrors, Fallbacks uint64
	Mode                   FailMode
}

// Health reports the state of the primary store.
func (f *Failover) Health() Health {
	h := f.lim.health()
	h.Mode = f.Mode
	return h
}

// Doing says what the fail mode does while degraded, for /readyz.
func (f *Failover) Doing() string { return f.Mode.doing() }

// Recovered ends degraded mode after a successful out-of-band check of the
// primary (the background readiness probe, in every fail mode: a drained
// fail_mode closed instance, or an idle replica, gets no request to probe
// with). It must come from the process itself, never a caller's request.
// It only lets calls reach the primary again: a caller's local bucket is
// reconciled when the primary next answers for that caller.
func (f *Failover) Recovered(ctx context.Context) { f.succeeded(ctx) }

// Unreachable begins degraded mode after a failed out-of-band check of the
// primary (the background readiness probe: a store down as the process
// starts, or while no request comes, is found by no request), as a
// request's failed call does: calls follow the fail mode, and one probes
// the primary after the probe interval. Like Recovered, it must come
// from the process itself, never a caller's request.
func (f *Failover) Unreachable(ctx context.Context, err error) {
	f.lim.failed(ctx, f.logger(), time.Now(), f.probeInterval(), err, f.Mode)
}

// succeeded records a call of the primary that worked.
func (f *Failover) succeeded(ctx context.Context) {
	f.lim.succeeded(ctx, f.logger(), time.Now())
}

// forgetLocal drops the fail mode's local buckets of keys, which the
// primary has just answered for: their shared buckets count again, and
// the next outage seeds them from what the primary said. A caller's local
// bucket stays until then, whatever the primary answers for others: an
// outage of the Redis node holding one caller's key (a Cluster's master
// failing over) lets calls for other keys succeed, and forgetting every
// local bucket on each of those would re-seed that caller, at each probe,
// from its last answer before the outage refilled since — handing back
// what it spent locally meanwhile.
func (f *Failover) forgetLocal(keys ...string) {
	if f.Mode == FailLocal && f.Local != nil { // only fail_mode local fills it
		f.Local.forget(keys...)
	}
}

// reconcile ends the fail mode's local bucket of b, which the primary has
// just answered for (see forgetLocal), and hands what the caller spent
// from it beyond what it refilled to — which the primary's bucket, seeing
// none of it, holds too much — to t, the request the primary has just
// admitted: its settlement debits that too, down to the request's debt
// floor. Without such a request (a refusal, a peek, a shadow admission) a
// bucket that owes is kept for the next answer; one that owes nothing is
// dropped. A caller the primary never admits again keeps its local bucket
// until the bucket is full again, when it owes nothing and expires.
//
// It returns what the caller owes the primary, in tokens, beyond what the
// primary's answer says: carried by t, or still owed (without t), so that
// the answer's remaining tokens can say what the caller has.
func (f *Failover) reconcile(b Bucket, t *Ticket) (owes float64) {
	if f.Mode != FailLocal || f.Local == nil {
		return 0
	}
	carry := t != nil && !t.shadow && t.owner != nil
	owed := f.Local.settleOwed(b.Key, f.localLimit(b.Limit, 0), carry)
	late, carrying := f.late.peek(b.Key) // what earlier admissions carry, not yet settled: the primary has not seen it
	if !carry {
		return owed + fromMicro(late+carrying)
	}
	late = f.late.take(b.Key)
	if owed > 0 {
		f.carried.Add(uint64(toMicro(owed)))
	}
	if late > 0 {
		f.carried.Add(uint64(late))
	}
	t.carry = toMicro(owed) + late
	if f.late.carry(b.Key, t.carry) { // counted in answers until it settles
		t.carrier = &f.late
	}
	return fromMicro(t.carry + carrying)
}

// owingRead is res, a read of b under the debt floor debt (< 0: none),
// less what its caller owes the primary beyond it (reconcile): debts
// alone, as a refund owed reaches the bucket only with an admission.
func (f *Failover) owingRead(res Result, b Bucket, debt float64) Result {
	res.Remaining = owing(res.Remaining, max(f.reconcile(b, nil), 0), debt, b.Limit.Capacity)
	return res
}

// owing lowers the tokens a primary's answer reports of a caller by what
// it owes (reconcile), down to the debt floor debt (none when negative) —
// or, for what it is owed (a refund of a request admitted locally), raises
// them up to capacity, as its settlement will: an admission's answer only,
// whose ticket carries it (a read or a refusal counts debts alone, as a
// refund owed reaches the bucket only with the caller's next admission).
func owing(remaining, owes, debt, capacity float64) float64 {
	if owes == 0 {
		return remaining
	}
	remaining = min(remaining-owes, max(remaining, capacity))
	if debt >= 0 {
		remaining = max(remaining, -debt)
	}
	return remaining
}

// breaker is the Failover's view of its primary: after a failure, calls go
// straight to the fail mode for a probe interval, then one call probes.
type breaker struct {
	mu       sync.Mutex
	degraded bool
	since    time.Time
	retryAt  time.Time
	lastErr  string

	storeErrors, fallbacks atomic.Uint64
}

// allow reports whether this call may use the store: always when healthy;
// when degraded, only the first call after the probe interval (the probe).
func (b *breaker) allow(now time.Time, interval time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.degraded {
		return true
	}
	if now.Before(b.retryAt) {
		return false
	}
	b.retryAt = now.Add(interval) // other calls keep falling back meanwhile
	return true
}

// succeeded records a call that worked, logging a recovery once.
func (b *breaker) succeeded(ctx context.Context, log *slog.Logger, now time.Time) {
	b.mu.Lock()
	was, since := b.degraded, b.since
	b.degraded = false
	b.mu.Unlock()
	if was {
		log.LogAttrs(ctx, slog.LevelWarn, "budget store recovered: budgets are shared again",
			slog.Duration("degraded_for", now.Sub(since).Round(time.Millisecond)))
	}
}

// failed records a call that failed, logging the transition to degraded
// once (not once per request).
func (b *breaker) failed(ctx context.Context, log *slog.Logger, now time.Time, interval time.Duration, err error, mode FailMode) {
	b.storeErrors.Add(1)
	b.mu.Lock()
	was := b.degraded
	b.degraded, b.retryAt, b.lastErr = true, now.Add(interval), err.Error()
	if !was {
		b.since = now
	}
	b.mu.Unlock()
	if !was {
		log.LogAttrs(ctx, slog.LevelError, "budget store failing: "+mode.doing(),
			slog.String("fail_mode", string(mode)), slog.Duration("probe_interval", interval), slog.Any("err", err))
	}
}

func (b *breaker) health() Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Health{Degraded: b.degraded, Since: b.since, Err: b.lastErr,
		StoreErrors: b.storeErrors.Load(), Fallbacks: b.fallbacks.Load()}
}

// known remembers, per caller, the last budget the primary reported: its
// remaining tokens at a time, and whether it refused. Bounded: beyond its
// size about half is forgotten. What admissions taught of callers' own
// buckets (m), what peeks read (read) and what admissions taught of
// aggregate buckets (agg) are kept apart, each so bounded: budget reads,
// which are free, never push out what free refusals need, and never change
// it; nor do the aggregates, whose keys are not callers'.
type known struct {
	mu   sync.Mutex
	m    map[string]knownBudget
	read map[string]knownBudget
	// agg is what admissions taught of aggregate buckets, by the
	// aggregate's key, for fallback seeding only (see noteAggregate).
	agg map[string]knownBudget
	// spent holds the keys of the aggregate buckets this replica spends
	// through (an admission or a settlement through it): a read of such an
	// aggregate may lack it, and is not kept (notePeek).
	spent map[string]struct{}
	// settles counts the settlements counted in m, every caller's: each
	// entry records the count at its caller's last (knownBudget.last).
	settles uint64
}

type knownBudget struct {
	at        time.Time // when remaining was so
	asked     time.Time // when the primary answered of it
	remaining float64
	limit     Limit
	refused   bool
	// debt is the debt floor it was read under: an admission's
	// (Request.Debt), a read's (PeekFloor; -1 for Peek, as stored). A
	// read under a floor is answered only from what was read or admitted
	// under that floor (see known.peek).
	debt float64
	// last is known.settles when a settlement of the caller was last
	// counted here (0: none). A call that saw another value when it was
	// sent raced a settlement of the caller.
	last uint64
}

// estimate is the bucket's tokens at now, by its refill alone.
func (k knownBudget) estimate(now time.Time) float64 {
	return k.limit.refilled(k.remaining, now.Sub(k.at))
}

// note records the primary's answer a to req, whose call was sent when
// the caller's last settlement counted was from (knownBudget.last). A
// settlement of the caller counted since may have reached the
// primary before the call or after it — which, only the primary's queue
// knew — so a refusal that raced one is not kept for free refusals: the
// caller's next request asks the primary again.
func (k *known) note(req Request, a Admission, from uint64, now time.Time, size int) {
	if a.Refusal == RefusedInFlight { // says nothing of either bucket's tokens
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if req.Aggregate != nil {
		k.noteAggregate(*req.Aggregate, a, req.Cost, now, size)
	}
	if a.Refusal == RefusedAggregate {
		return // its Result is the aggregate's, not the caller's bucket
	}
	kb := knownBudget{at: now, asked: now, remaining: a.Result.Remaining, limit: req.Limit, refused: a.Refusal == RefusedBucket, debt: req.Debt}
	if cur, ok := k.m[req.Key]; ok && cur.limit == req.Limit {
		kb.last = cur.last
	}
	if a.raced || kb.last != from {
		kb.refused = false
	}
	k.m = remember(k.m, req.Key, kb, size)
}

// noteAggregate records what the primary's answer a, to a request of cost
// through aggregate bucket b, says of b. Only a refusal by the aggregate
// carries its tokens (admit.lua replies with the caller's bucket
// otherwise); they are kept as they are. An admission that spent from b
// says only that b could pay the cost: what is known of b (that refusal's
// tokens or a budget read's, refilled since) pays it here too, so that
// the next outage does not start b from tokens the primary has spent.
// Should what is known not cover the cost, b held more than this replica
// could see (another replica's refunds), and what is known is dropped:
// its level is unknown, and its fallback bucket starts full. Other answers
// (the caller's bucket refused, a shadow admission that spent nothing)
// say nothing of b's tokens and change nothing. Called with k.mu held.
func (k *known) noteAggregate(b Bucket, a Admission, cost float64, now time.Time, size int) {
	if a.Allowed && !a.Shadow {
		// A read of b lacks what this admission spent, and so does one on
		// its way: the next read of b asks the primary (what is known of b
		// seeds the fallback only).
		defer k.spentThrough(b.Key, size)
	}
	switch {
	case a.Refusal == RefusedAggregate:
		k.agg = remember(k.agg, b.Key, knownBudget{at: now, asked: now, remaining: a.Result.Remaining, limit: b.Limit}, size)
	case a.Allowed && !a.Shadow:
		kb, ok := k.latestAggregate(b.Key, b.Limit)
		if !ok {
			return
		}
		if est := kb.estimate(now); est >= cost {
			k.agg = remember(k.agg, b.Key, knownBudget{at: now, asked: now, remaining: est - cost, limit: b.Limit}, size)
			return
		}
		// A read of b left in place would seed the next outage instead.
		delete(k.agg, b.Key)
		delete(k.read, b.Key)
	}
}

// latestAggregate is what is known of aggregate bucket key under limit
// (see latestIn). Called with k.mu held.
func (k *known) latestAggregate(key string, limit Limit) (knownBudget, bool) {
	return k.latestIn(k.agg, key, limit)
}

// settle is tokens after a settlement that adds d (a refund when
// positive, a debit when negative), within capacity and the debt floor
// as a store settles it: neither moves a bucket that is past them further.
func settle(tokens, d, capacity, debt float64) float64 {
	if d > 0 {
		return min(tokens+d, max(tokens, capacity))
	}
	if d < 0 {
		return max(tokens+d, min(tokens, -debt))
	}
	return tokens
}

// notePeek records the answer of a peek sent at sent under the debt
// floor debt (-1: as stored), unless something was learnt of the caller
// since (a later read, an admission or a settlement of this replica,
// which the answer may lack).
func (k *known) notePeek(b Bucket, res Result, sent, now time.Time, size int, debt float64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kb, ok := k.read[b.Key]; ok && kb.at.After(sent) {
		return
	}
	if kb, ok := k.m[b.Key]; ok && kb.limit == b.Limit && kb.at.After(sent) {
		return // an admission or a settlement since: the read lacks it
	}
	if _, ok := k.spent[b.Key]; ok {
		// An aggregate this replica spends through: a settlement through
		// it goes to the primary on its caller's lane, after FinishDelay
		// or its retries, in no order with the read, which may lack it.
		return
	}
	k.read = remember(k.read, b.Key, knownBudget{at: now, asked: sent, remaining: res.Remaining, limit: b.Limit, debt: debt}, size)
}

// latest is what is known of a caller's bucket key under limit (see
// latestIn).
func (k *known) latest(key string, limit Limit) (knownBudget, bool) {
	return k.latestIn(k.m, key, limit)
}

// latestIn is what is known of key under limit: of what admissions taught
// (m) and what a peek read, the one the primary answered last.
func (k *known) latestIn(m map[string]knownBudget, key string, limit Limit) (knownBudget, bool) {
	kb, ok := m[key]
	ok = ok && kb.limit == limit
	if r, rok := k.read[key]; rok && r.limit == limit && (!ok || r.asked.After(kb.asked)) {
		return r, true
	}
	return kb, ok
}

// remember sets m[key] = kb, forgetting about half of m first when it
// holds size callers; it makes m when nil.
func remember[V any](m map[string]V, key string, kb V, size int) map[string]V {
	if m == nil {
		m = make(map[string]V)
	}
	if _, ok := m[key]; !ok && len(m) >= size {
		n := 0
		for key := range m { // map order is random: forget about half
			if n++; n%2 == 0 {
				delete(m, key)
			}
		}
	}
	m[key] = kb
	return m
}

// peek answers a peek of b under the debt floor debt (-1: as stored)
// from what is known of it, if the primary answered of it within reuse,
// under b's limit and, for a read under a floor, under that floor (a
// bucket read or admitted under another may lie deeper than this one
// lifts it, or be lifted higher): its tokens refilled to now.
func (k *known) peek(b Bucket, now time.Time, reuse time.Duration, debt float64) (Result, bool) {
	k.mu.Lock()
	kb, ok := k.latest(b.Key, b.Limit)
	k.mu.Unlock()
	if age := now.Sub(kb.asked); !ok || age < 0 || age > reuse || (debt >= 0 && kb.debt != debt) {
		return Result{}, false
	}
	est := kb.estimate(now)
	return Result{Allowed: true, Remaining: est, Limit: b.Limit,
		ResetAfter: millis(resetMS(est, b.Limit.Rate, b.Limit.Capacity))}, true
}

// settled counts the settlement of t, a request the primary admitted, by
// delta micro-tokens (a debit when positive, a refund when negative), in
// what is known of its caller's bucket, within the bucket's debt floor and
// capacity as the store settles it, and in what admissions taught of its
// aggregate bucket, which the store settles as well. A refund the store
// drops (a request past its TTL) is counted all the same: what is known
// may read high by it, with leases or without.
func (k *known) settled(t *Ticket, delta float64, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := -fromMicro(delta)
	k.settles++
	for _, m := range []map[string]knownBudget{k.m, k.read} {
		kb, ok := m[t.key]
		if !ok || kb.limit != t.limit {
			continue
		}
		kb.remaining, kb.at, kb.last = settle(kb.estimate(now), d, t.limit.Capacity, t.debt), now, k.settles
		m[t.key] = kb
	}
	if t.agg != nil {
		if kb, ok := k.agg[t.agg.Key]; ok && kb.limit == t.agg.Limit {
			kb.remaining, kb.at = settle(kb.estimate(now), d, t.agg.Limit.Capacity, t.debt), now
			k.agg[t.agg.Key] = kb
		}
		k.spentThrough(t.agg.Key, 0) // a read of the aggregate lacks the settlement
	}
}

// spentThrough records that this replica spent through the aggregate
// bucket key: a read of it kept, or on its way, lacks that. size bounds
// the keys remembered as remember does (0: a settlement's, whose
// admission made room). Called with k.mu held.
func (k *known) spentThrough(key string, size int) {
	delete(k.read, key)
	if size == 0 {
		size = math.MaxInt
	}
	k.spent = remember(k.spent, key, struct{}{}, size)
}

// refuse answers a request of a caller the primary refused, when its
// bucket still cannot pay: a refusal without a call. Otherwise it returns
// what the call about req starts from: the caller's last settlement
// counted (see note).
func (k *known) refuse(req Request, now time.Time) (Admission, bool, uint64) {
	k.mu.Lock()
	kb, ok := k.m[req.Key]
	k.mu.Unlock()
	from := kb.last // 0 when nothing is known of the caller
	if req.Shadow || !ok || !kb.refused || kb.limit != req.Limit {
		return Admission{}, false, from
	}
	est := kb.estimate(now)
	if est >= req.Cost {
		return Admission{}, false, from
	}
	retry := millis(retryMS(req.Cost, est, req.Limit.Rate))
	return Admission{Refusal: RefusedBucket, Result: Result{Cost: req.Cost, Remaining: est, Limit: req.Limit,
		RetryAfter: retry, ResetAfter: secondsToDuration((req.Limit.Capacity - est) / req.Limit.Rate)}}, true, from
}

// tokens is the estimated tokens now of the bucket key (a caller's or an
// aggregate's), if known (see last).
func (k *known) tokens(key string, now time.Time) (float64, bool) {
	kb, ok := k.last(key)
	if !ok {
		return 0, false
	}
	return kb.estimate(now), true
}

// last is what is known of the bucket key (a caller's or an
// aggregate's), whatever its limit: of what was learnt of it, what the
// primary answered last.
func (k *known) last(key string) (knownBudget, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kb, ok := k.m[key]
	if r, rok := k.read[key]; rok && (!ok || r.asked.After(kb.asked)) {
		kb, ok = r, true
	}
	if g, gok := k.agg[key]; gok && (!ok || g.asked.After(kb.asked)) {
		kb, ok = g, true
	}
	return kb, ok
}
