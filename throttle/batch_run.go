package throttle

import "math"

// batchRun is one batch on its way through applyBatch: the locals admit.lua
// keeps between loading a caller's state, running the operations and
// writing it back. The maps of st (open requests, tombstones) change in
// place, as the script's HSETNX/HDEL/HSET do; the bucket's own value is
// written only by commit, as the script SETs its key once at the end.
type batchRun struct {
	st, agg *keyState // agg: nil without an aggregate bucket
	sh      shape
	now     clock
	nowMS   int64
	late    bool // the batch came after its deadline: it admits nothing

	nowUS           int64
	tokens, atokens float64 // micro-tokens of the bucket (as of at, µs) and the aggregate (as of now)
	at              int64
	n               int   // requests open
	voidsUntil      int64 // until when the tombstones hold (0: none)
	// leased: the micro-tokens out on leases, until leasedUntil (see top
	// and low).
	leased      float64
	leasedUntil int64

	dirty  bool // something to write back
	opened bool // a request was opened: the open hash may need a later expiry
	swept  bool // the open requests were swept (slotFree): once a call
}

// load is admit.lua's load step, on a run that knows its state, shape and
// clock: the bucket as of its own time (advance refills it), the aggregate
// refilled as of now, and the open requests and tombstones dropped when
// their hash has expired (Redis: a key is gone once now is past its
// expiry).
// top is the most the bucket holds while leases are out (its capacity
// less what they hold), low the least (its debt floor less it); admit.lua
// keeps both as locals, updated with leased.
func (r *batchRun) top() float64 { return r.sh.capacity - r.leased }

func (r *batchRun) low() float64 { return -r.sh.floor - r.leased }

func (r *batchRun) load() {
	st, sh := r.st, &r.sh
	r.nowMS = r.now.ms()
	r.nowUS = r.now.sec*1000000 + r.now.usec
	r.late = sh.notAfterMS != 0 && r.nowMS > sh.notAfterMS
	r.tokens, r.at = sh.capacity, r.nowUS
	if st.found && st.b.tokens == st.b.tokens {
		if st.b.leased > 0 && st.b.leasedUntil > r.nowMS {
			r.leased, r.leasedUntil = min(st.b.leased, sh.capacity), st.b.leasedUntil
		}
		r.tokens = min(max(st.b.tokens, r.low()), r.top())
		r.at = st.b.sec*1000000 + st.b.usec
	}
	r.n = st.b.n
	if !st.found || st.b.openExpires < r.nowMS {
		r.n = 0
		st.open = nil
	}
	if !st.found || st.b.voidsUntil < r.nowMS {
		st.voids = nil
	}
	r.voidsUntil = st.b.voidsUntil
	if r.agg != nil {
		r.atokens = refill(r.agg.b, r.agg.found, r.now, sh.aggRate, sh.aggCap, sh.floor)
	}
}

// advance refills the bucket to the moment to (µs), as admit.lua's
// advance does; a moment before its own time refills nothing.
func (r *batchRun) advance(to int64) {
	if el := to - r.at; el > 0 {
		r.tokens = min(r.tokens+math.Floor(float64(el)*r.sh.rate/1000000), r.top())
		r.at = to
	}
}

// result answers an operation's status with the bucket's micro-tokens
// after it — the aggregate's when the aggregate refused, so that the
// caller's Retry-After follows from the bucket that said no.
func (r *batchRun) result(status int) opResult {
	if status == stAggregate {
		return opResult{status: status, tokens: r.atokens}
	}
	return opResult{status: status, tokens: r.tokens}
}

// admit is an A or S operation. An invalid admit answers late and changes
// nothing (the script cannot fail half way through a batch). A bucket or an
// aggregate that cannot pay refuses an A; an S (a shadow-mode request) is
// opened anyway, spending nothing: it still holds a slot under the
// in-flight cap.
func (r *batchRun) admit(o op) int {
	cost := o.amount
	invalid := !(cost > 0 && cost <= r.sh.capacity) || o.id == ""
	if invalid {
		cost = 0
	}
	own := r.tokens >= cost
	whole := r.agg == nil || r.atokens >= cost
	shadow := o.kind == opShadow
	switch {
	case r.late || invalid:
		return stLate
	case !own && !shadow:
		// Neither can pay: the longer wait is the request's Retry-After.
		if !whole && (cost-r.atokens)*r.sh.rate > (cost-r.tokens)*r.sh.aggRate {
			return r.refuse(o.id, stAggregate)
		}
		return r.refuse(o.id, stRefused)
	case !whole && !shadow:
		return r.refuse(o.id, stAggregate)
	}
	if !r.slotFree() {
		return r.refuse(o.id, stInFlight)
	}
	if !own || !whole {
		return r.open(o.id, stShadow, 0, false)
	}
	return r.open(o.id, stAdmitted, cost, o.kind == opLease)
}

