package throttle

import (
	"math"
	"time"
)

// keyLease is what a RedisStore holds of one caller's bucket ahead of its
// requests: tokens and one in-flight slot, taken in Redis as an admitted
// request of its own (its id in the caller's open hash) and spent in
// process. A caller whose requests do not overlap so costs one script call
// per LeaseRequests requests instead of one per request.
//
// Its slot holds one request at a time: a request of the caller that
// arrives while the lease's slot is taken goes to Redis as usual (it
// shares a batch with the caller's other requests there). Settlements of
// the requests it admitted change what it holds, in process; what is left
// goes back to the bucket when the lease ends, with the next call of the
// caller: when it cannot pay a request, after LeaseHold, when a request of
// the caller is refused, or at Flush. Should this process die, the slot
// comes back with the request TTL and the unspent tokens are lost, as a
// crashed request's price is.
//
// What it changes, as replicas see it: while a lease lives, other replicas
// see its tokens spent and its slot taken — at most the smaller of
// LeaseRequests requests' price and an eighth of the bucket, and one slot,
// per replica and caller. No replica ever admits more than the bucket
// holds. On the replica that holds it, a lease changes no decision: a
// request its tokens cannot pay goes to Redis with the lease given back
// first in the same call, and a request Redis refuses while the lease's
// slot runs a request waits for that request to finish and is asked again
// with the lease given back.
type keyLease struct {
	s   *RedisStore
	key string
	id  string
	sh  shape // the shape it was taken under: only requests of that shape use it
	// size is what it took, in micro-tokens.
	size float64
	// left is what it holds, in micro-tokens: taken, not yet spent. It is
	// negative after requests that cost more than they paid.
	left float64
	// bucket is the bucket's micro-tokens in Redis as of at (when the call
	// that showed it was sent: an early at errs towards a fuller bucket);
	// inbound is the refunds on their way to it since. The budget headers
	// of requests admitted in process, and brimmed, estimate from them.
	bucket, inbound float64
	at              time.Time

	granted bool          // Redis admitted it; until then it is only asked for
	busy    bool          // a request holds its slot
	done    bool          // admits no more: given back as soon as it is idle
	idle    chan struct{} // made when someone waits for the slot; closed when it frees
	timer   *time.Timer
}

// leaseSize is the tokens a lease for a request of cost takes (in
// micro-tokens), or 0 when no lease is to be taken: without leases, for a
// shadow request, for one with an aggregate bucket (shared with other
// callers, whose refusals would not know of the lease), when the caller's bucket was not seen lately or cannot
// pay it, or when the bucket and the lease together would pass the
// capacity within LeaseHold with nothing spent (a bucket that refills to
// the brim would waste what the lease holds: such a caller spends slower
// than its refill, and keeps paying one call per request).
func (s *RedisStore) leaseSizeLocked(req Request, sh shape) float64 {
	if s.opts.LeaseRequests <= 0 || req.Shadow || req.Aggregate != nil {
		return 0
	}
	seen, ok := s.seen[req.Key]
	if !ok {
		return 0
	}
	cost := toMicro(req.Cost)
	size := math.Min(float64(s.opts.LeaseRequests)*cost, math.Floor(sh.capacity/8))
	now := time.Now()
	after := refilledMicro(seen.tokens, seen.at, now, sh) - cost
	brim := after + math.Floor(s.opts.LeaseHold.Seconds()*sh.rate)
	if size < cost || after < size || brim > sh.capacity {
		return 0
	}
	return size
}

// seenBucket is a caller's bucket as a reply from Redis last showed it.
type seenBucket struct {
	tokens float64 // micro-tokens
	at     time.Time
}

// refilledMicro is a bucket of tokens micro-tokens at at, refilled to now
// as the script refills it, at most the capacity.
func refilledMicro(tokens float64, at, now time.Time, sh shape) float64 {
	el := float64(now.Sub(at).Microseconds())
	return math.Min(tokens+math.Floor(el*sh.rate/1e6), sh.capacity)
}

