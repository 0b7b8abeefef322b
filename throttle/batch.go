package throttle

import (
	"math"
	"strconv"
	"time"
)

// micro is the number of micro-tokens in a token. Amounts cross to Redis
// as whole micro-tokens, which the script keeps exact and never formats as
// floats (see admit.lua).
const micro = 1e6

// voidsGraceMS is how long a caller's tombstones' hash outlives
// voidsUntil in Redis (see admit.lua): a key given an expiry the clock has
// already reached is deleted at once, so the hash must not expire at a
// deadline a slow script may reach before it sets it.
const voidsGraceMS = 1000

// maxMicro bounds every amount in micro-tokens: whole numbers stay exact in
// a float64 (and in a Lua number) up to 2^53.
const maxMicro = 1 << 53

// toMicro converts tokens to whole micro-tokens, rounding to the nearest.
func toMicro(tokens float64) float64 { return math.Round(tokens * micro) }

// fromMicro converts micro-tokens back to tokens.
func fromMicro(u float64) float64 { return u / micro }

// opKind is one operation of a batch (see admit.lua).
type opKind byte

const (
	opAdmit  opKind = 'A' // spend and open
	opShadow opKind = 'S' // open; spend only if the bucket holds it
	opLease  opKind = 'L' // spend and open as A, counted as leased until it closes or expires
	opFinish opKind = 'F' // close and settle
	opVoid   opKind = 'V' // close and refund all it paid; amount: the voided batch's deadline (Unix ms)
	opMove   opKind = 'M' // close and settle as F, and open id+"+" in its place, paid nothing
	opPeek   opKind = 'P'
)

// Statuses of an operation's reply (see admit.lua).
const (
	stAdmitted    = 1
	stRefused     = 0 // by the bucket; also F/V/M of an id that is not open (M: or whose successor is)
	stAggregate   = 2 // refused by the aggregate bucket
	stInFlight    = 3 // refused by the in-flight cap
	stAlreadyOpen = 4
	stLate        = 5 // the batch came after its deadline, or the admit was invalid
	stShadow      = 6
	stNotAnOp     = 7
)

// op is one operation: kind, the request's id and an amount in
// micro-tokens (a cost, or a settlement's delta). A finish or move may
// carry a replay: settlements made in process, applied at the moments
// they happened before its own delta (see admit.lua).
type op struct {
	kind   opKind
	id     string
	amount float64
	replay []replayed
}

// replayed is one settlement of a replay: d micro-tokens (a debit when
// positive, a refund when negative), agoUS µs before the batch's clock.
type replayed struct {
	d     float64
	agoUS int64
}

// wireAmount is o's amount as admit.lua reads it: the number, followed by
// the replay, if any, as "|d:ago,d:ago…".
func (o op) wireAmount() string {
	if len(o.replay) == 0 {
		return formatMicro(o.amount)
	}
	b := make([]byte, 0, 24*(1+len(o.replay)))
	b = strconv.AppendFloat(b, o.amount, 'f', 0, 64)
	b = append(b, '|')
	for i, r := range o.replay {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, r.d, 'f', 0, 64)
		b = append(b, ':')
		b = strconv.AppendInt(b, max(r.agoUS, 0), 10)
	}
	return string(b)
}

// opResult is the reply to one op: its status and the micro-tokens of the
// bucket after it (of the aggregate, when the aggregate refused).
type opResult struct {
	status int
	tokens float64
	// raced: a settlement or void of the caller was on its way behind the
	// operation when Redis answered it (later in its batch, or queued), so
	// the answer lacks it.
	raced bool
}

// shape is a batch's bucket shapes and in-flight rule, in micro-tokens
// and milliseconds: admit.lua's ARGV[1..8].
type shape struct {
	rate, capacity, floor float64
	aggRate, aggCap       float64 // 0 without an aggregate
	max                   int
	ttlMS                 int64
	notAfterMS            int64 // 0: none
	// read marks a peek's shape: reads go in batches of their own, so
	// that no read is answered beside an admit that asks for a lease —
	// the read, ahead of it, would lack the lease its reply then adds.
	read bool
}

// bucketVal is one stored bucket (admit.lua's KEYS[1] value).
type bucketVal struct {
	tokens      float64 // micro-tokens as of (sec, usec)
	sec, usec   int64
	expiresMS   int64 // the key's own expiry
	openExpires int64 // the open hash's expiry
	n           int   // requests open
	voidsUntil  int64 // the tombstones' expiry (0: none)
	// leased is the micro-tokens out on leases (L), until leasedUntil
	// (Unix ms): the bucket holds at most capacity less them meanwhile.
	// Both 0 when nothing is leased (the script writes neither).
	leased      float64
	leasedUntil int64
}

// openReq is one open request (admit.lua's KEYS[2] field).
type openReq struct {
	paid      float64 // micro-tokens
	expiresMS int64
	lease     bool // opened by an L: what it paid counts as leased while it is open
}

