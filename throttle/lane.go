package throttle

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// pending is one operation waiting for, or riding on, a batch.
type pending struct {
	op op
	// agg and sh are the aggregate and shape it is sent with: a batch
	// carries the operations of one shape only (see takeLocked).
	agg       *Bucket
	sh        shape
	done      chan opResult // admits and peeks only: where the reply goes
	failed    chan error
	sent      bool // taken into a batch (under RedisStore.mu)
	abandoned bool // its caller stopped waiting after it was sent (under RedisStore.mu)
	notBefore time.Time
	lease     *keyLease // a lease's admit: its reply grants the lease
	// spends is the replay of a lease's give-back or move (op.replay,
	// dated when the batch is sent)
	spends []spend
	// refusedBeside is the caller's lease that held the tokens, or an idle
	// slot, that Redis refused (or shadowed) this admit for want of (under
	// RedisStore.mu).
	refusedBeside *keyLease
	// comingTo is the lease that counts this finish's settlement as on its
	// way (keyLease.coming) until its reply (under RedisStore.mu).
	comingTo *keyLease
	// leaseAt is the caller's lease when this admit was queued, leaseGen
	// its gen then, and leaseRan its count then if a request ran on it
	// then, else 0 (queueBeside; under RedisStore.mu).
	leaseAt  *keyLease
	leaseGen int
	leaseRan int
	// besideHeld: leaseAt is the caller's lease that stayed when this
	// admit was queued (its slot ran a request). lacking is what the reply
	// lacks of it (leaseLacking; set with the reply, under RedisStore.mu).
	besideHeld bool
	lacking    float64
	// handed is what a lease's hand-back hands back: what the lease held
	// then, at least 0.
	handed float64
	// span is the admit's caller's span, if any: the batch's call is traced
	// below the first one of the batch that has one.
	span trace.SpanContext
	// mootAt is when a settlement or void whose call failed can no longer
	// change its caller's bucket (mootAfter): it is dropped unsent then.
	// Zero: never (admits, reads, moves and leases' give-backs, and what
	// has not failed yet).
	mootAt time.Time
}

// lane is one caller's queue: at most one batch of it is on its way.
type lane struct {
	key, open string
	busy      bool
	queue     []*pending
	// timer is the lane's one timer set to kick it (timerLocked), if any.
	timer *time.Timer
	// fails counts its calls that failed in a row (under RedisStore.mu):
	// what they leave to send again waits longer after each (retryWait).
	fails int
}

// enqueue adds ps to key's lane, in order, and starts a batch when none is
// on its way: at once for an admit, after FinishDelay for a finish. Each
// operation goes with the aggregate agg and the shape sh, unless it has a
// shape of its own (a lease's hand-back: its lease's). mine
// reports that the admit's own goroutine is to send the batch (see
// drainOwn).
func (s *RedisStore) enqueue(key string, agg *Bucket, sh shape, now bool, ps ...*pending) (l *lane, mine bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enqueueLocked(key, agg, sh, now, ps...)
}

// enqueueLocked is enqueue under RedisStore.mu.
func (s *RedisStore) enqueueLocked(key string, agg *Bucket, sh shape, now bool, ps ...*pending) (l *lane, mine bool, err error) {
	l = s.laneLocked(key)
	limit := s.opts.MaxPending
	if now {
		// Admits (and reads) leave a quarter of the queue to the
		// settlements of requests already running — finishes, and voids
		// of admissions their callers gave up — which are dropped when
		// the queue is full: a flood of admits must not cost Redis a
		// debit, a refund or a slot's release.
		limit -= s.opts.MaxPending / 4
	}
	if over := len(l.queue) + len(ps) - limit; over > 0 && ps[0].op.kind != opPeek {
		s.dropPeeksLocked(l, over) // reads, free to their caller, give way
	}
	if len(l.queue)+len(ps) > limit {
		if now {
			for _, p := range ps {
				if p.lease != nil {
					s.dropLocked(p.lease)
				}
			}
			return nil, false, fmt.Errorf("%w for %q", ErrBusy, key)
		}
		for _, p := range ps {
			if len(p.spends) > 0 { // what a lease admitted: never lost (one per lease)
				l.queue = append(l.queue, p)
				s.kickLocked(l, false, false)
				continue
			}
			s.stats.dropped.Add(1)
			p.arrived()
		}
		return l, false, nil
	}
	for _, p := range ps {
		if p.sh == (shape{}) {
			p.agg, p.sh = agg, sh
		}
	}
	l.queue = append(l.queue, ps...)
	return l, s.kickLocked(l, now, now), nil
}