// recount sets the leased amount to what the open leases paid (those whose
// entry has not expired), as admit.lua does when an L comes while some
// are counted: a replica that died with its lease out stops counting once
// its entry expires. The floor that rises with it stays below the bucket,
// which pays the L.
func (r *batchRun) recount() {
	l, u := 0.0, int64(0)
	for _, o := range r.st.open {
		if o.lease && o.expiresMS > r.nowMS {
			l += o.paid
			u = max(u, o.expiresMS)
		}
	}
	r.leased, r.leasedUntil = l, u
}

// refuse answers status, a refusal, for an admit of id — unless id is
// open: a copy of its batch reached Redis before (its answer lost) and
// took what this copy lacks.
func (r *batchRun) refuse(id string, status int) int {
	if st, dup := r.openBefore(id); dup {
		return st
	}
	return status
}

// openBefore answers an admit of an id already open as its earlier copy was
// admitted: shadow when it spent nothing.
func (r *batchRun) openBefore(id string) (int, bool) {
	o, ok := r.st.open[id]
	switch {
	case !ok:
		return 0, false
	case o.paid == 0:
		return stShadow, true
	}
	return stAlreadyOpen, true
}

// slotFree reports whether the in-flight cap leaves room for one more
// request. At the cap it first sweeps out the requests whose process died
// without finishing them, so that a crashed replica cannot hold a caller's
// slots for longer than their TTL.
func (r *batchRun) slotFree() bool {
	if r.n >= r.sh.max && !r.swept { // once a call, as admit.lua: nowMS stands still
		r.swept = true
		if m := sweep(r.st, r.nowMS); m != r.n {
			r.n, r.dirty = m, true
		}
	}
	return r.n < r.sh.max
}

// open records id as open, having paid cost, and spends it from both
// buckets. A tombstone turns it away (its batch was voided before it came),
// and so does an id already open: a batch resent after a lost answer must
// not admit, nor spend, twice.
func (r *batchRun) open(id string, status int, cost float64, lease bool) int {
	if lease && r.leased > 0 {
		r.recount()
	}
	if r.nowMS <= r.voidsUntil && r.st.voids[id] {
		return stLate
	}
	if st, dup := r.openBefore(id); dup {
		return st
	}
	if r.st.open == nil {
		r.st.open = make(map[string]openReq)
	}
	r.st.open[id] = openReq{paid: cost, expiresMS: r.nowMS + r.sh.ttlMS, lease: lease}
	if status == stAdmitted {
		r.tokens -= cost
		if r.agg != nil {
			r.atokens -= cost
		}
		if lease {
			r.leased += cost
			r.leasedUntil = max(r.leasedUntil, r.nowMS+r.sh.ttlMS)
		}
	}
	r.n++
	r.dirty, r.opened = true, true
	return status
}

// finish is an F, V or M operation: close an open request and settle it —
// a finish or a move by its delta, a void by refunding all it paid. None
// of an id that is not open settles anything, so a repeated or late one
// never settles twice; a void leaves a tombstone (until its amount, the
// voided batch's deadline), whether it closed the request or not. A
// move opens id+"+" in the closed request's place, paid nothing, with no
// token or cap check (the slot it held stays taken), and does nothing
// when that id is open already.
func (r *batchRun) finish(o op) int {
	rec, ok := r.st.open[o.id]
	if !ok {
		r.advance(r.nowUS)
		if o.kind == opVoid {
			r.tombstone(o.id, int64(o.amount))
		}
		return stRefused
	}
	if _, taken := r.st.open[movedID(o.id)]; o.kind == opMove && taken {
		r.advance(r.nowUS)
		return stRefused
	}
	delete(r.st.open, o.id)
	// The script reads the entry only while something is leased, for a
	// replay, or for a void.
	read := r.leased > 0 || o.replays() || o.kind == opVoid
	stale := read && rec.lease && rec.expiresMS <= r.nowMS
	if r.leased > 0 && rec.lease && rec.expiresMS > r.nowMS {
		// A lease that is still counted: what it paid is no longer out —
		// before its replay, which gives it back as of when it was taken.
		r.leased -= rec.paid
		if r.leased <= 0 {
			r.leased, r.leasedUntil = 0, 0
		}
	}
	if o.replays() && !stale {
		r.replay(o)
	}
	r.advance(r.nowUS)
	if o.kind == opMove {
		r.st.open[movedID(o.id)] = openReq{paid: 0, expiresMS: r.nowMS + r.sh.ttlMS}
		r.opened = true
	} else {
		r.n--
	}
	give, delta := 0.0, 0.0
	if o.kind == opVoid {
		give = rec.paid
		r.tombstone(o.id, int64(o.amount)) // a late copy of its admit admits nothing
	} else if delta = finite(o.amount); delta < 0 {
		give = -delta
	}
	if stale {
		// A lease whose entry expired stopped counting, and the floor it
		// counted in rose to the bucket's own: it refunds nothing (what it
		// held is lost, as a dead replica's is), and only what its record
		// overspent is debited, now.
		if o.replays() { // a void has none
			for _, x := range o.replay {
				delta += x.d
			}
		}
		delta, give = max(delta, 0), 0
	}
	r.settle(delta, give)
	// A lease closed: its debt floor rises by what it paid, which its
	// refund (or its replay's, first) gave back already, but for a lease
	// that gives back less than it took.
	r.tokens = max(r.tokens, r.low())
	r.dirty = true
	return stAdmitted
}

