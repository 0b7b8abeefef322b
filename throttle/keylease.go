package throttle

import (
	"math"
	"slices"
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
// the requests it admitted change what it holds, in process, and are
// recorded with their moments (spendLocked); the lease goes back when it
// ends, with the next call of the caller: when it cannot pay a request,
// after 2×LeaseRequests requests, after LeaseHold, when a request of the
// caller is refused, or at Flush. Its give-back (admit.lua's F, or M)
// hands back what it took as of when it took it and replays the record
// at those moments (admit.lua's replay): the bucket ends as if each
// request had been sent at once — no earlier than the bucket's last write,
// should another write of the caller's (another replica's) reach Redis
// meanwhile: the caller then loses refill, never gains it. Should this
// process die, the slot comes back with the request TTL and the unspent
// tokens are lost, as a crashed request's price is. The call that asks
// for a lease keeps its operations open for LeaseHold (and the call's
// timeout) longer than the request TTL, so that the lease's slot outlives
// every request admitted on it.
//
// What it changes, as replicas see it: while a lease lives, other replicas
// see its tokens spent and its slot taken — at most the smaller of
// LeaseRequests requests' price and an eighth of the bucket, and one slot,
// per replica and caller. No replica ever admits more than the bucket
// holds. Redis counts what such a lease took as leased (its admit is
// admit.lua's L) until its give-back or move, or until its slot expires
// with a replica that died: meanwhile no refill and no refund — whichever
// replica sends it — fills the bucket beyond its capacity less what is
// leased, so that the bucket and the leases out together never hold more
// than the capacity. The refill that cap holds back while the lease is
// out comes back with its give-back's replay, so a caller whose bucket
// stays full is leased too. A refund of the holder's own (of a request
// Redis admitted) that would fill the bucket that far is paid into the
// lease first, as far as the lease has spent on requests that are over
// (beforeFinishLocked); a lease whose hold ends while it runs a request
// hands its tokens back at once by a move (expire). A refund by another
// replica can still bring the bucket to that brim, and is then cut short
// for what the lease holds; and any write of the caller's that reaches
// Redis while the lease is out (a request the lease did not take, on this
// replica or another) puts the lease's record after it, so that the
// refill held back meanwhile is lost: the caller loses, never gains — and
// a request may then be refused that the bucket without the lease would
// admit. No debit takes the bucket below its debt floor less what is
// leased (admit.lua's low), whichever replica sends it: the floor cuts a
// debt beside a lease where it would without the lease, and the bucket
// holds what it would without it once the lease is back (this replica's
// own debits are paid from its lease first); meanwhile other replicas see
// it that deep in debt. Five exceptions remain, all losses but the third
// (FuzzLeaseGainsNothing bounds that gain) and, Redis out of reach, the
// end of the last:
//   - A refund of a request the lease admitted lands, in the replay, with
//     that request's debit at the bucket's last write: when another
//     replica's debt reached the floor before the give-back, the floor
//     cuts the net debit and the refund with it (the caller loses up to
//     that refund).
//   - A lease that stops counting without handing back all it took (its
//     process died) leaves the bucket lifted to the floor, as a request
//     that paid as much and never finished — but as of the bucket's last
//     write: refill written while the lease still counted (between a debt
//     beside it and a later write) went to a bucket below the floor, and
//     up to what the lease held of it is lost; until then other replicas
//     see that extra debt, for as long as the lease's slot counts.
//   - The settlement of the request a moved lease runs (retire, expire,
//     or a record full of debits: beforeFinishLocked) is recorded after
//     the move handed the record over, and goes to Redis with the lease's
//     give-back, which waits in the caller's lane
//     until the move's call is back. A request that ends while that call
//     is out so settles later than its finish would without the lease:
//     should another replica's debt reach the floor meanwhile, its refund
//     lands after the cut (the caller gains up to that refund).
//   - A give-back (or void, or move) that reaches Redis after the
//     lease's slot expired (Redis out of reach, or this process stalled,
//     for the request TTL) refunds nothing, and debits only what its
//     record overspent: what the lease held is lost, as a dead process's
//     is. Once its entry expired Redis stops counting the lease (at the
//     next lease's recount, or when nothing leased counts any more), so
//     the bucket may refill up to its full capacity, and a debt below its
//     own floor is lifted to it: a refund then could give the lease's
//     tokens back twice. The lease admits only within its hold, and a
//     busy lease whose hold is over moves before anything more is
//     settled on it, even if its timer is late (moveOverdueLocked): the
//     record a late give-back carries was settled while Redis counted the
//     lease.
//   - A request that outlives its own TTL (geotoll serve's TTL outlasts
//     its requests; a process that stalled) settles through the slot the
//     move kept, opened afresh. Finished at or after its TTL, it gets no
//     refund (finish), where without the lease its refund would land if
//     the caller's open requests still lived (a loss of up to that
//     refund), and its debit lands, where without the lease it would be
//     dropped had they expired or been swept (a loss). Finished before
//     its TTL but reaching Redis only after it (Redis out of reach), it
//     settles in full through that slot, which the lease's entries keep
//     open, where without the lease the caller's open requests might
//     have expired and dropped it (a gain of up to that refund; a request
//     Redis admitted beside the lease gains the same way).
//
// A lease admits nothing the bucket would refuse:
// a request its tokens cannot pay goes to Redis with the lease given back
// first in the same call, and a request Redis refuses (or shadows) for
// want of what the lease holds — or, at the brim, of the refill its
// replay brings back (backed) — is asked again at once with the lease
// handed back (see retire). So is one the in-flight cap refuses while the
// lease's slot may have held no request that the bucket without it would
// count: idle, or running one admitted after the refused one was asked,
// whose client's previous request may still be open in Redis, its finish
// queued behind the refusal (pending.ranThrough). The request asked again
// goes without a lease of its caller still asked for (forgoAskLocked).
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
	// coming is the settlements of the caller's other requests on their
	// way to the bucket since Redis last showed it (RedisStore.seen;
	// refunds positive, debits negative). The budget headers of requests
	// admitted in process, and the checks that admit them, estimate the
	// bucket from the two.
	coming float64

	// spends is its record: the settlements it made in process, which its
	// give-back replays at their moments (spendLocked); count is the
	// requests it admitted.
	spends  []spend
	count   int
	grantAt time.Time // when the call that took it was sent

	ask     *pending // its admit, until answered
	granted bool     // Redis admitted it; until then it is only asked for
	busy    bool     // a request holds its slot
	running float64  // the price of the request that holds it, in micro-tokens
	done    bool     // admits no more: given back as soon as it is idle
	timer   *time.Timer
	// backs are its hand-backs (give-backs and moves), in order, each
	// with what it handed back (pending.handed): an admit queued beside it
	// before one learns from where it stands whether Redis applied the
	// admit first (leaseLacking).
	backs []*pending
}