// admitLeased admits req in process when this store holds a lease for its
// caller that is idle and can pay it; ok is false otherwise.
func (s *RedisStore) admitLeased(req Request, sh shape) (a Admission, ok bool) {
	if s.opts.LeaseRequests <= 0 || req.Shadow {
		return Admission{}, false
	}
	cost := toMicro(req.Cost)
	now := time.Now()
	s.mu.Lock()
	ls := s.leases[req.Key]
	if ls == nil || !ls.granted || ls.busy || ls.done || ls.left < cost || ls.sh != sh || req.Aggregate != nil ||
		ls.brimmed(now) {
		s.mu.Unlock()
		return Admission{}, false
	}
	ls.left -= cost
	ls.busy = true
	remaining := ls.remaining(now)
	s.mu.Unlock()
	s.stats.local.Add(1)
	a.Allowed = true
	a.Result = Result{Allowed: true, Cost: req.Cost, Remaining: fromMicro(remaining), Limit: req.Limit,
		ResetAfter: time.Duration(resetMS(remaining, sh.rate, sh.capacity)) * time.Millisecond}
	a.Ticket = &Ticket{owner: ls, key: req.Key, limit: req.Limit, debt: req.Debt, id: ls.id,
		paid: cost, cost: req.Cost, maxOpen: sh.max, ttl: time.Duration(sh.ttlMS) * time.Millisecond}
	return a, true
}

// remaining estimates, in micro-tokens, what the caller's bucket would
// hold now with the lease given back.
func (ls *keyLease) remaining(now time.Time) float64 {
	return math.Max(ls.estimate(now)+ls.left, -ls.sh.floor)
}

// estimate is the bucket as last seen, refilled as the script refills it,
// with the refunds on their way, at most the capacity: never less than
// Redis holds unless another replica spent from it.
func (ls *keyLease) estimate(now time.Time) float64 {
	return math.Min(refilledMicro(ls.bucket, ls.at, now, ls.sh)+ls.inbound, ls.sh.capacity)
}

// brimmed reports whether the bucket and the lease together would hold
// more than the capacity: a bucket without the lease would have stopped
// refilling there, so the lease may not admit (a request then goes to
// Redis with the lease given back first).
func (ls *keyLease) brimmed(now time.Time) bool {
	return ls.estimate(now)+ls.left > ls.sh.capacity
}

// finish implements finisher for a request admitted on the lease: its
// settlement changes what the lease holds, and its slot is free again. A
// lease that is done is given back now.
func (ls *keyLease) finish(_ *Ticket, delta float64) {
	s := ls.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ls.left -= delta
	ls.busy = false
	if delta > 0 { // a debit: Redis applies it, down to the debt floor, as it would have
		ls.done = true
	}
	if ls.done && s.leases[ls.key] == ls {
		s.giveBackLocked(ls)
	}
	if ls.idle != nil { // after the give-back is queued: a waiter's call takes it along
		close(ls.idle)
		ls.idle = nil
	}
}

// leaseOpsLocked is what an admit that goes to Redis takes along: the
// give-back of the caller's idle lease (nil when there is none) and a new
// lease's admit (nil when none is to be asked for), to go before and after
// the request's own admit in one batch. held is the caller's lease that
// stays (its slot runs a request), if any.
func (s *RedisStore) leaseOpsLocked(req Request, sh shape) (back, ask *pending, held *keyLease) {
	ls := s.leases[req.Key]
	if ls != nil && ls.granted && !ls.busy {
		back, ls = s.takeBackLocked(ls), nil
	}
	if ls != nil {
		return back, nil, ls
	}
	size := s.leaseSizeLocked(req, sh)
	if size == 0 {
		return back, nil, nil
	}
	ls = &keyLease{s: s, key: req.Key, id: newID(), sh: sh, size: size}
	s.leases[req.Key] = ls
	ask = &pending{op: op{kind: opAdmit, id: ls.id, amount: size}, sh: sh,
		failed: make(chan error, 1), lease: ls}
	return back, ask, nil
}

// grantLocked records Redis's answer to a lease's admit, sent at sent on
// l. A lease that is done already (Flush, or a debit, came first) is given
// back ahead of everything queued.
func (s *RedisStore) grantLocked(l *lane, ls *keyLease, r opResult, sent time.Time) {
	if !admitted(r.status) || s.leases[ls.key] != ls {
		s.dropLocked(ls)
		return
	}
	ls.granted, ls.left, ls.bucket, ls.at = true, ls.size, r.tokens, sent
	s.stats.leases.Add(1)
	if ls.done {
		l.queue = append([]*pending{s.takeBackLocked(ls)}, l.queue...)
		return
	}
	hold := min(s.opts.LeaseHold, time.Duration(ls.sh.ttlMS)*time.Millisecond/2)
	ls.timer = time.AfterFunc(hold, func() { s.expire(ls) })
}

// dropLocked forgets a lease Redis did not grant.
func (s *RedisStore) dropLocked(ls *keyLease) {
	if s.leases[ls.key] == ls {
		delete(s.leases, ls.key)
	}
}

// expire ends a lease at LeaseHold: it is given back now if idle, else
// when its request finishes.
func (s *RedisStore) expire(ls *keyLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[ls.key] == ls {
		ls.done = true
		if !ls.busy {
			s.giveBackLocked(ls)
		}
	}
}

