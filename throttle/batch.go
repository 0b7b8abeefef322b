package throttle

import (
	"math"
	"strconv"
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
	opFinish opKind = 'F' // close and settle
	opVoid   opKind = 'V' // close and refund all it paid; amount: the voided batch's deadline (Unix ms)
	opPeek   opKind = 'P'
)

// Statuses of an operation's reply (see admit.lua).
const (
	stAdmitted    = 1
	stRefused     = 0 // by the bucket; also F/V of an id that is not open
	stAggregate   = 2 // refused by the aggregate bucket
	stInFlight    = 3 // refused by the in-flight cap
	stAlreadyOpen = 4
	stLate        = 5 // the batch came after its deadline, or the admit was invalid
	stShadow      = 6
	stNotAnOp     = 7
)

// op is one operation: kind, the request's id and an amount in
// micro-tokens (a cost, or a settlement's delta).
type op struct {
	kind   opKind
	id     string
	amount float64
}

// opResult is the reply to one op: its status and the micro-tokens of the
// bucket after it (of the aggregate, when the aggregate refused).
type opResult struct {
	status int
	tokens float64
}

// shape is a batch's bucket shapes and in-flight rule, in micro-tokens
// and milliseconds: admit.lua's ARGV[1..8].
type shape struct {
	rate, capacity, floor float64
	aggRate, aggCap       float64 // 0 without an aggregate
	max                   int
	ttlMS                 int64
	notAfterMS            int64 // 0: none
}

// bucketVal is one stored bucket (admit.lua's KEYS[1] value).
type bucketVal struct {
	tokens      float64 // micro-tokens as of (sec, usec)
	sec, usec   int64
	expiresMS   int64 // the key's own expiry
	openExpires int64 // the open hash's expiry
	n           int   // requests open
	voidsUntil  int64 // the tombstones' expiry (0: none)
}

// openReq is one open request (admit.lua's KEYS[2] field).
type openReq struct {
	paid      float64 // micro-tokens
	expiresMS int64
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

// refill is admit.lua's load step: the bucket as of now, refilled and
// clamped to [-floor, capacity], or full when missing. Operation for
// operation as in the script, so both give the same bits.
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
	r := int64(math.Ceil(float64((cost-tokens)/rate) * 1000))
	return max(r, 1)
}

// resetMS is the time until a bucket holding tokens is full again.
func resetMS(tokens, rate, capacity float64) int64 {
	return max(0, int64(math.Ceil(float64((capacity-tokens)/rate)*1000)))
}