// gen counts the times the lease handed its tokens back (given back, or
// keeping only its running request's slot).
func (ls *keyLease) gen() int { return len(ls.backs) }

// handed is what the lease handed back the last time (0 before any).
func (ls *keyLease) handed() float64 {
	if n := len(ls.backs); n > 0 {
		return ls.backs[n-1].handed
	}
	return 0
}

// leaseSize is the tokens a lease for a request of cost takes (in
// micro-tokens), or 0 when no lease is to be taken: without leases, for a
// shadow request, for one with an aggregate bucket (shared with other
// callers, whose refusals would not know of the lease), or when the
// caller's bucket was not seen lately or cannot pay the request and the
// lease.
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
	after := refilledMicro(seen.tokens, seen.at, time.Now(), sh) - cost
	if size < cost || after < size {
		return 0
	}
	return size
}

// isAdmit reports whether p admits a request (or asks for a lease).
func isAdmit(p *pending) bool {
	return p.op.kind == opAdmit || p.op.kind == opShadow || p.op.kind == opLease
}

// seenBucket is a caller's bucket as a reply from Redis last showed it:
// at is when the call was sent, rate and capacity those the call refilled
// it with (a read under another limit shows a bucket Redis does not hold).
type seenBucket struct {
	tokens         float64 // micro-tokens
	at             time.Time
	rate, capacity float64
}

// spend is one settlement a lease made in process: d
// micro-tokens (a debit when positive) at at.
type spend struct {
	d  float64
	at time.Time
}