// retire ends a lease that held tokens when Redis refused a request of
// its caller: no request is admitted on it any more, and it is given back
// once idle. wait is closed when it is back (or on its way back: its
// give-back rides on the next call of the caller).
func (s *RedisStore) retire(ls *keyLease) (wait <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[ls.key] == ls && ls.busy {
		ls.done = true
		if ls.idle == nil {
			ls.idle = make(chan struct{})
		}
		return ls.idle
	}
	if s.leases[ls.key] == ls {
		s.giveBackLocked(ls)
	}
	c := make(chan struct{})
	close(c)
	return c
}

// takeBackLocked forgets an idle lease and returns its give-back: a finish
// of its id that refunds what it holds (or debits what its requests
// overspent).
func (s *RedisStore) takeBackLocked(ls *keyLease) *pending {
	s.dropLocked(ls)
	if ls.timer != nil {
		ls.timer.Stop()
	}
	delta := 0.0
	if ls.left != 0 {
		delta = -ls.left
	}
	return &pending{op: op{kind: opFinish, id: ls.id, amount: delta}}
}

// giveBackLocked forgets an idle lease and queues its give-back on its
// caller's lane, as a finish: it rides on the caller's next call, or goes
// after FinishDelay.
func (s *RedisStore) giveBackLocked(ls *keyLease) {
	_, _, _ = s.enqueueLocked(ls.key, nil, ls.sh, false, s.takeBackLocked(ls))
}

// heldLeft is what the lease held stays holding, in micro-tokens, when it
// is still the caller's: a reply from Redis does not count it.
func (s *RedisStore) heldLeft(held *keyLease) float64 {
	if held == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[held.key] != held || !held.granted {
		return 0
	}
	return held.left
}

// sawLocked records the caller's bucket after the reply to batch, sent at
// sent (the last result that reports it), for the decision to take a
// lease and for the estimates of the lease's requests; the refunds the
// batch carried are no longer on their way. Stale entries are swept when
// the map has doubled since the last sweep.
func (s *RedisStore) sawLocked(key string, batch []*pending, results []opResult, sent time.Time) {
	if s.opts.LeaseRequests <= 0 {
		return
	}
	for _, p := range batch {
		if ls := p.refundTo; ls != nil {
			ls.inbound += p.op.amount
			p.refundTo = nil
		}
	}
	for i := len(results) - 1; i >= 0; i-- {
		if results[i].status == stAggregate {
			continue
		}
		s.seen[key] = seenBucket{tokens: results[i].tokens, at: sent}
		if ls := s.leases[key]; ls != nil && ls.granted {
			ls.bucket, ls.at = results[i].tokens, sent
		}
		break
	}
	if len(s.seen) < s.seenAt {
		return
	}
	stale := time.Now().Add(-s.opts.LeaseHold)
	for k, v := range s.seen {
		if v.at.Before(stale) {
			delete(s.seen, k)
		}
	}
	s.seenAt = max(1024, 2*len(s.seen))
}

// besideLocked is the caller's lease when a reply r to an admit of cost
// would have been an admission with the lease given back: a refusal or a
// shadow admission that its tokens pay, or an in-flight refusal while its
// slot is idle. Else nil.
func (s *RedisStore) besideLocked(key string, r opResult, cost float64) *keyLease {
	ls := s.leases[key]
	if ls == nil || !ls.granted {
		return nil
	}
	switch r.status {
	case stRefused, stShadow:
		if ls.left > 0 && r.tokens+ls.left >= cost {
			return ls
		}
	case stInFlight:
		if !ls.busy {
			return ls
		}
	}
	return nil
}

// beforeFinishLocked readies the finish p of a Redis-admitted request of
// the caller of ls, settling delta, and returns the delta to send. A
// refund is counted as on its way to the bucket. A debit is paid from the
// lease first, as it would have been from the bucket holding the lease's
// tokens, down to the same debt floor: an idle lease is given back ahead of
// it, a busy one pays what it holds, and one not yet granted is given back
// ahead of it once granted.
func (s *RedisStore) beforeFinishLocked(ls *keyLease, p *pending, delta float64) float64 {
	switch {
	case delta < 0:
		ls.inbound -= delta
		p.refundTo = ls
	case delta > 0 && !ls.granted:
		ls.done = true
	case delta > 0 && ls.busy:
		x := min(delta, max(ls.left, 0))
		ls.left -= x
		delta -= x
	case delta > 0:
		ls.done = true
		s.giveBackLocked(ls)
	}
	return delta
}
