package throttle

import "time"

// What a lease learns from its caller's other operations: the bucket
// Redis reports, the settlements on their way, and the refusals the lease
// may have caused.

// sawLocked records the caller's bucket after the reply to batch, sent at
// sent (the last result that reports it), for the decision to take a
// lease and for the estimates of the lease's requests; the refunds the
// batch carried are no longer on their way. Stale entries are swept when
// the map has doubled since the last sweep.
func (s *RedisStore) sawLocked(key string, sh shape, batch []*pending, results []opResult, sent time.Time) {
	if s.opts.LeaseRequests <= 0 {
		return
	}
	for _, p := range batch {
		p.arrived()
	}
	for i := len(results) - 1; i >= 0; i-- {
		if results[i].status == stAggregate {
			continue
		}
		s.seen[key] = seenBucket{tokens: results[i].tokens, at: sent, rate: sh.rate, capacity: sh.capacity}
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

// besideLocked is the caller's lease when the reply r to the admit p
// would have been an admission with the lease given back: a refusal or a
// shadow admission that what it would hand back may pay (backed), or an
// in-flight refusal while its slot may have held no request that would
// count against p without the lease (ranThrough) — or the lease p was
// queued beside, when it handed back (tokens or slot) after p was queued,
// so that the hand-back may have reached Redis after p. Else nil.
func (s *RedisStore) besideLocked(key string, r opResult, p *pending) *keyLease {
	cost := p.op.amount
	ls := s.leases[key]
	if ls != nil && !ls.granted {
		ls = nil
	}
	then := p.leaseAt
	if then != nil && then.gen() == p.leaseGen {
		then = nil // it handed nothing back since
	}
	switch r.status {
	case stRefused, stShadow:
		if ls != nil {
			if back := backed(r.tokens, ls.left, ls.size, ls.sh.capacity, ls.gen() == 0); back > 0 && r.tokens+back >= cost {
				return ls
			}
		}
		if then != nil { // its first hand-back among them when p came before any
			if back := backed(r.tokens, then.handed(), then.size, then.sh.capacity, p.leaseGen == 0); back > 0 && r.tokens+back >= cost {
				return then
			}
		}
	case stInFlight:
		if ls != nil && !p.ranThrough(ls) {
			return ls
		}
		return then
	}
	return nil
}

// queueBeside records on the admit p, as it is queued, the caller's lease
// ls: its gen, and its count if a request runs on it (see ranThrough).
func (p *pending) queueBeside(ls *keyLease) {
	p.leaseAt, p.leaseGen, p.leaseRan = ls, ls.gen(), 0
	if ls.granted && ls.busy {
		p.leaseRan = ls.count
	}
}

// ranThrough reports whether the lease ls has run one request from
// before the admit p was queued until now (p's reply): its slot, whenever
// Redis counted it against p, held that request, which without the lease
// would have been open in Redis ahead of p too. Else its slot may have
// been idle when Redis refused p, or held a request admitted in process
// after p was queued — one that without the lease would have queued
// behind p, maybe behind the finish of its client's previous request,
// still open in Redis when p came — and p may have had a slot without it.
func (p *pending) ranThrough(ls *keyLease) bool {
	return ls == p.leaseAt && ls.busy && p.leaseRan > 0 && ls.count == p.leaseRan
}

// backed is the most a lease's hand-back may add to a bucket Redis shows
// holding tokens: what the lease holds (held) — and, on its first
// hand-back, when the bucket may be at its capacity less all the lease
// took (size), where Redis holds back its refill, up to all it took: the
// record's replay brings that refill back.
func backed(tokens, held, size, capacity float64, first bool) float64 {
	if first && tokens+size >= capacity {
		return max(size, held)
	}
	return max(held, 0)
}

// beforeFinishLocked readies the finish p of a Redis-admitted request of
// the caller of ls, settling delta, and returns the delta to send. A
// refund is counted as on its way to the bucket. A debit is paid from the
// lease first, as it would have been from the bucket holding the lease's
// tokens, down to the same debt floor: an idle lease is given back ahead of
// it, a busy one pays what it holds, and one not yet granted is given back
// ahead of it once granted. A refund that would fill the bucket up to
// what Redis lets it hold while the lease is out (its capacity less what
// the lease took: admit.lua's leased) is paid into the lease first, as
// far as the lease has spent what it took on requests that are over (the
// running one's price may still come back to it): the bucket and the
// lease together would have kept that much of it without the lease, and
// Redis, which stops the bucket at the capacity less all the lease took,
// keeps the rest as it would have. The lease so never holds more than it
// took, and the bucket and it never more than the capacity. It records
// the refund as one of its own, given back with it.
func (s *RedisStore) beforeFinishLocked(ls *keyLease, p *pending, delta float64) float64 {
	now := time.Now()
	s.moveOverdueLocked(ls, now)
	switch {
	case delta < 0 && ls.granted && !ls.done && ls.estimate(s.seen[ls.key], now)-delta+ls.size >= ls.sh.capacity:
		if x := min(-delta, ls.size-ls.left-ls.running); x > 0 {
			ls.spendLocked(now, -x)
			ls.left += x
			delta += x
		}
	case delta > 0 && !ls.granted && ls.ask != nil && !ls.ask.sent:
		s.unaskLocked(ls) // not asked yet: not asked at all
	case delta > 0 && !ls.granted:
		ls.done = true
	case delta > 0 && ls.busy && ls.full():
		// Its record is full: it hands its tokens back now (one move),
		// and this debit, and those after it, go to Redis after that.
		ls.done = true
		if ls.gen() == 0 {
			s.queueMoveLocked(ls)
		}
	case delta > 0 && ls.busy:
		x := min(delta, max(ls.left, 0))
		if x > 0 {
			ls.spendLocked(now, x)
		}
		ls.left -= x
		delta -= x
	case delta > 0:
		ls.done = true
		s.giveBackLocked(ls)
	}
	if delta != 0 && s.leases[ls.key] == ls {
		ls.coming -= delta
		p.comingTo = ls
	}
	return delta
}

// unaskLocked takes a lease's admit, not yet sent, out of its caller's
// queue, and forgets the lease.
func (s *RedisStore) unaskLocked(ls *keyLease) {
	if l := s.lanes[ls.key]; l != nil {
		for i, q := range l.queue {
			if q == ls.ask {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				break
			}
		}
	}
	ls.ask = nil
	s.dropLocked(ls)
}

// arrived counts a finish's settlement as no longer on its way: Redis has
// it, or it is dropped.
func (p *pending) arrived() {
	if ls := p.comingTo; ls != nil {
		ls.coming += p.settles()
		p.comingTo = nil
	}
}

// settles is what a finish or move settles in all, in micro-tokens (a
// debit when positive): its delta and its replay.
func (p *pending) settles() float64 {
	d := p.op.amount
	for _, x := range p.spends {
		d += x.d
	}
	return d
}