// refilledMicro is a bucket of tokens micro-tokens at at, refilled to now
// by the script's own arithmetic (refill), within its debt floor and
// capacity. The time between the two is the monotonic clock's when both
// carry it, so that a step of the wall clock refills nothing.
func refilledMicro(tokens float64, at, now time.Time, sh shape) float64 {
	el := now.Sub(at).Microseconds()
	return refill(bucketVal{tokens: tokens}, true, clock{sec: el / 1e6, usec: el % 1e6}, sh.rate, sh.capacity, sh.floor)
}

// admitLeased admits req in process when this store holds a lease for its
// caller that is idle and can pay it, within its hold of when the call
// that took it was sent — whether or not its timer has fired (a process
// that stalled resumes with it due): the lease's entry in Redis outlives
// that by the request TTL, so what it admits settles while Redis counts
// it. ok is false otherwise.
func (s *RedisStore) admitLeased(req Request, sh shape) (a Admission, ok bool) {
	if s.opts.LeaseRequests <= 0 || req.Shadow {
		return Admission{}, false
	}
	cost := toMicro(req.Cost)
	now := time.Now()
	s.mu.Lock()
	ls, seen := s.leases[req.Key], s.seen[req.Key]
	if ls == nil || !ls.granted || ls.busy || ls.done || ls.sh != sh || req.Aggregate != nil ||
		now.Sub(ls.grantAt) > s.leaseHold(sh) || !ls.pays(seen, now, cost) {
		s.mu.Unlock()
		return Admission{}, false
	}
	ls.spendLocked(now, cost)
	ls.count++
	ls.left -= cost
	ls.busy, ls.running = true, cost
	remaining, id := ls.remaining(seen, now), ls.id
	s.mu.Unlock()
	s.stats.local.Add(1)
	a.Allowed, a.inProcess = true, true
	a.Result = Result{Allowed: true, Cost: req.Cost, Remaining: fromMicro(remaining), Limit: req.Limit,
		ResetAfter: millis(resetMS(remaining, sh.rate, sh.capacity))}
	a.Ticket = &Ticket{owner: ls, key: req.Key, limit: req.Limit, debt: req.Debt, id: id,
		paid: cost, cost: req.Cost, maxOpen: sh.max, ttl: time.Duration(sh.ttlMS) * time.Millisecond, at: now}
	return a, true
}

// pays reports whether the lease may admit a request of cost now: from
// what it took, up to 2×LeaseRequests requests (its give-back replays
// each), while the bucket with it pays the request too.
func (ls *keyLease) pays(seen seenBucket, now time.Time, cost float64) bool {
	return ls.count < 2*ls.s.opts.LeaseRequests && ls.left >= cost && ls.estimate(seen, now)+ls.left >= cost
}

// spendLocked records a settlement the lease made in process at now (d
// micro-tokens, a debit when positive), for its give-back to replay. The
// lease knows nothing of the other replicas' writes: it forgets no
// settlement, and moves one only where the caller cannot gain by it,
// whatever those writes were — a refund into the settlements before it,
// the last first, applied at their moments: the refill between them fills
// the bucket as far either way, and a refund applied earlier leaves no
// more after anything else. While the record holds the lease's spends,
// no entry of it so goes below zero: a replay applies what happened
// before the bucket's last write all at that write's moment, and a
// refund after a debit the floor cut there would give back what that
// debit never took. (The record's entries add up to what the lease
// spent, never less than nothing, so they absorb every refund.) A refund
// that finds the record empty — handed over by a move — is kept as a
// negative entry of its own, sent with the give-back (see keyLease's
// exceptions). Its record so holds one settlement per request it
// admitted, and a debit per request that cost more than it paid, which
// ends the lease: it admits 2×LeaseRequests at most (pays), and once its record
// holds 4×LeaseRequests (the debits of the caller's other requests it
// paid) it admits no more and pays no more of them (beforeFinishLocked).
func (ls *keyLease) spendLocked(now time.Time, d float64) {
	if n := len(ls.spends); n > 0 && d < 0 {
		for i := n - 1; i > 0 && d < 0; i-- {
			x := min(-d, max(ls.spends[i].d, 0))
			ls.spends[i].d -= x
			d += x
		}
		ls.spends[0].d += d // all that is left (nothing, but for rounding)
		return
	}
	ls.spends = append(ls.spends, spend{d: d, at: now})
	if ls.full() {
		ls.done = true
	}
}