// keyState is everything a store holds for one caller: the bucket, its
// open requests and its aggregate bucket. found reports whether the bucket
// exists (a missing bucket is a full one).
type keyState struct {
	b     bucketVal
	found bool
	open  map[string]openReq
	voids map[string]bool // tombstones (admit.lua's KEYS[3]), until b.voidsUntil
}

// clock is the time of one batch, as admit.lua reads it from TIME.
type clock struct {
	sec, usec int64
}

func (c clock) ms() int64 { return c.sec*1000 + c.usec/1000 }

func (c clock) us() int64 { return c.sec*1_000_000 + c.usec }

// refill is admit.lua's load step of the aggregate (and of a bucket with
// nothing leased): the bucket as of now, refilled and clamped to [-floor,
// capacity], or full when missing. Operation for operation as in the
// script, so both give the same bits.
func refill(v bucketVal, found bool, now clock, rate, capacity, floor float64) float64 {
	if !found || v.tokens != v.tokens {
		return capacity
	}
	tokens := v.tokens
	if tokens < -floor {
		tokens = -floor
	}
	if tokens > capacity {
		tokens = capacity
	}
	el := float64(now.sec-v.sec)*1000000 + float64(now.usec-v.usec)
	if el > 0 { // a clock that stepped back refills nothing
		tokens = tokens + math.Floor(float64(el*rate)/1000000)
		if tokens > capacity {
			tokens = capacity
		}
	}
	return tokens
}

// retryMS is the wait until a bucket holding tokens can pay cost, as the
// script would compute it: ceil(deficit / rate) in ms, at least 1.
func retryMS(cost, tokens, rate float64) int64 {
	r := ceilInt64(float64((cost-tokens)/rate) * 1000)
	return max(r, 1)
}

// resetMS is the time until a bucket holding tokens is full again.
func resetMS(tokens, rate, capacity float64) int64 {
	return max(0, ceilInt64(float64((capacity-tokens)/rate)*1000))
}

// ceilInt64 is ceil(x) as an int64, saturating at the int64 bounds (NaN:
// 0) where a conversion would give an arbitrary value.
func ceilInt64(x float64) int64 {
	switch {
	case x != x:
		return 0
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	return int64(math.Ceil(x))
}

// millis converts whole milliseconds to a Duration, saturating at the
// longest Duration (about 292 years) instead of wrapping: a bucket deep in
// debt at a slow rate may need longer than that.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// applyBatch is THE budget arithmetic: what admit.lua does to one caller's
// state for one batch, used by MemoryStore and held to the script by the
// integration tests, operation for operation. It updates st (and agg, the
// aggregate bucket, when sh has one) and returns one result per op.
// Products are wrapped in float64() so the compiler cannot fuse them into
// FMAs, which would round differently from Lua.
//
// Its steps are the script's three parts (batch_run.go): batchRun.load
// reads the state as of now, batchRun.admit and finish run the
// operations, and batchRun.commit writes the state back — only when an
// operation changed something, as the script writes nothing for a batch of
// refusals and peeks.
func applyBatch(st *keyState, agg *keyState, sh shape, now clock, ops []op) []opResult {
	r := batchRun{st: st, agg: agg, sh: sh, now: now}
	r.load()
	out := make([]opResult, len(ops))
	for i, o := range ops {
		status := stAdmitted
		if !o.replays() {
			r.advance(r.nowUS)
		}
		switch o.kind {
		case opAdmit, opShadow, opLease:
			status = r.admit(o)
		case opFinish, opVoid, opMove:
			status = r.finish(o)
		case opPeek: // reports the bucket
		default:
			status = stNotAnOp
		}
		out[i] = r.result(status)
	}
	if r.dirty {
		r.advance(r.nowUS)
		r.commit()
	}
	return out
}

// replays reports whether o is a finish or move with a replay: its
// settlements go at their own moments, before the bucket is refilled to
// now.
func (o op) replays() bool {
	return (o.kind == opFinish || o.kind == opMove) && len(o.replay) > 0
}

// sweep drops the open requests that have expired (their process died)
// and returns how many remain.
func sweep(st *keyState, nowMS int64) int {
	for id, r := range st.open {
		if r.expiresMS <= nowMS {
			delete(st.open, id)
		}
	}
	return len(st.open)
}

// voidsExpiry is when the tombstones' hash expires in Redis, given the
// moment its tombstones hold until (0: none).
func voidsExpiry(voidsUntil int64) int64 {
	if voidsUntil == 0 {
		return 0
	}
	return voidsUntil + voidsGraceMS
}

// later is an expiry pushed out past need with slack (an eighth of the
// time to it, at least a second), so that most writes can keep it.
func later(nowMS, need int64) int64 {
	slack := int64(math.Ceil(float64(need-nowMS) / 8))
	return need + max(slack, 1000)
}

// formatMicro formats micro-tokens (a whole number) for admit.lua.
func formatMicro(u float64) string { return strconv.FormatFloat(u, 'f', 0, 64) }
