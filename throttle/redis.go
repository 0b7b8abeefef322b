package throttle

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

//go:embed admit.lua
var admitLua string

// RedisStore keeps every caller's budget in Redis — a bucket key and a hash
// of its open requests, in one hash slot — and changes it only with
// admit.lua, one batch of operations per call.
//
// Calls are grouped per caller: while one batch of a caller is on its way,
// the requests that arrive for the same caller wait for it and then go
// together in the next one, with the finishes (settlements, releases) of
// earlier requests. A lone request costs one call; a burst of N costs far
// fewer than N. Finishing never makes a client wait: a finish rides on the
// caller's next batch, or is sent FinishDelay after the request ended.
//
// Nothing is applied twice. Every admitted request is open under an id
// until it is finished; a finish or void of an id that is not open does
// nothing, so finishes, voids and moves are simply sent again after a
// failed call.
// A batch whose answer never came (a timeout, a lost connection) may or may
// not have been applied: its callers were told it failed, and were decided
// by the fail mode elsewhere, so its admits are voided — the voids go with
// the caller's next call, or after RetryInterval, backing off while Redis
// keeps failing, until they can no longer change the bucket — refunded if
// they were applied, or, if they were not, turned away by a tombstone
// should the batch still reach Redis before its deadline (after it, a
// batch admits nothing anyway, and its callers get an error).
type RedisStore struct {
	rdb    redis.Scripter
	script *redis.Script
	opts   RedisOptions

	mu     sync.Mutex
	lanes  map[string]*lane
	leases map[string]*keyLease
	seen   map[string]seenBucket // callers' buckets as replies showed them (with leases)
	seenAt int                   // len(seen) at which stale entries are swept

	stats redisStats

	// afterFunc makes the lanes' timers: time.AfterFunc when nil (a
	// test's timers, that it fires itself, otherwise).
	afterFunc func(time.Duration, func()) *time.Timer
}

// RedisOptions tune a RedisStore. The zero value is ready to use.
type RedisOptions struct {
	// Timeout bounds one call to Redis (default 50 ms). A request's wait
	// for the call before it counts too: callers bound Admit with a
	// context.
	Timeout time.Duration
	// ClockSkew is how far Redis's clock may run ahead of this process's
	// (default 1 s): a batch carries its deadline (now + Timeout +
	// ClockSkew) and admits nothing when it reaches Redis later by Redis's
	// clock — its callers then get an error, decided by the fail mode, so a
	// Redis clock further ahead than that fails every admit over — and the
	// tombstones the voids of an unanswered batch leave hold until then.
	ClockSkew time.Duration
	// FinishDelay is how long a finish waits for a request of the same
	// caller to ride on before it is sent on its own (default 5 ms).
	FinishDelay time.Duration
	// RetryInterval is how long finishes and voids that could not be sent
	// wait before they are tried again (default 500 ms), unless their
	// caller's next call carries them first. The wait doubles with each
	// failed call of the caller in a row, up to MaxRetryInterval, with up
	// to a quarter more at random; an answered call resets it. Once a
	// finish or void can no longer change its bucket — its request's TTL
	// and the bucket's refill from its debt floor to its capacity have
	// passed — it is dropped (RedisStats.Moot).
	RetryInterval time.Duration
	// MaxRetryInterval bounds that wait (default 30 s, and at least
	// RetryInterval): a Redis that stays down costs each caller with
	// something left to send one call per MaxRetryInterval at most.
	MaxRetryInterval time.Duration
	// MaxBatch bounds the operations of one call (default 128).
	MaxBatch int
	// MaxPending bounds the operations waiting for one caller (default
	// 4096). Admits take at most three quarters of it, so that the
	// settlements of running requests find a place: past that an admit
	// fails at once (ErrBusy), and past MaxPending a finish is dropped
	// (counted; its slot expires with its TTL).
	MaxPending int
	// LeaseRequests is how many requests' price a lease takes ahead of a
	// caller's requests (see keyLease), at most an eighth of the bucket
	// (default 8; negative: no leases), which admits up to twice as many
	// requests. Redis counts what a lease took as leased while it is out,
	// and no refill or refund — whichever process sends it — fills the
	// bucket beyond its capacity less that, so the bucket and its leases
	// never hold more than the capacity; the give-back replays what the
	// lease admitted at its moments.
	LeaseRequests int
	// LeaseHold is how long a lease lives before what is left of it goes
	// back (default 500 ms, and at most half the request TTL).
	LeaseHold time.Duration
}