// full reports whether the lease's record holds 4×LeaseRequests
// settlements: it admits no more, and pays no more of its caller's other
// requests' debits.
func (ls *keyLease) full() bool {
	return len(ls.spends) >= 4*ls.s.opts.LeaseRequests
}

// remaining estimates, in micro-tokens, what the caller's bucket would
// hold now with the lease given back.
func (ls *keyLease) remaining(seen seenBucket, now time.Time) float64 {
	return min(max(ls.estimate(seen, now)+ls.left, -ls.sh.floor), ls.sh.capacity)
}

// estimate is the bucket as last seen (dated when the call that showed it
// was sent: an early date errs towards a fuller bucket), refilled as the
// script refills it, with the settlements on their way, within its debt
// floor and its capacity, both less the lease (where Redis stops it while
// the lease is out): what Redis holds, unless another replica spent from
// it or leased. A bucket not seen lately (swept from seen), or last seen
// under another limit (a read refills by its own), is taken as at that
// floor. With what the lease holds it errs, as far as this replica knows,
// towards less than the bucket would hold without the lease: at that
// floor the two together owe the debt floor and what the lease spent.
func (ls *keyLease) estimate(seen seenBucket, now time.Time) float64 {
	low := -ls.sh.floor - ls.size
	if seen.at.IsZero() || seen.rate != ls.sh.rate || seen.capacity != ls.sh.capacity {
		return low
	}
	sh := ls.sh
	sh.floor = -low
	b := math.Min(refilledMicro(seen.tokens, seen.at, now, sh)+ls.coming, ls.sh.capacity-ls.size)
	return math.Max(b, low)
}

