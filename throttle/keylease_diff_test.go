package throttle

import (
	"fmt"
	"testing"
	"time"
)

// FuzzLeaseGainsNothing holds a lease's record (spendLocked, handBack)
// and applyBatch to the plain token bucket: one caller's lease runs its
// requests in process, one at a time, for its hold, and pays the debits of
// the caller's requests Redis admitted while it runs one, as the
// RedisStore does; another replica's requests are admitted and settled
// beside it, deep in debt or not. The same requests go to a bucket without
// the lease. Once the lease is back the bucket holds no more than the
// bucket without it — the caller may lose refill, never gain — but for
// the gain keyLease documents, bounded here: the lease may hand its
// tokens back by a move while it runs a request (retire, expire), sent at
// once or after other writes. That request's settlement goes with the
// lease's give-back, which waits in the caller's lane until the move's
// call is back: when the request ends while the move's call is out, its
// finish without the lease goes at once, and the bucket with the lease
// may gain up to its refund.
//
// A busy lease whose hold is over moves before anything more is settled
// on it, and a request ends within the request TTL (geotoll serve's TTL
// outlasts its requests). With size's top bit the lease's entry expires
// 2.5 s after it was taken (the request TTL of 2 s and its hold after
// it): its give-back may come later (its process stalled), and then
// refunds nothing.
func FuzzLeaseGainsNothing(f *testing.F) {
	// The lease runs r; the caller's b costs more than it paid, paid by
	// the lease; r costs nothing; another replica's debt goes deep.
	f.Add([]byte{0, 1, 4, 1, 1, 0, 2, 200, 3, 255}, uint8(3))
	f.Add([]byte{2, 10, 0, 3, 3, 200, 1, 0, 6, 40, 0, 1, 1, 7}, uint8(4))
	// r runs on the lease; another replica's debt goes deep; the lease
	// moves (its replay meets the floor) and r is refunded in full.
	f.Add([]byte{0, 1, 2, 65, 3, 48, 7, 0, 1, 0}, uint8(3))
	// The same with the move held back until after the debt.
	f.Add([]byte{0, 1, 7, 1, 2, 65, 3, 48, 7, 0, 1, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, prog []byte, size uint8) {
		sh := shape{rate: 2 * micro, capacity: 10 * micro, floor: 5 * micro, max: 64, ttlMS: 1 << 30}
		var plain, leased keyState
		base := time.Unix(1_700_000_000, 0)
		ms := int64(0)
		now := func() clock { return t0.plus(ms) }
		at := func() time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
		with := func(st *keyState, sh shape, o op) opResult { return applyBatch(st, nil, sh, now(), []op{o})[0] }
		one := func(st *keyState, o op) opResult { return with(st, sh, o) }
		both := func(o op, dLeased float64) (opResult, opResult) {
			p := one(&plain, o)
			o.amount = dLeased
			return p, one(&leased, o)
		}
		ls := &keyLease{s: &RedisStore{opts: RedisOptions{LeaseRequests: 64}}, id: "L", sh: sh,
			size: float64(size%8+1) * micro, grantAt: at()}
		ls.left = ls.size
		// lsh is the lease's shape, rsh its requests': late, the request
		// TTL is 2 s and the lease's entry outlives the hold by that much.
		lsh, rsh := sh, sh
		if size&0x80 != 0 {
			lsh.ttlMS, rsh.ttlMS = 2500, 2000
		}
		if r := with(&leased, lsh, op{kind: opLease, id: "L", amount: ls.size}); r.status != stAdmitted {
			t.Fatalf("a lease of %v from a full bucket: %+v", ls.size, r)
		}
		var running string
		var runPaid float64
		var runAt int64 // when r was admitted
		// past: r has run past the request TTL, which geotoll serve's
		// requests never do (its TTL outlasts them): it ends no more, and
		// nothing more is settled on the lease that runs it.
		past := func() bool { return running != "" && ms-runAt >= rsh.ttlMS }
		// moved: the lease handed its tokens back by a move while r ran
		// (retire, expire); move is that move until it reaches Redis,
		// which may be after other writes of the caller's.
		var moved bool
		var move *pending
		var ended float64 // how r, run on the moved lease, settled
		// over: r ended while the move's call was out, its give-back
		// waiting behind it; waited is r's refund then.
		var over bool
		var waited float64
		var others []string
		paid := map[string]float64{}
		n := 0
		trace := []string{}
	run:
		for i := 0; i+1 < len(prog) && i < 64; i += 2 {
			arg := prog[i+1]
			n++
			id := fmt.Sprint(n)
			kind := prog[i] % 8
			if over && kind != 2 && kind != 3 && kind != 6 && kind != 7 {
				continue // only other replicas' writes, and time, until the move is back
			}
			if past() && (kind == 1 || kind == 4 || kind == 7 && move == nil) {
				continue
			}
			if (kind == 1 || kind == 4) && running != "" && !moved && at().Sub(ls.grantAt) > DefaultLeaseHold {
				// Its hold is over: the lease moves before anything more
				// is settled on it (expire, or moveOverdueLocked for a
				// timer that has not run).
				moved, move = true, ls.moveLocked()
				one(&leased, replayOf(move, at()))
				move = nil
			}
			switch kind {
			case 0: // a request on the lease
				c := float64(arg%4+1) * micro / 2
				if running != "" || moved || ls.left < c || at().Sub(ls.grantAt) > DefaultLeaseHold {
					continue // a lease admits for its hold (admitLeased)
				}
				if p := with(&plain, rsh, op{kind: opAdmit, id: "r" + id, amount: c}); p.status != stAdmitted {
					return // the plain bucket refuses what the lease would pay: they part
				}
				ls.spendLocked(at(), c)
				ls.left -= c
				running, runPaid, runAt = "r"+id, c, ms
			case 1: // it ends; a debit ends the lease
				if running == "" {
					continue
				}
				d := max(float64(int(arg%8)-4)*micro/4, -runPaid)
				if d != 0 {
					ls.spendLocked(at(), d)
				}
				ls.left -= d
				if moved && move == nil {
					// Its settlement goes with the give-back (the lease is
					// over) at once, as its finish would without it.
					ended = d
					break run
				}
				if moved {
					// The give-back waits for the move's call; the finish
					// without the lease goes now.
					one(&plain, op{kind: opFinish, id: running, amount: d})
					running, over, waited = "", true, max(-d, 0)
					break
				}
				one(&plain, op{kind: opFinish, id: running, amount: d})
				running = ""
				if d > 0 {
					break run
				}
			case 2: // another replica's request
				c := float64(arg%32+1) * micro / 2
				p, l := both(op{kind: opAdmit, id: "b" + id, amount: c}, c)
				if p.status != l.status {
					return // one refuses what the other admits: they part
				}
				if p.status == stAdmitted {
					others, paid["b"+id] = append(others, "b"+id), c
				}
			case 3: // it settles
				if len(others) == 0 {
					continue
				}
				o := others[0]
				others = others[1:]
				d := max(float64(int(arg%64)-16)*micro/2, -paid[o])
				both(op{kind: opFinish, id: o, amount: d}, d)
			case 4: // the caller's request through Redis beside the busy lease, a debit the lease pays
				if running == "" {
					continue
				}
				c := float64(arg%4+1) * micro / 2
				p, l := both(op{kind: opAdmit, id: "h" + id, amount: c}, c)
				if p.status != l.status {
					return // one refuses what the other admits: they part
				}
				if p.status != stAdmitted {
					continue
				}
				d := float64(arg%8+1) * micro / 4
				x := min(d, max(ls.left, 0))
				if x > 0 {
					ls.spendLocked(at(), x)
				}
				ls.left -= x
				both(op{kind: opFinish, id: "h" + id, amount: d}, d-x)
			case 5: // the caller's request through Redis, refunded
				c := float64(arg%4+1) * micro / 2
				p, l := both(op{kind: opAdmit, id: "h" + id, amount: c}, c)
				if p.status != l.status {
					return // one refuses what the other admits: they part
				}
				if p.status == stAdmitted {
					d := -float64(arg%3) * c / 2
					both(op{kind: opFinish, id: "h" + id, amount: d}, d)
				}
			case 6:
				ms += int64(arg) * 10
			case 7: // the busy lease moves: at once, or once more writes came
				switch {
				case move != nil: // its call reaches Redis (its replay dated then)
					one(&leased, replayOf(move, at()))
					move = nil
					if over {
						break run // the give-back goes next
					}
				case running != "" && !moved:
					moved, move = true, ls.moveLocked()
					if arg%2 == 0 {
						one(&leased, replayOf(move, at()))
						move = nil
					}
				default:
					continue
				}
			}
			trace = append(trace, fmt.Sprintf("%d:%d", kind, arg))
			ms += int64(arg % 16)
		}
		if running != "" {
			one(&plain, op{kind: opFinish, id: running, amount: ended})
		}
		if move != nil {
			one(&leased, replayOf(move, at()))
		}
		late := ms >= lsh.ttlMS // the lease's entry has expired
		give := replayOf(ls.handBack(opFinish), at())
		if r := one(&leased, give); r.status != stAdmitted && (!late || r.status != stRefused) { // a late one may find its entry gone
			t.Fatalf("the give-back %+v: %+v", give, r)
		}
		for _, later := range []int64{0, 1000, 10000} {
			ms += later
			p, l := one(&plain, op{kind: opPeek}), one(&leased, op{kind: opPeek})
			if l.tokens > p.tokens+waited+1e-6 {
				t.Fatalf("+%d ms after the give-back %+v: the bucket holds %v with the lease back, %v without it (%v)",
					later, give, l.tokens, p.tokens, trace)
			}
		}
	})
}

// replayOf is the operation a lease's give-back or move p sends at now,
// its record replayed at its moments.
func replayOf(p *pending, now time.Time) op {
	o := p.op
	for _, x := range p.spends {
		o.replay = append(o.replay, replayed{d: x.d, agoUS: now.Sub(x.at).Microseconds()})
	}
	return o
}