// Defaults of RedisOptions.
const (
	DefaultTimeout       = 50 * time.Millisecond
	DefaultClockSkew     = time.Second
	DefaultFinishDelay   = 5 * time.Millisecond
	DefaultRetryInterval = 500 * time.Millisecond
	DefaultLeaseRequests = 8
	DefaultLeaseHold     = 500 * time.Millisecond

	DefaultMaxRetryInterval = 30 * time.Second
)

func (o RedisOptions) withDefaults() RedisOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ClockSkew <= 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.FinishDelay <= 0 {
		o.FinishDelay = DefaultFinishDelay
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = DefaultMaxRetryInterval
	}
	o.MaxRetryInterval = max(o.MaxRetryInterval, o.RetryInterval)
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.LeaseRequests == 0 {
		o.LeaseRequests = DefaultLeaseRequests
	}
	if o.LeaseHold <= 0 {
		o.LeaseHold = DefaultLeaseHold
	}
	return o
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store over rdb: a *redis.Client, *redis.ClusterClient
// or *redis.Ring all fit. Keys from BucketKey are hash-tagged for Cluster.
func NewRedisStore(rdb redis.Scripter, opts RedisOptions) *RedisStore {
	return &RedisStore{rdb: rdb, script: redis.NewScript(admitLua), opts: opts.withDefaults(),
		lanes: make(map[string]*lane), leases: make(map[string]*keyLease), seen: make(map[string]seenBucket)}
}

// OpenKey is the hash of a caller's open requests: bucketKey + ":open", in
// the same hash slot.
func OpenKey(bucketKey string) string { return bucketKey + ":open" }

// VoidKey is the hash of a caller's tombstones (voided admits that may
// still come): bucketKey + ":void", in the same hash slot.
func VoidKey(bucketKey string) string { return bucketKey + ":void" }

// RedisStats counts what a RedisStore sent.
type RedisStats struct {
	Calls    uint64 // script calls
	Ops      uint64 // operations in them
	Admits   uint64 // admits among them
	Voids    uint64 // admits voided after an unanswered batch
	Failures uint64 // calls that failed or were not answered in time
	Dropped  uint64 // finishes (and moves) dropped: too many pending for one caller, or the Redis client closed
	Moot     uint64 // finishes, voids and moves dropped after failed calls, once they could no longer change their bucket
	Leases   uint64 // leases granted
	Local    uint64 // requests admitted in process, on a lease
}

type redisStats struct {
	calls, ops, admits, voids, failures, dropped, moot, leases, local atomic.Uint64
}

// Stats reports what the store sent so far.
func (s *RedisStore) Stats() RedisStats {
	return RedisStats{Calls: s.stats.calls.Load(), Ops: s.stats.ops.Load(), Admits: s.stats.admits.Load(),
		Voids: s.stats.voids.Load(), Failures: s.stats.failures.Load(), Dropped: s.stats.dropped.Load(),
		Moot: s.stats.moot.Load(), Leases: s.stats.leases.Load(), Local: s.stats.local.Load()}
}

// Admit implements Store. A request is admitted in process when this
// store holds an idle lease of its caller that can pay it, else by one
// script call shared with the caller's other operations.
func (s *RedisStore) Admit(ctx context.Context, req Request) (Admission, error) {
	if err := req.validate(); err != nil {
		return Admission{}, err
	}
	sh := shapeOf(req)
	if a, ok := s.admitLeased(req, sh); ok {
		return a, nil
	}
	a, held, err := s.admitRemote(ctx, req, sh, false)
	// A refusal (or a shadow admission) that the tokens or the slot of the
	// caller's lease would have turned into an admission is asked again
	// with the lease given back, as the bucket would have held them: the
	// slot is the request's when no request ran on it from before the
	// admit was queued until its reply (besideLocked).
	for range maxLeaseRetries {
		if err != nil || held == nil {
			break
		}
		a.Ticket.Release() // a shadow admission's slot
		s.retire(held)
		a, held, err = s.admitRemote(ctx, req, sh, true)
	}
	return a, err
}

// maxLeaseRetries bounds how often one request is asked again after a
// refusal that a lease's tokens might have paid.
const maxLeaseRetries = 3