// finish implements finisher for a request admitted on the lease: its
// settlement changes what the lease holds, and its slot is free again. A
// lease that is done is given back now. A request that ends at or after
// its own TTL (a process that stalled) gets no refund: without the lease
// its slot might have expired with the caller's open requests (or been
// swept), and Redis would have settled nothing; its debit stands, as
// Redis settles it while they live. The caller may so lose the refund,
// not gain it (see keyLease for a finish that reaches Redis late).
func (ls *keyLease) finish(t *Ticket, delta float64) {
	s := ls.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(t.at) >= t.ttl {
		delta = math.Max(delta, 0) // debits are positive
	}
	s.moveOverdueLocked(ls, now)
	if delta != 0 { // replayed at its moment with the lease's give-back
		ls.spendLocked(now, delta)
	}
	ls.left -= delta
	ls.busy, ls.running = false, 0
	if delta > 0 { // a debit: Redis applies it, down to the debt floor, as it would have
		ls.done = true
	}
	if ls.done && s.leases[ls.key] == ls {
		s.giveBackLocked(ls)
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
	// A lease is admitted as one (admit.lua's L): its tokens count as
	// leased in Redis while it is out.
	ask = &pending{op: op{kind: opLease, id: ls.id, amount: size}, sh: sh,
		failed: make(chan error, 1), lease: ls}
	ls.ask = ask
	return back, ask, nil
}

// forgoAskLocked ends the caller's lease that is still asked for, if
// any: an ask not sent yet is taken out of the queue, one on its way is
// given back as soon as it is granted, ahead of everything then queued
// (grantLocked), and admits nothing meanwhile. An admit queued now so
// finds neither its tokens nor its slot taken in Redis.
func (s *RedisStore) forgoAskLocked(key string) {
	ls := s.leases[key]
	switch {
	case ls == nil || ls.granted:
	case ls.ask != nil && !ls.ask.sent:
		s.unaskLocked(ls)
	default:
		ls.done = true
	}
}

// grantLocked records Redis's answer to a lease's admit, sent on l. A
// lease that is done already (Flush, or a debit, came first) is given back
// ahead of everything queued.
func (s *RedisStore) grantLocked(l *lane, ls *keyLease, r opResult, sent time.Time) {
	if !admitted(r.status) {
		s.dropLocked(ls)
		return
	}
	if s.leases[ls.key] != ls { // forgotten meanwhile: back at once, ahead of everything queued
		ls.left, ls.grantAt = ls.size, sent
		l.queue = append([]*pending{s.takeBackLocked(ls)}, l.queue...)
		return
	}
	ls.granted, ls.left, ls.ask, ls.grantAt = true, ls.size, nil, sent
	s.stats.leases.Add(1)
	if ls.done {
		l.queue = append([]*pending{s.takeBackLocked(ls)}, l.queue...)
		return
	}
	ls.timer = time.AfterFunc(s.leaseHold(ls.sh), func() { s.expire(ls) })
}

// leaseHold is how long a lease of shape sh admits requests.
func (s *RedisStore) leaseHold(sh shape) time.Duration {
	return min(s.opts.LeaseHold, time.Duration(sh.ttlMS)*time.Millisecond/2)
}

// leaseTTLExtra is how much longer than the request TTL the operations of
// batch stay open when it asks for a lease: a request admitted on the
// lease up to its hold after the call was sent (and the call's timeout)
// runs for up to the request TTL, and the lease's slot must outlive it.
func (s *RedisStore) leaseTTLExtra(sh shape, batch []*pending) int64 {
	for _, p := range batch {
		if p.lease != nil {
			return (s.leaseHold(sh) + s.opts.Timeout).Milliseconds()
		}
	}
	return 0
}

// dropLocked forgets a lease Redis did not grant.
func (s *RedisStore) dropLocked(ls *keyLease) {
	if s.leases[ls.key] == ls {
		delete(s.leases, ls.key)
	}
}

// expire ends a lease at LeaseHold: it is given back now if idle. A busy
// one that carries tokens hands them back now too, by a move that keeps
// its running request's slot (see retire): while Redis counts it as
// leased, the bucket's refill stops at the capacity less it.
func (s *RedisStore) expire(ls *keyLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[ls.key] != ls {
		return
	}
	ls.done = true
	switch {
	case !ls.busy:
		s.giveBackLocked(ls)
	case ls.gen() == 0: // not moved yet
		s.queueMoveLocked(ls)
	}
}

// moveOverdueLocked moves a busy lease whose hold is over (counted from
// when the call that took it was sent) and that has not moved yet, as
// expire does — for a timer that has not run by then (this process
// stalled): a settlement recorded after that goes with a record of its
// own, to the slot the move keeps. Recorded on the lease instead, it
// would ride with a give-back that may reach Redis after the lease's slot
// expired, which refunds nothing and nets its record: a debit would go
// uncharged against tokens the bucket's refill had given back.
func (s *RedisStore) moveOverdueLocked(ls *keyLease, now time.Time) {
	if ls.gen() != 0 || !ls.busy || !ls.granted || s.leases[ls.key] != ls || now.Sub(ls.grantAt) <= s.leaseHold(ls.sh) {
		return
	}
	ls.done = true
	s.queueMoveLocked(ls)
}

// retire ends a lease that held what Redis refused a request of its
// caller for: no request is admitted on it any more, and what it holds
// goes back with the request's next call, asked again at once. An idle
// lease is given back. A busy one hands its tokens back and keeps its
// running request's slot: one move (admit.lua's M) closes its id,
// refunding what it holds, and opens the id that takes its place — the
// bucket then holds what it would without the lease, and the running
// request's slot still counts. A move applies once, so a failed call
// sends it again, unchanged, as it does a finish.
func (s *RedisStore) retire(ls *keyLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[ls.key] != ls {
		return // on its way back already
	}
	ls.done = true
	if !ls.busy {
		s.giveBackLocked(ls)
		return
	}
	if ls.left <= 0 && len(ls.spends) == 0 && ls.gen() > 0 {
		return // nothing to hand back: its slot runs its request
	}
	// A lease that carries tokens moves once even with none left: Redis
	// counts what it took as leased until it does.
	s.queueMoveLocked(ls)
}

// queueMoveLocked queues the move that hands back what a busy lease holds
// on its caller's lane (moveLocked): it rides on the caller's next call,
// or goes after FinishDelay.
func (s *RedisStore) queueMoveLocked(ls *keyLease) {
	_, _, _ = s.enqueueLocked(ls.key, nil, ls.sh, false, ls.moveLocked())
}

// moveLocked returns the move that hands back what a busy lease holds (or
// replays what it admitted) and keeps its running request's slot under the
// id that takes its place.
func (ls *keyLease) moveLocked() *pending {
	mv := ls.handBack(opMove)
	ls.id, ls.left = movedID(ls.id), 0
	return mv
}

// takeBackLocked forgets an idle lease and returns its give-back: a finish
// of its id that refunds what it holds (or debits what its requests
// overspent).
func (s *RedisStore) takeBackLocked(ls *keyLease) *pending {
	s.dropLocked(ls)
	return ls.handBack(opFinish)
}

// handBack stops the lease's hold and returns the operation of kind (a
// finish or a move of its id) that settles what it holds with its bucket:
// a refund of what is left, or a debit of what its requests overspent. It
// counts as a hand-back (backs: gen, handed) for the refusals queued
// beside it.
// Under RedisStore.mu.
func (ls *keyLease) handBack(kind opKind) *pending {
	if ls.timer != nil {
		ls.timer.Stop()
	}
	delta := 0.0
	if ls.left != 0 {
		delta = -ls.left
	}
	p := &pending{sh: ls.sh, spends: ls.spends}
	for _, x := range ls.spends { // replayed at their moments, before delta
		delta -= x.d
	}
	if delta != 0 {
		// What the lease took goes back as of when it was taken, first: a
		// bucket at its capacity then keeps no more than its capacity.
		p.spends = append([]spend{{d: delta, at: ls.grantAt}}, p.spends...)
		delta = 0
	}
	ls.spends = nil
	p.handed = max(ls.left, 0)
	ls.backs = append(ls.backs, p)
	p.op = op{kind: kind, id: ls.id, amount: delta}
	return p
}

// giveBackLocked forgets an idle lease and queues its give-back on its
// caller's lane, as a finish: it rides on the caller's next call, or goes
// after FinishDelay.
func (s *RedisStore) giveBackLocked(ls *keyLease) {
	_, _, _ = s.enqueueLocked(ls.key, nil, ls.sh, false, s.takeBackLocked(ls))
}

// peekReadingLocked is the reply to the peek p (tokens, micro-tokens) as
// this replica reads its caller's bucket, taken as the reply is, where
// the lane's order is known: with what the reply lacks of the caller's
// lease (leaseLacking; its reading then does not depend on when the
// reader wakes: a lease granted, or handed back, after the reply is not
// counted), and, for a read under a debt floor (PeekFloor), no deeper
// than that floor when the caller had a lease and none of its leases
// runs a request now — its next admission gives the lease back first,
// and the bucket stops at the floor, or spends on the lease in process,
// whose reading stops there too. Beside a lease whose slot runs a
// request, the next admission goes to Redis beside it and finds the
// bucket as deep as the reply says (less the floor less what is leased).
func (s *RedisStore) peekReadingLocked(key string, p *pending, tokens float64) float64 {
	tokens = math.Min(tokens+p.lacking, p.sh.capacity)
	if p.sh.floor == maxMicro || p.leaseAt == nil {
		return tokens
	}
	if ls := s.leases[key]; ls != nil && ls.granted && ls.busy {
		return tokens
	}
	return math.Max(tokens, -p.sh.floor)
}

// leaseLacking is what the reply to the admit p (batch[i], answered now)
// lacks of the caller's lease p was queued beside and that stayed (its
// slot ran a request: pending.besideHeld), in micro-tokens — Redis counts
// what a lease took as spent. It is taken as the reply is, under
// RedisStore.mu, where the batch's order is known: a request of the
// caller refused beside the same reply may give the lease back at once
// (retire), and what the lease holds after that is not what the reply
// lacks. A lease that has not handed back since p was queued lacks what it
// holds. One that has lacks what each hand-back since handed back, when
// that hand-back reaches Redis after p — still queued, or later in p's
// batch — and nothing of one that went ahead of p (a give-back put before
// everything queued: grantLocked); after a hand-back a lease holds
// nothing more (its left stays at most 0, or it is forgotten).
func leaseLacking(p *pending, batch []*pending, i int) float64 {
	ls := p.leaseAt
	switch {
	case ls == nil || !p.besideHeld || !ls.granted:
		return 0
	case ls.gen() == p.leaseGen:
		return ls.left
	}
	var sum float64
	for _, h := range ls.backs[p.leaseGen:] { // each since p was queued
		if !h.sent || slices.Contains(batch[i+1:], h) {
			sum += h.handed
		}
	}
	return sum
}