// applyBatch is THE budget arithmetic: what admit.lua does to one caller's
// state for one batch, used by MemoryStore and held to the script by the
// integration tests, operation for operation. It updates st (and agg, the
// aggregate bucket, when sh has one) and returns one result per op.
// Products are wrapped in float64() so the compiler cannot fuse them into
// FMAs, which would round differently from Lua.
func applyBatch(st *keyState, agg *keyState, sh shape, now clock, ops []op) []opResult {
	nowMS := now.ms()
	late := sh.notAfterMS != 0 && nowMS > sh.notAfterMS
	tokens := refill(st.b, st.found, now, sh.rate, sh.capacity, sh.floor)
	n := st.b.n
	// A hash has expired once its time is past (Redis: now > expiry).
	if !st.found || st.b.openExpires < nowMS {
		n = 0
		st.open = nil
	}
	if !st.found || st.b.voidsUntil < nowMS {
		st.voids = nil
	}
	voidsUntil := st.b.voidsUntil
	var atokens float64
	if agg != nil {
		atokens = refill(agg.b, agg.found, now, sh.aggRate, sh.aggCap, sh.floor)
	}
	dirty, opened := false, false
	out := make([]opResult, len(ops))
	for i, o := range ops {
		status, value := stAdmitted, math.NaN()
		switch o.kind {
		case opAdmit, opShadow:
			cost := o.amount
			invalid := !(cost > 0 && cost <= sh.capacity) || o.id == ""
			if invalid {
				cost = 0
			}
			own := tokens >= cost
			whole := agg == nil || atokens >= cost
			shadow := o.kind == opShadow
			switch {
			case late || invalid:
				status = stLate
			case !own && !shadow:
				status = stRefused
			case !whole && !shadow:
				status, value = stAggregate, atokens
			default:
				if n >= sh.max {
					if m := sweep(st, nowMS); m != n {
						n, dirty = m, true
					}
				}
				if n >= sh.max {
					status = stInFlight
					break
				}
				paid := cost
				if !own || !whole {
					status, paid = stShadow, 0
				}
				if nowMS <= voidsUntil && st.voids[o.id] {
					status = stLate // voided before it came
					break
				}
				if _, dup := st.open[o.id]; dup {
					status = stAlreadyOpen
					break
				}
				if st.open == nil {
					st.open = make(map[string]openReq)
				}
				st.open[o.id] = openReq{paid: paid, expiresMS: nowMS + sh.ttlMS}
				if status == stAdmitted {
					tokens -= cost
					if agg != nil {
						atokens -= cost
					}
				}
				n++
				dirty, opened = true, true
			}
		case opFinish, opVoid:
			rec, ok := st.open[o.id]
			if o.kind == opVoid && !ok {
				// Never admitted, or not yet: a tombstone until the voided
				// batch's deadline turns the admit away.
				status = stRefused
				if keep := int64(o.amount); keep > nowMS {
					if st.voids == nil {
						st.voids = make(map[string]bool)
					}
					st.voids[o.id] = true
					voidsUntil = max(voidsUntil, keep)
					dirty = true
				}
				break
			}
			if !ok {
				status = stRefused
				break
			}
			delete(st.open, o.id)
			n--
			give, delta := 0.0, 0.0
			if o.kind == opVoid {
				give = rec.paid
			} else if delta = o.amount; delta < 0 {
				give = -delta
			}
			if delta > 0 {
				tokens = max(tokens-delta, -sh.floor)
				if agg != nil {
					atokens = max(atokens-delta, -sh.floor)
				}
			}
			if give > 0 {
				tokens = min(tokens+give, sh.capacity)
				if agg != nil {
					atokens = min(atokens+give, sh.aggCap)
				}
			}
			dirty = true
		case opPeek:
		default:
			status = stNotAnOp
		}
		if value != value {
			value = tokens
		}
		out[i] = opResult{status: status, tokens: value}
	}
	if !dirty {
		return out
	}
	n = max(n, 0)
	st.b.n = n
	if voidsUntil < nowMS {
		voidsUntil, st.voids = 0, nil
	}
	st.b.voidsUntil = voidsUntil
	if n > 0 && opened && st.b.openExpires <= nowMS+sh.ttlMS {
		st.b.openExpires = later(nowMS, nowMS+sh.ttlMS)
	}
	voidsExpire := voidsExpiry(voidsUntil) // the bucket outlives the hash
	need := nowMS + resetMS(tokens, sh.rate, sh.capacity)
	if !st.found || need > st.b.expiresMS || st.b.openExpires > st.b.expiresMS || voidsExpire > st.b.expiresMS {
		need = later(nowMS, need)
		need = max(need, st.b.openExpires, voidsExpire)
		st.b.expiresMS = need
	}
	st.b.tokens, st.b.sec, st.b.usec, st.found = tokens, now.sec, now.usec, true
	if agg != nil {
		aneed := nowMS + resetMS(atokens, sh.aggRate, sh.aggCap)
		if !agg.found || aneed > agg.b.expiresMS {
			agg.b.expiresMS = later(nowMS, aneed)
		}
		agg.b.tokens, agg.b.sec, agg.b.usec, agg.found = atokens, now.sec, now.usec, true
	}
	return out
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