// admitRemote admits req by a script call on its caller's lane. A refusal
// comes with the caller's lease that held tokens when Redis refused, if
// any. again: req is asked again after such a refusal (enqueueAdmit).
func (s *RedisStore) admitRemote(ctx context.Context, req Request, sh shape, again bool) (Admission, *keyLease, error) {
	kind := opAdmit
	if req.Shadow {
		kind = opShadow
	}
	p := &pending{op: op{kind: kind, id: newID(), amount: toMicro(req.Cost)}, agg: req.Aggregate, sh: sh,
		done: make(chan opResult, 1), failed: make(chan error, 1), span: trace.SpanContextFromContext(ctx)}
	l, mine, err := s.enqueueAdmit(req, sh, p, again)
	if err != nil {
		return Admission{}, nil, err
	}
	cancelled := ctx.Done()
	if mine {
		s.drainOwn(l, p)
		cancelled = nil // answered: there is nothing left to abandon
	}
	select {
	case r := <-p.done:
		if left := p.lacking; left > 0 { // Redis does not count what the lease holds
			capacity := sh.capacity
			if r.status == stAggregate {
				capacity = sh.aggCap
			}
			r.tokens = math.Min(r.tokens+left, capacity)
		}
		a, err := admission(req, sh, p.op.amount, r)
		if err != nil {
			return Admission{}, nil, err
		}
		if a.Allowed {
			paid := p.op.amount
			if a.Shadow {
				paid = 0
			}
			a.Ticket = &Ticket{owner: s, key: req.Key, agg: req.Aggregate, limit: req.Limit, debt: req.Debt, id: p.op.id,
				paid: paid, cost: req.Cost, shadow: a.Shadow, maxOpen: sh.max, ttl: time.Duration(sh.ttlMS) * time.Millisecond}
		}
		return a, p.refusedBeside, nil
	case err := <-p.failed:
		return Admission{}, nil, err
	case <-cancelled:
		if s.abandon(req.Key, p) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Never sent: the call's time went waiting behind the
			// caller's own earlier operations on its lane, which says
			// nothing of the store — a Failover that took it for a
			// failing store would hand every caller to its fail mode
			// for one caller's flood.
			return Admission{}, nil, fmt.Errorf("%w for %q: still queued at the call's deadline", ErrBusy, req.Key)
		}
		return Admission{}, nil, ctx.Err()
	}
}

// enqueueAdmit queues the admit p on its caller's lane, with what the
// caller's lease needs (leaseOpsLocked), in one step: nothing of the lease
// can change between the decision and the queue. p records the caller's
// lease beside it, and whether it stays (its slot runs a request:
// pending.besideHeld). An admit asked again
// (again) also goes without a lease of its caller still asked for
// (forgoAskLocked), which would otherwise take tokens and a slot ahead of
// it once more.
func (s *RedisStore) enqueueAdmit(req Request, sh shape, p *pending, again bool) (l *lane, mine bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := []*pending{p}
	if s.opts.LeaseRequests > 0 {
		if again {
			s.forgoAskLocked(req.Key)
		}
		back, ask, held := s.leaseOpsLocked(req, sh)
		if ls := s.leases[req.Key]; ls != nil {
			p.queueBeside(ls)
			p.besideHeld = ls == held
		}
		if back != nil {
			ops = append([]*pending{back}, ops...)
		}
		if ask != nil {
			ops = append(ops, ask)
		}
	}
	l, mine, err = s.enqueueLocked(req.Key, req.Aggregate, sh, true, ops...)
	if err != nil && ops[0] != p {
		// The lease was taken back: its give-back goes as a finish, even
		// to a queue at MaxPending (one per lease), or its tokens would be
		// lost and its slot held until its TTL.
		back := ops[0]
		if back.sh == (shape{}) {
			back.sh = sh
		}
		q := s.laneLocked(req.Key)
		q.queue = append(q.queue, back)
		s.kickLocked(q, false, false)
	}
	return l, mine, err
}

// abandon gives up on an admit and reports whether it was never sent.
// One still queued is simply dropped. One on its way is marked: if its
// reply says it was admitted, it is voided (its caller was told it
// failed). A reply that arrived just now is voided here.
func (s *RedisStore) abandon(key string, p *pending) (unsent bool) {
	s.mu.Lock()
	l := s.lanes[key]
	if !p.sent && l != nil {
		for i, q := range l.queue {
			if q == p {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				s.mu.Unlock()
				return true
			}
		}
	}
	p.abandoned = true
	var void bool
	select {
	case r := <-p.done:
		void = admitted(r.status)
	default:
	}
	s.mu.Unlock()
	if void {
		s.stats.voids.Add(1)
		_, _, _ = s.enqueue(key, p.agg, p.sh, false, &pending{op: op{kind: opVoid, id: p.op.id}})
	}
	return false
}

// admitted reports whether an admit's status opened the request.
func admitted(status int) bool {
	return status == stAdmitted || status == stShadow || status == stAlreadyOpen
}