// dropPeeksLocked takes up to n reads not yet sent out of l's queue, the
// latest first, each answered ErrBusy: a caller's free reads never cost
// it a place its settlements or admits need.
func (s *RedisStore) dropPeeksLocked(l *lane, n int) {
	for i := len(l.queue) - 1; i >= 0 && n > 0; i-- {
		if p := l.queue[i]; p.op.kind == opPeek && !p.sent {
			l.queue = slices.Delete(l.queue, i, i+1)
			p.failed <- fmt.Errorf("%w for %q (its read gave way)", ErrBusy, l.key)
			n--
		}
	}
}

// laneLocked is key's lane, made when there is none.
func (s *RedisStore) laneLocked(key string) *lane {
	l := s.lanes[key]
	if l == nil {
		l = &lane{key: key, open: OpenKey(key)}
		s.lanes[key] = l
	}
	return l
}

// kickLocked starts l's next batch, now or after FinishDelay, unless one is
// on its way (whose end starts the next). A batch to start now goes on a
// goroutine of its own, or, with own, is left to the caller: kickLocked
// then reports true, and the caller must send it (step or drain).
func (s *RedisStore) kickLocked(l *lane, now, own bool) bool {
	if l.busy {
		return false
	}
	if !now {
		s.timerLocked(l, s.opts.FinishDelay)
		return false
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.busy = true
	if !own {
		go s.drain(l)
	}
	return own
}

// timerLocked kicks l after d, unless a timer is set already. The timer's
// own goroutine sends the batch. So a finish queued while the lane waits
// out its retry after a failed call waits with it — the lane backs off
// from a Redis that fails — unless an admit's call, which goes at once,
// carries it first. A timer that a kick stopped too late (it had fired,
// its func waiting for the lock) does nothing when its func runs: the
// kick sent what was ready, and the timer the lane may have set since
// (l.timer) stays its only one.
func (s *RedisStore) timerLocked(l *lane, d time.Duration) {
	if l.timer != nil {
		return
	}
	var t *time.Timer
	t = afterFunc(s.afterFunc, d, func() {
		s.mu.Lock()
		if l.timer != t { // stopped by a kick after it fired
			s.mu.Unlock()
			return
		}
		l.timer = nil
		mine := s.kickLocked(l, true, true)
		s.mu.Unlock()
		if mine {
			s.drain(l)
		}
	})
	l.timer = t
}

// afterFunc is time.AfterFunc, or made, a test's timer that it fires
// itself (RedisStore.afterFunc, Global.afterFunc).
func afterFunc(made func(time.Duration, func()) *time.Timer, d time.Duration, f func()) *time.Timer {
	if made != nil {
		return made(d, f)
	}
	return time.AfterFunc(d, f)
}

// drain sends l's batches until nothing is ready, then lets the lane go.
func (s *RedisStore) drain(l *lane) {
	for s.step(l) {
	}
}

// drainOwn sends l's batches on the goroutine of the admit p, which
// started them, until p is answered — one batch, p's own, unless more
// than MaxBatch operations were ready before it — and leaves the rest to a
// goroutine. A request to an idle lane so costs one call and no goroutine
// (nor the stack a new one would grow for the Redis client).
func (s *RedisStore) drainOwn(l *lane, p *pending) {
	for len(p.done) == 0 && len(p.failed) == 0 {
		if !s.step(l) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready, wait := s.scanLocked(l, time.Now()); !ready {
		s.idleLocked(l, wait)
		return
	}
	go s.drain(l)
}

// step sends l's next batch and reports true; when nothing is ready, it
// lets the lane go instead and reports false.
func (s *RedisStore) step(l *lane) bool {
	s.mu.Lock()
	batch, wait := s.takeLocked(l)
	if len(batch) == 0 {
		s.idleLocked(l, wait)
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	s.send(l, batch)
	return true
}

// idleLocked lets l go when nothing is sent for it: it is forgotten when
// its queue is empty, else kicked again once the first operation is ready
// (after wait).
func (s *RedisStore) idleLocked(l *lane, wait time.Duration) {
	l.busy = false
	if len(l.queue) > 0 {
		s.timerLocked(l, wait)
		return
	}
	if s.lanes[l.key] == l {
		delete(s.lanes, l.key)
	}
}

// scanLocked reports whether any of l's operations is ready to send (or
// to drop: moot) at now, and how long until the first one that is not
// becomes either (see due).
func (s *RedisStore) scanLocked(l *lane, now time.Time) (anyReady bool, wait time.Duration) {
	wait = s.opts.MaxRetryInterval
	for _, p := range l.queue {
		d := p.due(now)
		if d <= 0 {
			anyReady = true
		} else if d < wait {
			wait = d
		}
	}
	return anyReady, wait
}

// due is how long from now until p is ready to send again, or moot,
// whichever comes first; 0 or less when it is either.
func (p *pending) due(now time.Time) time.Duration {
	d := p.notBefore.Sub(now)
	if !p.mootAt.IsZero() {
		d = min(d, p.mootAt.Sub(now))
	}
	return d
}

// dropMootLocked takes out of l's queue, unsent, the settlements and voids
// whose call failed and that can no longer change their caller's bucket
// (pending.mootAt), and counts them (RedisStats.Moot).
func (s *RedisStore) dropMootLocked(l *lane, now time.Time) {
	l.queue = slices.DeleteFunc(l.queue, func(p *pending) bool {
		if p.mootAt.IsZero() || now.Before(p.mootAt) {
			return false
		}
		p.arrived()
		s.stats.moot.Add(1)
		return true
	})
}

// takeLocked drops l's moot operations (dropMootLocked) and removes the
// operations that are ready from l's queue, at most MaxBatch of them, all
// of the shape of the first ready one: the script applies one shape
// (in-flight cap, TTL, debt floor, aggregate) to a whole batch, so the
// batch ends before the next ready operation of another shape, which goes
// with the next. wait is how long until the first one that is not ready
// becomes ready or moot. A finish or void waiting to be sent again
// after a failed call rides along with a batch of its shape that goes
// anyway; it never sets the shape, so every batch carries the first ready
// operation, and an admit is always answered by the call after it is
// ready.
func (s *RedisStore) takeLocked(l *lane) (batch []*pending, wait time.Duration) {
	now := time.Now()
	s.dropMootLocked(l, now)
	var lead *pending // the first ready operation: its shape is the batch's
	for _, p := range l.queue {
		if !now.Before(p.notBefore) {
			lead = p
			break
		}
	}
	wait = s.opts.MaxRetryInterval
	keep := l.queue[:0]
	full := false
	led := false // lead is in batch
	for _, p := range l.queue {
		ready := !now.Before(p.notBefore)
		room := len(batch) < s.opts.MaxBatch
		if !led && !ready {
			room = len(batch)+1 < s.opts.MaxBatch // riders leave lead a place
		}
		take := lead != nil && !full && room && (ready || p.done == nil)
		if take && !lead.sameShape(p) {
			take = false
			full = ready // a ready one of another shape waits, and all after it
		}
		led = led || (take && p == lead)
		if take {
			p.sent = true
			batch = append(batch, p)
			continue
		}
		if d := p.due(now); d > 0 && d < wait {
			wait = d
		}
		keep = append(keep, p)
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	return batch, wait
}

// sameShape reports whether p and q can go in one batch: the same shape
// and aggregate bucket.
func (p *pending) sameShape(q *pending) bool {
	if p.sh != q.sh || (p.agg == nil) != (q.agg == nil) {
		return false
	}
	return p.agg == nil || *p.agg == *q.agg
}

// send makes one call for batch (operations of one shape) and hands out
// the replies. When the call
// fails, the waiting admits get the error, the finishes go back in the
// queue (they are idempotent) and the admits that may have been applied
// are voided once the batch's deadline has passed in Redis.
func (s *RedisStore) send(l *lane, batch []*pending) {
	agg, sh := batch[0].agg, batch[0].sh
	deadline := time.Now().Add(s.opts.Timeout)
	sh.notAfterMS = deadline.Add(s.opts.ClockSkew).UnixMilli()
	sh.ttlMS += s.leaseTTLExtra(sh, batch)
	keys := []string{l.key, l.open, VoidKey(l.key)}
	if agg != nil {
		keys = append(keys, agg.Key)
	}
	args := make([]any, 0, 8+3*len(batch))
	args = append(args, formatMicro(sh.rate), formatMicro(sh.capacity), formatMicro(sh.floor), "", "",
		strconv.Itoa(sh.max), strconv.FormatInt(sh.ttlMS, 10), strconv.FormatInt(sh.notAfterMS, 10))
	if agg != nil {
		args[3], args[4] = formatMicro(sh.aggRate), formatMicro(sh.aggCap)
	}
	admits := 0
	now := time.Now()
	for _, p := range batch {
		o := p.op
		for _, x := range p.spends {
			o.replay = append(o.replay, replayed{d: x.d, agoUS: now.Sub(x.at).Microseconds()})
		}
		args = append(args, string(o.kind), o.id, o.wireAmount())
		if isAdmit(p) && p.lease == nil {
			admits++
		}
	}
	ctx, cancel := context.WithDeadline(batchContext(batch), deadline)
	sent := time.Now()
	v, err := s.script.Run(ctx, s.rdb, keys, args...).Result()
	cancel()
	s.stats.calls.Add(1)
	s.stats.ops.Add(uint64(len(batch)))
	s.stats.admits.Add(uint64(admits))
	var results []opResult
	if err == nil {
		results, err = parseBatchReply(v, len(batch))
	}
	if err != nil {
		s.failed(l, batch, fmt.Errorf("throttle: budget call for %q: %w", l.key, err), sh)
		s.stats.failures.Add(1) // once its finishes wait for their retry
		return
	}
	var voids []*pending
	s.mu.Lock()
	l.fails = 0
	markRaced(batch, results, l.queue)
	for i, p := range batch {
		if p.lease != nil {
			s.grantLocked(l, p.lease, results[i], sent)
			continue
		}
		if p.done == nil {
			continue
		}
		r := results[i]
		p.refusedBeside = s.besideLocked(l.key, r, p)
		p.lacking = leaseLacking(p, batch, i)
		if p.op.kind == opPeek {
			r.tokens = s.peekReadingLocked(l.key, p, r.tokens)
		}
		if p.abandoned && admitted(r.status) {
			voids = append(voids, &pending{op: op{kind: opVoid, id: p.op.id}, agg: p.agg, sh: p.sh})
			continue
		}
		p.done <- r
	}
	s.sawLocked(l.key, sh, batch, results, sent)
	s.mu.Unlock()
	for _, v := range voids {
		s.stats.voids.Add(1)
		_, _, _ = s.enqueue(l.key, v.agg, v.sh, false, v)
	}
}

// markRaced marks the refusals of a batch answered while a settlement of
// their caller was on its way behind them — a finish, void or move later
// in the batch or still queued, or an admit of the batch whose caller hung
// up (it will be voided: its price comes back) — so that a Failover keeps
// no free refusal on an answer that may lack it. A settlement ahead of a
// refusal in the batch is in its answer.
func markRaced(batch []*pending, results []opResult, queue []*pending) {
	settling := func(p *pending) bool {
		return p.op.kind == opFinish || p.op.kind == opVoid || p.op.kind == opMove
	}
	behind := slices.ContainsFunc(queue, settling)
	for i, p := range batch {
		behind = behind || (p.abandoned && admitted(results[i].status))
	}
	for i := len(batch) - 1; i >= 0; i-- {
		if settling(batch[i]) {
			behind = true
		}
		if behind && (results[i].status == stRefused || results[i].status == stAggregate) {
			results[i].raced = true
		}
	}
}

// failed handles a batch whose call failed or went unanswered: its admits
// get the error (their callers are decided by the fail mode), and each of
// them is voided — refunded if Redis applied it, turned away by a
// tombstone until the batch's deadline if it still comes. The voids and
// the batch's finishes and moves are sent again with the caller's next
// call, or after the lane's retry wait, which doubles with each failed
// call in a row (retryWait); once they can no longer change the caller's
// bucket (mootAfter) the voids and finishes are dropped unsent (a move, or
// a lease's give-back, carries tokens and waits for Redis however long).
// A call that failed because
// the Redis client is closed leaves nothing to send again: what it
// carried is dropped (RedisStats.Dropped).
func (s *RedisStore) failed(l *lane, batch []*pending, err error, sh shape) {
	now := time.Now()
	closed := errors.Is(err, redis.ErrClosed)
	s.mu.Lock()
	l.fails++
	retry := now.Add(s.retryWait(l.fails))
	s.mu.Unlock()
	moot := now.Add(s.mootAfter(sh))
	var again []*pending
	for _, p := range batch {
		switch p.op.kind {
		case opPeek: // changes nothing: its caller gets the error
			p.failed <- err
		case opAdmit, opShadow, opLease:
			if !closed {
				again = append(again, &pending{op: op{kind: opVoid, id: p.op.id, amount: float64(sh.notAfterMS)},
					agg: p.agg, sh: p.sh, notBefore: retry, mootAt: moot})
				s.stats.voids.Add(1)
			}
			p.failed <- err
			if p.lease != nil {
				s.mu.Lock()
				s.dropLocked(p.lease)
				s.mu.Unlock()
			}
		default:
			if closed {
				p.arrived()
				s.stats.dropped.Add(1)
				continue
			}
			p.sent = false
			p.notBefore = retry
			// A lease's give-back or move carries tokens between the lease
			// and the bucket: never dropped, it waits for Redis however
			// long (at the lane's backoff).
			if p.mootAt.IsZero() && p.op.kind != opMove && len(p.spends) == 0 {
				p.mootAt = moot
			}
			again = append(again, p)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// What Redis applied of the batch is unknown: the bucket as last seen
	// no longer bounds it.
	delete(s.seen, l.key)
	if over := len(l.queue) + len(again) - s.opts.MaxPending; over > 0 {
		s.dropPeeksLocked(l, over) // reads give way to the voids and finishes
	}
	// Ahead of what came meanwhile: a lease's give-back must land before
	// the admits that would count on its tokens.
	for i := len(again) - 1; i >= 0 && len(l.queue)+len(again) > s.opts.MaxPending; i-- {
		if len(again[i].spends) > 0 { // what a lease admitted: never lost
			continue
		}
		again[i].arrived()
		again = slices.Delete(again, i, i+1)
		s.stats.dropped.Add(1)
	}
	// A read queued meanwhile would be answered ahead of them, lacking
	// what they carry (a read goes after what was queued before it:
	// RedisStore.Peek): it gets the call's error, as the batch's reads do.
	l.queue = slices.DeleteFunc(l.queue, func(q *pending) bool {
		if q.op.kind != opPeek || q.sent {
			return false
		}
		q.failed <- err
		return true
	})
	l.queue = append(again, l.queue...)
}

// retryWait is how long what a lane's call carried waits to be sent again
// after fails failed calls in a row: RetryInterval, doubled with each
// failure up to MaxRetryInterval, and up to a quarter more at random, so
// that lanes that failed together do not try again together. A lane so
// costs a Redis that stays down one call per MaxRetryInterval or less.
func (s *RedisStore) retryWait(fails int) time.Duration {
	d, most := s.opts.RetryInterval, s.opts.MaxRetryInterval
	for i := 1; i < fails && d < most; i++ {
		d = min(d, most/2) * 2
	}
	d = min(d, most)
	var b [8]byte
	_, _ = rand.Read(b[:])
	frac := float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53) // in [0, 1)
	return d + time.Duration(frac*float64(d/4))
}

// mootAfter is how long after a failed call of shape sh its voids and
// finishes can still change the caller's bucket (a move or a lease's
// give-back is never dropped). Each closes a
// request that the call, or one before it, opened, and settles it: its
// slot counts no longer once the request's TTL has passed (a lease's, its
// hold and a call's timeout later) by Redis's clock, which may run up to
// ClockSkew off; and its tokens — at most the capacity and the debt floor
// — make no difference once the bucket would have refilled from its floor
// to its capacity (the aggregate bucket too), unless other writes reached
// the bucket meanwhile: the caller's on other replicas, or other callers'
// on the aggregate, which keep it below its capacity. Dropped after that,
// it costs the caller nothing that its bucket would still show when this
// replica alone writes it; else a dropped void leaves the caller charged
// for an admit Redis applied (at most its price), and a dropped finish
// leaves a request's overuse unpaid — the bound of an outage seen by one
// replica alone.
func (s *RedisStore) mootAfter(sh shape) time.Duration {
	open := time.Duration(sh.ttlMS)*time.Millisecond + s.leaseHold(sh) + s.opts.Timeout
	full := refillTime(sh.capacity+sh.floor, sh.rate)
	if sh.aggRate > 0 {
		full = max(full, refillTime(sh.aggCap+sh.floor, sh.aggRate))
	}
	return s.opts.Timeout + 2*s.opts.ClockSkew + max(open, full)
}

// refillTime is how long a bucket refilling at rate takes to gain amount
// (both in micro-tokens), at most maxRefillTime.
func refillTime(amount, rate float64) time.Duration {
	if !(amount/rate < maxRefillTime.Seconds()) { // NaN too
		return maxRefillTime
	}
	return time.Duration(math.Ceil(amount / rate * float64(time.Second)))
}

// maxRefillTime bounds refillTime: twice the longest a Limit takes to
// fill (Limit.Validate), for a debt floor as deep as its capacity.
const maxRefillTime = 2 * maxFillSeconds * time.Second

// batchContext is the context of a batch's call: detached from every
// caller, but carrying the span of the first admit that has one, so that
// a traced request's Redis call is in its trace.
func batchContext(batch []*pending) context.Context {
	for _, p := range batch {
		if p.span.IsValid() {
			return trace.ContextWithSpanContext(context.Background(), p.span)
		}
	}
	return context.Background()
}

// parseBatchReply checks and decodes admit.lua's reply: 2 integers per
// operation. Anything else is an error, never a panic.
func parseBatchReply(v any, n int) ([]opResult, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 2*n {
		return nil, fmt.Errorf("admit reply is %T of %d values, want %d", v, lenOf(v), 2*n)
	}
	out := make([]opResult, n)
	for i := range out {
		st, ok1 := r[2*i].(int64)
		tok, ok2 := r[2*i+1].(int64)
		if !ok1 || !ok2 || st < 0 || st > stNotAnOp {
			return nil, fmt.Errorf("admit reply %d is %v %v", i, r[2*i], r[2*i+1])
		}
		out[i] = opResult{status: int(st), tokens: float64(tok)}
	}
	return out, nil
}

func lenOf(v any) int {
	if r, ok := v.([]any); ok {
		return len(r)
	}
	return -1
}

// ErrBusy reports an admit or a read that could not be queued (its caller
// has three quarters of MaxPending operations waiting already), or that
// was still queued behind its caller's earlier operations when its call's
// deadline came. It is that caller's flood, not a failing store: a
// Failover answers it with the error and stays healthy.
var ErrBusy = errors.New("throttle: too many budget operations pending")