// replay applies o's replay: each settlement at the moment it happened
// (never before the bucket's own time), refilling in between.
func (r *batchRun) replay(o op) {
	for _, x := range o.replay {
		if when := r.nowUS - x.agoUS; when > r.at {
			r.advance(when)
		}
		r.settle(max(x.d, 0), max(-x.d, 0))
	}
}

// finite is a settlement's delta as the script reads it: NaN and ±Inf
// settle nothing.
func finite(delta float64) float64 {
	if math.IsNaN(delta) || math.IsInf(delta, 0) {
		return 0
	}
	return delta
}

// movedID is the id an M operation opens in place of id.
func movedID(id string) string { return id + "+" }

// tombstone marks a voided id that was never admitted, or not yet, until
// keep (the voided batch's deadline, Unix ms): should its admit still come,
// it admits nothing. A deadline already past needs no tombstone, since that
// batch is late and admits nothing anyway.
func (r *batchRun) tombstone(id string, keep int64) {
	if keep <= r.nowMS {
		return
	}
	if r.st.voids == nil {
		r.st.voids = make(map[string]bool)
	}
	r.st.voids[id] = true
	r.voidsUntil = max(r.voidsUntil, keep)
	r.dirty = true
}

// settle debits delta (down to the debt floor less what is leased; the
// aggregate's down to the debt floor) and refunds give (up to capacity
// less what is leased), on the bucket and the aggregate alike, in the
// script's order. A debit never lifts a bucket below its floor (one whose
// lease just closed, before its refund).
func (r *batchRun) settle(delta, give float64) {
	if delta > 0 {
		if low := r.low(); r.tokens > low {
			r.tokens = max(r.tokens-delta, low)
		}
		if r.agg != nil {
			r.atokens = max(r.atokens-delta, -r.sh.floor)
		}
	}
	if give > 0 {
		r.tokens = min(r.tokens+give, r.top())
		if r.agg != nil {
			r.atokens = min(r.atokens+give, r.sh.aggCap)
		}
	}
}

// commit is admit.lua's write step. Every key must live until its bucket is
// full again and the open hash until its last request has expired — the
// bucket at least as long as the hashes, so that a vanished bucket is
// exactly a full, idle one. Expiries are pushed out (with slack, see later)
// only when they must be, as the script keeps them (KEEPTTL) otherwise.
func (r *batchRun) commit() {
	st, nowMS := r.st, r.nowMS
	st.b.n = max(r.n, 0)
	if r.voidsUntil < nowMS {
		r.voidsUntil, st.voids = 0, nil
	}
	st.b.voidsUntil = r.voidsUntil
	st.b.leased, st.b.leasedUntil = 0, 0
	if r.leased > 0 {
		st.b.leased, st.b.leasedUntil = r.leased, r.leasedUntil
	}
	if st.b.n > 0 && r.opened && st.b.openExpires <= nowMS+r.sh.ttlMS {
		st.b.openExpires = later(nowMS, nowMS+r.sh.ttlMS)
	}
	voidsExpire := voidsExpiry(r.voidsUntil) // the bucket outlives the hash
	need := nowMS + resetMS(r.tokens, r.sh.rate, r.sh.capacity)
	if !st.found || need > st.b.expiresMS || st.b.openExpires > st.b.expiresMS || voidsExpire > st.b.expiresMS {
		need = later(nowMS, need)
		need = max(need, st.b.openExpires, voidsExpire)
		st.b.expiresMS = need
	}
	st.b.tokens, st.b.sec, st.b.usec, st.found = r.tokens, r.now.sec, r.now.usec, true
	if agg := r.agg; agg != nil {
		aneed := nowMS + resetMS(r.atokens, r.sh.aggRate, r.sh.aggCap)
		if !agg.found || aneed > agg.b.expiresMS {
			agg.b.expiresMS = later(nowMS, aneed)
		}
		agg.b.tokens, agg.b.sec, agg.b.usec, agg.found = r.atokens, r.now.sec, r.now.usec, true
	}
}