// finish implements finisher: the finish joins the caller's queue, after
// what the caller's lease needs of it (beforeFinishLocked) — but for a
// request that also draws on an aggregate bucket, which the lease knows
// nothing of: its settlement goes to Redis whole, on both buckets.
func (s *RedisStore) finish(t *Ticket, delta float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &pending{}
	if ls := s.leases[t.key]; ls != nil && t.agg == nil {
		delta = s.beforeFinishLocked(ls, p, delta)
	}
	p.op = op{kind: opFinish, id: t.id, amount: delta}
	_, _, _ = s.enqueueLocked(t.key, t.agg, t.shape(), false, p)
}

// Peek implements Store: an operation that changes nothing, on the
// caller's lane, so that it is answered after every settlement of the
// caller queued before it: a finish waiting for FinishDelay, or for its
// retry after a failed call, is sent first. Like an admit, it waits for
// the caller's call on its way, each call bounded by Timeout; ctx bounds
// the whole.
func (s *RedisStore) Peek(ctx context.Context, b Bucket) (Result, error) {
	return s.PeekFloor(ctx, b, -1, 0)
}

// PeekFloor implements FloorPeeker: Peek, the script loading the bucket
// with the request's debt floor.
func (s *RedisStore) PeekFloor(ctx context.Context, b Bucket, debt, _ float64) (Result, error) {
	if err := checkPeekArgs(b, debt); err != nil {
		return Result{}, err
	}
	sh := peekShape(b, debt)
	p := &pending{op: op{kind: opPeek}, sh: sh, done: make(chan opResult, 1), failed: make(chan error, 1),
		span: trace.SpanContextFromContext(ctx)}
	s.mu.Lock()
	if l := s.lanes[b.Key]; l != nil {
		for _, q := range l.queue { // what waits for a retry goes now, ahead of the peek
			q.notBefore = time.Time{}
		}
	}
	if ls := s.leases[b.Key]; ls != nil { // what the reply lacks of it counts (peekReadingLocked)
		p.queueBeside(ls)
		p.besideHeld = true
	}
	l, mine, err := s.enqueueLocked(b.Key, nil, sh, true, p)
	s.mu.Unlock()
	if err != nil {
		return Result{}, fmt.Errorf("throttle: peek %q: %w", b.Key, err)
	}
	if mine {
		s.drainOwn(l, p)
	}
	var tokens float64
	select {
	case r := <-p.done:
		tokens = r.tokens
	case err := <-p.failed:
		return Result{}, fmt.Errorf("throttle: peek %q: %w", b.Key, err)
	case <-ctx.Done():
		s.mu.Lock()
		unsent := !p.sent
		if l := s.lanes[b.Key]; l != nil && unsent {
			l.queue = slices.DeleteFunc(l.queue, func(q *pending) bool { return q == p })
		}
		s.mu.Unlock()
		if unsent && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Its time went waiting behind its caller's own operations, as
			// an admit's may (admitRemote): the caller's flood, not the
			// store's failure.
			return Result{}, fmt.Errorf("throttle: peek %q: %w: still queued at the call's deadline", b.Key, ErrBusy)
		}
		return Result{}, fmt.Errorf("throttle: peek %q: %w", b.Key, ctx.Err())
	}
	return Result{Allowed: true, Remaining: fromMicro(tokens), Limit: b.Limit,
		ResetAfter: millis(resetMS(tokens, sh.rate, sh.capacity))}, nil
}

// Flush gives back every lease and sends every pending finish and void,
// waiting at most until ctx ends (at shutdown). The voids of an unanswered
// batch, and finishes whose call failed, are tried again at once, then
// after their lane's retry wait, and Flush waits for them (or until they
// are moot); a lease whose slot runs a request goes back when the request
// finishes.
func (s *RedisStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	for _, l := range s.lanes {
		for _, p := range l.queue { // what waits for a retry goes now
			p.notBefore = time.Time{}
		}
		l.fails = 0 // and, failing again, backs off from RetryInterval anew while ctx lasts
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		left := 0
		for _, ls := range s.leases {
			left++
			ls.done = true
			if ls.granted && !ls.busy {
				s.giveBackLocked(ls)
			}
		}
		for _, l := range s.lanes {
			left += len(l.queue)
			if l.busy {
				left++
			} else if len(l.queue) > 0 {
				s.kickLocked(l, true, false)
			}
		}
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("throttle: %d budget operations not sent: %w", left, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// newID returns 16 random hex digits: an open request's id. It is never
// client text.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
