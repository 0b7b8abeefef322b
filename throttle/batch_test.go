package throttle

import (
	"testing"
)

// testShape is a bucket of 10 tokens refilled at 2/s, a debt floor of 5
// tokens, at most 2 requests open for 30 s.
var testShape = shape{rate: 2 * micro, capacity: 10 * micro, floor: 5 * micro, max: 2, ttlMS: 30000}

var t0 = clock{sec: 1_700_000_000, usec: 500_000}

func (c clock) plus(ms int64) clock {
	us := c.usec + ms*1000
	return clock{sec: c.sec + us/1_000_000, usec: us % 1_000_000}
}

func TestApplyBatch(t *testing.T) {
	admit := func(id string, cost float64) op { return op{kind: opAdmit, id: id, amount: cost * micro} }
	shadow := func(id string, cost float64) op { return op{kind: opShadow, id: id, amount: cost * micro} }
	finish := func(id string, delta float64) op { return op{kind: opFinish, id: id, amount: delta * micro} }
	void := func(id string) op { return op{kind: opVoid, id: id} }
	move := func(id string, delta float64) op { return op{kind: opMove, id: id, amount: delta * micro} }
	// voidUntil voids id with a tombstone kept until t0 + ms.
	voidUntil := func(id string, ms int64) op { return op{kind: opVoid, id: id, amount: float64(t0.ms() + ms)} }
	lease := func(id string, cost float64) op { return op{kind: opLease, id: id, amount: cost * micro} }
	peek := op{kind: opPeek}
	leaseShape := shape{rate: 2 * micro, capacity: 10 * micro, floor: 5 * micro, max: 4, ttlMS: 30000}
	// slowLease refills a micro-token a second: its steps 30 s apart
	// refill 30.
	slowLease := leaseShape
	slowLease.rate = 1
	giveBack := func(id string, replay ...replayed) op { return op{kind: opFinish, id: id, replay: replay} }
	type step struct {
		at   int64 // ms after t0
		ops  []op
		want []opResult
	}
	r := func(status int, tokens float64) opResult { return opResult{status: status, tokens: tokens * micro} }
	tests := []struct {
		name  string
		sh    shape
		steps []step
	}{
		{"a missing bucket is full", testShape, []step{
			{0, []op{peek, admit("a", 4)}, []opResult{r(stAdmitted, 10), r(stAdmitted, 6)}},
		}},
		{"a refusal spends nothing and opens nothing", testShape, []step{
			{0, []op{admit("a", 8), admit("b", 3), peek}, []opResult{r(stAdmitted, 2), r(stRefused, 2), r(stAdmitted, 2)}},
			{0, []op{finish("b", 0)}, []opResult{r(stRefused, 2)}},
		}},
		{"refill with time, up to capacity", testShape, []step{
			{0, []op{admit("a", 10)}, []opResult{r(stAdmitted, 0)}},
			{1500, []op{peek}, []opResult{r(stAdmitted, 3)}},
			{60000, []op{peek}, []opResult{r(stAdmitted, 10)}},
		}},
		{"the in-flight cap refuses, a finish frees a slot", testShape, []step{
			{0, []op{admit("a", 1), admit("b", 1), admit("c", 1)}, []opResult{r(stAdmitted, 9), r(stAdmitted, 8), r(stInFlight, 8)}},
			{0, []op{finish("a", 0), admit("c", 1)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 7)}},
		}},
		{"dead requests expire and free their slots", testShape, []step{
			{0, []op{admit("a", 1), admit("b", 1)}, []opResult{r(stAdmitted, 9), r(stAdmitted, 8)}},
			{30001, []op{admit("c", 1)}, []opResult{r(stAdmitted, 9)}},
			{30001, []op{finish("a", 0)}, []opResult{r(stRefused, 9)}},
		}},
		{"settlement refunds what was not used", testShape, []step{
			{0, []op{admit("a", 6), finish("a", -4)}, []opResult{r(stAdmitted, 4), r(stAdmitted, 8)}},
			{0, []op{finish("a", -4)}, []opResult{r(stRefused, 8)}}, // once only
		}},
		{"settlement debits down to the floor", testShape, []step{
			{0, []op{admit("a", 9), finish("a", 100)}, []opResult{r(stAdmitted, 1), r(stAdmitted, -5)}},
			{1000, []op{admit("b", 1)}, []opResult{r(stRefused, -3)}},
			{4000, []op{admit("b", 1)}, []opResult{r(stAdmitted, 2)}},
		}},
		{"a move settles its request and keeps its slot under the next id", testShape, []step{
			{0, []op{admit("a", 6), move("a", -4), admit("b", 1), admit("c", 1)},
				[]opResult{r(stAdmitted, 4), r(stAdmitted, 8), r(stAdmitted, 7), r(stInFlight, 7)}},
			{0, []op{finish("a", 0), move("a", 0), finish("a+", -1), admit("c", 1)},
				[]opResult{r(stRefused, 7), r(stRefused, 7), r(stAdmitted, 8), r(stAdmitted, 7)}},
		}},
		{"a move debits down to the floor", testShape, []step{
			{0, []op{admit("a", 9), move("a", 100)}, []opResult{r(stAdmitted, 1), r(stAdmitted, -5)}},
		}},
		{"a moved request lives a TTL from its move", testShape, []step{
			{0, []op{admit("a", 1)}, []opResult{r(stAdmitted, 9)}},
			{20000, []op{move("a", 0)}, []opResult{r(stAdmitted, 10)}},
			// a expired at +30 s; a+ lives to +50 s and holds its slot.
			{40000, []op{admit("b", 1), admit("c", 1)}, []opResult{r(stAdmitted, 9), r(stInFlight, 9)}},
		}},
		{"a move whose next id is open does nothing", testShape, []step{
			{0, []op{admit("a", 1), admit("a+", 1), move("a", -1), move("x", -1)},
				[]opResult{r(stAdmitted, 9), r(stAdmitted, 8), r(stRefused, 8), r(stRefused, 8)}},
		}},
		{"a void refunds exactly what was paid, once", testShape, []step{
			{0, []op{admit("a", 7), void("a"), void("a")}, []opResult{r(stAdmitted, 3), r(stAdmitted, 10), r(stRefused, 10)}},
		}},
		{"a request is dead at its very expiry", testShape, []step{
			{0, []op{admit("a", 1), admit("b", 1)}, []opResult{r(stAdmitted, 9), r(stAdmitted, 8)}},
			{30000, []op{admit("c", 1)}, []opResult{r(stAdmitted, 9)}},
		}},
		{"a repeated admit is admitted once", testShape, []step{
			{0, []op{admit("a", 3), admit("a", 3)}, []opResult{r(stAdmitted, 7), r(stAlreadyOpen, 7)}},
		}},
		{"shadow admits an empty bucket, spends nothing, keeps the cap", testShape, []step{
			{0, []op{admit("a", 9), shadow("b", 5), shadow("c", 1)}, []opResult{r(stAdmitted, 1), r(stShadow, 1), r(stInFlight, 1)}},
			{0, []op{void("b")}, []opResult{r(stAdmitted, 1)}}, // gives back the nothing it paid
		}},
		{"a late batch admits nothing but still finishes", shape{rate: 2 * micro, capacity: 10 * micro, max: 2, ttlMS: 30000, notAfterMS: t0.ms() - 1}, []step{
			{0, []op{admit("a", 1)}, []opResult{r(stLate, 10)}},
		}},
		{"a batch at its very deadline is on time", shape{rate: 2 * micro, capacity: 10 * micro, max: 2, ttlMS: 30000, notAfterMS: t0.ms()}, []step{
			{0, []op{admit("a", 1)}, []opResult{r(stAdmitted, 9)}},
		}},
		{"the open requests live until their hash's expiry, inclusive", testShape, []step{
			{0, []op{admit("a", 4)}, []opResult{r(stAdmitted, 6)}},
			// The hash expires at +30 s and an eighth (TestApplyBatchExpiries).
			{33750, []op{finish("a", -4)}, []opResult{r(stAdmitted, 10)}},
		}},
		{"a tombstone turns its admit away until its deadline, inclusive", testShape, []step{
			{0, []op{voidUntil("b", 100)}, []opResult{r(stRefused, 10)}},
			{50, []op{admit("b", 1)}, []opResult{r(stLate, 10)}},
			{100, []op{admit("c", 1)}, []opResult{r(stAdmitted, 9)}}, // a write at the deadline keeps it
			{100, []op{admit("b", 1)}, []opResult{r(stLate, 9)}},
			{101, []op{admit("b", 1)}, []opResult{{status: stAdmitted, tokens: 8_002_000}}}, // 1 ms at 2/s refilled 0.002
		}},
		{"a tombstone whose deadline is now keeps nothing", testShape, []step{
			{0, []op{voidUntil("b", 0), admit("b", 1)}, []opResult{r(stRefused, 10), r(stAdmitted, 9)}},
		}},
		{"a void of an open request also turns away a late copy of its admit", testShape, []step{
			{0, []op{admit("a", 4), voidUntil("a", 60000)}, []opResult{r(stAdmitted, 6), r(stAdmitted, 10)}},
			{10, []op{admit("a", 4)}, []opResult{r(stLate, 10)}},
		}},
		{"an invalid admit changes nothing", testShape, []step{
			{0, []op{admit("a", 11), admit("", 1), admit("b", 0), {kind: 'X'}}, []opResult{r(stLate, 10), r(stLate, 10), r(stLate, 10), r(stNotAnOp, 10)}},
			{0, []op{finish("b", 0)}, []opResult{r(stRefused, 10)}}, // a free admit opened nothing
		}},
		{"refunds and refill stop at the capacity less what is leased", testShape, []step{
			{0, []op{admit("a", 4), lease("L", 2)}, []opResult{r(stAdmitted, 6), r(stAdmitted, 4)}},
			{0, []op{finish("a", -4)}, []opResult{r(stAdmitted, 8)}},
			{5000, []op{peek}, []opResult{r(stAdmitted, 8)}},
			{5000, []op{finish("L", -2)}, []opResult{r(stAdmitted, 10)}}, // its give-back lifts the cap first
		}},
		{"a lease's give-back counts it leased no more before its replay", testShape, []step{
			{0, []op{lease("L", 4)}, []opResult{r(stAdmitted, 6)}},
			{5000, []op{peek}, []opResult{r(stAdmitted, 6)}}, // refilled to the capacity less the lease
			// Its 4 back as of when it took them (before the bucket's own
			// time: at it), 3 spent 1 s ago: 6 → 10 → 7 → 9. Replayed under
			// the lease's cap, the bucket would end at 5.
			{5000, []op{{kind: opFinish, id: "L", replay: []replayed{{d: -4 * micro, agoUS: 10_000_000}, {d: 3 * micro, agoUS: 1_000_000}}}},
				[]opResult{r(stAdmitted, 9)}},
		}},
		{"a lease counts until its entry expires", testShape, []step{
			{0, []op{lease("L", 2)}, []opResult{r(stAdmitted, 8)}},
			{29999, []op{peek}, []opResult{r(stAdmitted, 8)}},
			{30000, []op{peek}, []opResult{r(stAdmitted, 10)}},
			{30000, []op{finish("L", -2)}, []opResult{r(stAdmitted, 10)}}, // closed, counted no more
		}},
		{"a void or a move of a lease takes it off what is leased", testShape, []step{
			{0, []op{lease("L", 3), void("L")}, []opResult{r(stAdmitted, 7), r(stAdmitted, 10)}},
			{0, []op{lease("M", 3), move("M", -1)}, []opResult{r(stAdmitted, 7), r(stAdmitted, 8)}},
			{5000, []op{peek}, []opResult{r(stAdmitted, 10)}},
		}},
		// Without the lease the bucket would go 10 → 9 (the lease's
		// request) → 1 → -5 (6 more than it paid, to the floor of 5):
		// beside it, the same debit takes the bucket to -6, and the
		// give-back (its 2 back, then its request's 1) ends at -5.
		{"a debit beside a lease meets the floor of the bucket and the lease together", leaseShape, []step{
			{0, []op{lease("L", 2), admit("a", 8), finish("a", 6)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 0), r(stAdmitted, -6)}},
			{0, []op{giveBack("L", replayed{d: -2 * micro, agoUS: 10_000_000}, replayed{d: micro})}, []opResult{r(stAdmitted, -5)}},
		}},
		{"the floor of a bucket and its lease stops at the floor of both", leaseShape, []step{
			{0, []op{lease("L", 2), admit("a", 8), finish("a", 100)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 0), r(stAdmitted, -7)}},
			// Its 2 back, at the floor of 5; its request's 1 finds the
			// bucket there and takes nothing.
			{0, []op{giveBack("L", replayed{d: -2 * micro, agoUS: 10_000_000}, replayed{d: micro})}, []opResult{r(stAdmitted, -5)}},
		}},
		{"a lease that gives back less than it took lifts the bucket to the floor", leaseShape, []step{
			{0, []op{lease("L", 2), admit("a", 8), finish("a", 100)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 0), r(stAdmitted, -7)}},
			{0, []op{finish("L", 0)}, []opResult{r(stAdmitted, -5)}}, // it spent its 2
		}},
		// A replay's debit finds the bucket below the floor its lease's
		// close raised (-5): it takes nothing, and the refund after it
		// lifts the bucket from where it is — not from the floor the
		// debit would have lifted it to (-3).
		{"a debit never lifts a bucket below its floor", leaseShape, []step{
			{0, []op{lease("L", 2), admit("a", 8), finish("a", 100)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 0), r(stAdmitted, -7)}},
			{0, []op{giveBack("L", replayed{d: micro}, replayed{d: -2 * micro})}, []opResult{r(stAdmitted, -5)}},
		}},
		// A lease whose replica died counts until its entry expires; then
		// the bucket is where a request that paid as much and never
		// finished leaves it: lifted to the floor. A give-back that late
		// takes nothing off what is leased, and refunds nothing.
		{"a lease that never comes back lifts the bucket to the floor when it stops counting", slowLease, []step{
			{0, []op{lease("L", 2), admit("a", 8), finish("a", 100)}, []opResult{r(stAdmitted, 8), r(stAdmitted, 0), r(stAdmitted, -7)}},
			{29999, []op{peek}, []opResult{{status: stAdmitted, tokens: -7*micro + 29}}},
			{30000, []op{peek}, []opResult{{status: stAdmitted, tokens: -5*micro + 30}}},
			{30000, []op{giveBack("L", replayed{d: -2 * micro, agoUS: 1 << 40})}, []opResult{{status: stAdmitted, tokens: -5*micro + 30}}},
		}},
		{"a lease recounts the open ones: a dead one stops counting", leaseShape, []step{
			{0, []op{lease("L1", 2)}, []opResult{r(stAdmitted, 8)}},
			{20000, []op{lease("L2", 2)}, []opResult{r(stAdmitted, 6)}},
			{31000, []op{peek, lease("L3", 1)}, []opResult{r(stAdmitted, 6), r(stAdmitted, 5)}}, // L1 died at +30 s
			{40000, []op{peek}, []opResult{r(stAdmitted, 7)}},
		}},
		{"the aggregate refuses and reports its own tokens", shape{rate: 2 * micro, capacity: 10 * micro, aggRate: 1 * micro, aggCap: 5 * micro, max: 4, ttlMS: 1000}, []step{
			{0, []op{admit("a", 4), admit("b", 4)}, []opResult{r(stAdmitted, 6), r(stAggregate, 1)}},
			{0, []op{admit("c", 1), void("c")}, []opResult{r(stAdmitted, 5), r(stAdmitted, 6)}}, // the aggregate's last token pays
			{0, []op{finish("a", -4)}, []opResult{r(stAdmitted, 10)}},
			{0, []op{admit("b", 4)}, []opResult{r(stAdmitted, 6)}},
			// A settlement above the price debits the aggregate too.
			{0, []op{finish("b", 1), admit("e", 1)}, []opResult{r(stAdmitted, 5), r(stAggregate, 0)}},
		}},
		{"a settlement takes the aggregate down to the floor, not below", shape{rate: 2 * micro, capacity: 10 * micro, floor: 5 * micro, aggRate: 1 * micro, aggCap: 5 * micro, max: 4, ttlMS: 1000}, []step{
			{0, []op{admit("a", 4), finish("a", 100)}, []opResult{r(stAdmitted, 6), r(stAdmitted, -5)}},
			{3000, []op{admit("b", 1)}, []opResult{r(stAggregate, -2)}}, // own -5+6, aggregate -5+3
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st, agg keyState
			var aggp *keyState
			if tt.sh.aggCap > 0 {
				aggp = &agg
			}
			for i, s := range tt.steps {
				got := applyBatch(&st, aggp, tt.sh, t0.plus(s.at), s.ops)
				for j := range got {
					if got[j] != s.want[j] {
						t.Fatalf("step %d op %d (%c %s): got %+v, want %+v", i, j, s.ops[j].kind, s.ops[j].id, got[j], s.want[j])
					}
				}
			}
		})
	}
}

func TestApplyBatchExpiries(t *testing.T) {
	var st keyState
	sh := testShape
	applyBatch(&st, nil, sh, t0, []op{{kind: opAdmit, id: "a", amount: 4 * micro}})
	// 4 tokens to refill at 2/s is 2 s; the request stays open 30 s; the
	// expiries get slack (an eighth, at least a second).
	if want := t0.ms() + 30000 + 30000/8; st.b.openExpires != want {
		t.Errorf("open hash expires at +%d ms, want +%d", st.b.openExpires-t0.ms(), want-t0.ms())
	}
	// The bucket lives as long as the open hash (its 2 s refill is shorter).
	if st.b.expiresMS != st.b.openExpires {
		t.Errorf("bucket expires at +%d ms, open hash at +%d", st.b.expiresMS-t0.ms(), st.b.openExpires-t0.ms())
	}
	before := st.b.expiresMS
	applyBatch(&st, nil, sh, t0.plus(10), []op{{kind: opFinish, id: "a"}})
	if st.b.expiresMS != before {
		t.Errorf("a finish that needs no longer life moved the expiry")
	}
	// A refusal writes nothing at all.
	var empty keyState
	applyBatch(&empty, nil, sh, t0, []op{{kind: opAdmit, id: "a", amount: 11 * micro}, {kind: opPeek}})
	if empty.found {
		t.Errorf("a refusal and a peek created the bucket: %+v", empty)
	}
}

// TestApplyBatchOpenHashExpiry: the open hash's expiry moves out when a new
// request could outlive it — also when it would expire at the very moment
// the new one does, without slack — and stays when nothing remains open.
func TestApplyBatchOpenHashExpiry(t *testing.T) {
	sh := testShape // requests open for 30 s; expiries get an eighth, at least 1 s, of slack
	admitAt := func(st *keyState, ms int64, id string) int64 {
		applyBatch(st, nil, sh, t0.plus(ms), []op{{kind: opAdmit, id: id, amount: micro}})
		if st.b.expiresMS < st.b.openExpires {
			t.Errorf("at +%d ms: the bucket expires at +%d ms, before its open hash (+%d)", ms, st.b.expiresMS-t0.ms(), st.b.openExpires-t0.ms())
		}
		return st.b.openExpires - t0.ms()
	}
	var st keyState
	if got := admitAt(&st, 0, "a"); got != 33750 {
		t.Fatalf("first request: open hash expires at +%d ms, want +33750", got)
	}
	// At +3750 ms a new request's 30 s end exactly when the hash expires.
	if got := admitAt(&st, 3750, "b"); got != 37500 {
		t.Errorf("a request that would end at the hash's expiry: +%d ms, want +37500", got)
	}
	st = keyState{}
	admitAt(&st, 0, "a")
	applyBatch(&st, nil, sh, t0.plus(5000), []op{{kind: opFinish, id: "a"}})
	if got := admitAt(&st, 10000, "c"); got != 43750 {
		t.Errorf("a request at +10 s: open hash expires at +%d ms, want +43750", got)
	}
	var closed keyState
	applyBatch(&closed, nil, sh, t0, []op{{kind: opAdmit, id: "a", amount: micro}, {kind: opFinish, id: "a"}})
	if closed.b.openExpires != 0 {
		t.Errorf("nothing left open, yet the open hash expires at +%d ms", closed.b.openExpires-t0.ms())
	}
	// The bucket (which the memory store forgets at its expiry) lives until
	// it has refilled: 1 token short is 500 ms, plus a second of slack…
	if got := closed.b.expiresMS - t0.ms(); got != 1500 {
		t.Errorf("1 token short: the bucket expires at +%d ms, want +1500", got)
	}
	// …and a deeper drain later lives longer: 9.8 tokens short at +100 ms
	// is 4.9 s, plus a second.
	applyBatch(&closed, nil, sh, t0.plus(100), []op{{kind: opAdmit, id: "b", amount: 9 * micro}, {kind: opFinish, id: "b"}})
	if got := closed.b.expiresMS - t0.ms(); got != 6000 {
		t.Errorf("9.8 tokens short at +100 ms: the bucket expires at +%d ms, want +6000", got)
	}
	// A tombstone kept past the bucket's expiry keeps the bucket too, as
	// long as its hash lives: a second past the tombstone.
	applyBatch(&closed, nil, sh, t0.plus(200), []op{{kind: opVoid, id: "x", amount: float64(t0.ms() + 60000)}})
	if got := closed.b.expiresMS - t0.ms(); got != 61000 || closed.b.voidsUntil != t0.ms()+60000 {
		t.Errorf("a tombstone until +60 s: the bucket expires at +%d ms, want +61000 (tombstones until +%d)", got, closed.b.voidsUntil-t0.ms())
	}
}

// FuzzApplyBatch holds the arithmetic to its invariants for any sequence
// of operations: tokens with what is leased stay in [-floor, capacity]
// (a lease's give-back with a replay too);
// what is leased is never less than the open
// leases paid, nor negative; a refusal changes nothing; a finish or void
// applies at most once; no refund exceeds what was paid; the in-flight
// cap holds.
func FuzzApplyBatch(f *testing.F) {
	f.Add([]byte{0, 5, 1, 2, 3, 9, 40, 2, 200, 1}, uint16(300), uint8(2))
	f.Add([]byte{1, 1, 1, 1, 3, 3, 3, 3, 0, 0}, uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, prog []byte, gapMS uint16, maxOpen uint8) {
		sh := testShape
		sh.max = int(maxOpen%4) + 1
		var st keyState
		now := t0
		paid := map[string]float64{}
		for i := 0; i+1 < len(prog) && i < 64; i += 2 {
			kind := []opKind{opAdmit, opShadow, opFinish, opVoid, opPeek, opMove, opLease}[int(prog[i])%7]
			id := string(rune('a' + prog[i+1]%4))
			amount := float64(prog[i+1]) * micro / 16
			if kind == opFinish || kind == opMove {
				amount -= 8 * micro
				if amount < -paid[id] {
					amount = -paid[id] // geotoll never refunds more than was paid
				}
			}
			var replay []replayed
			if rec, ok := st.open[id]; ok && rec.lease && (kind == opFinish || kind == opMove) && prog[i+1]%2 == 1 {
				// A token lease's give-back: what it took, back as of when
				// it took it, then a settlement it made since.
				replay = []replayed{{d: -rec.paid, agoUS: 1 << 40}, {d: float64(prog[i+1]) * micro / 8, agoUS: int64(gapMS%2000) * 500}}
				amount = 0
			}
			held := leasedAt(st, now)
			before, wasOpen := refill(st.b, st.found, now, sh.rate, sh.capacity-held, sh.floor+held), st.open[id]
			_, open := st.open[id]
			n := 0
			if st.found && st.b.openExpires > now.ms() {
				n = st.b.n
			}
			res := applyBatch(&st, nil, sh, now, []op{{kind: kind, id: id, amount: amount, replay: replay}})[0]
			if res.tokens > sh.capacity {
				t.Fatalf("op %d: tokens %v above the capacity", i, res.tokens)
			}
			switch {
			case (kind == opAdmit || kind == opShadow || kind == opLease) && res.status == stAdmitted:
				if res.tokens != before-amount {
					t.Fatalf("op %d: admit of %v from %v left %v", i, amount, before, res.tokens)
				}
				paid[id] = amount
			case kind == opShadow && res.status == stShadow:
				paid[id] = 0
				fallthrough
			case res.status == stRefused, res.status == stInFlight, res.status == stAlreadyOpen, kind == opPeek:
				if res.tokens != before {
					t.Fatalf("op %d (%c, status %d): tokens %v -> %v", i, kind, res.status, before, res.tokens)
				}
			case kind == opVoid && res.status == stAdmitted:
				if !open || res.tokens != min(before+wasOpen.paid, sh.capacity-leasedAt(st, now)) {
					t.Fatalf("op %d: void of %s (paid %v) took %v to %v", i, id, wasOpen.paid, before, res.tokens)
				}
			}
			if (kind == opFinish || kind == opVoid || kind == opMove) && res.status == stAdmitted && !open {
				t.Fatalf("op %d: %c of %s, which was not open, applied", i, kind, id)
			}
			leased, out := leasedAt(st, now), 0.0
			for _, o := range st.open {
				if o.lease && o.expiresMS > now.ms() {
					out += o.paid
				}
			}
			if leased < 0 || leased < out || res.tokens+leased > sh.capacity || res.tokens+leased < -sh.floor {
				t.Fatalf("op %d (%c): %v tokens and %v leased (%v on open leases), capacity %v", i, kind, res.tokens, leased, out, sh.capacity)
			}
			if st.found && st.b.n > sh.max {
				t.Fatalf("op %d: %d open, cap %d", i, st.b.n, sh.max)
			}
			if st.found && st.b.n != len(st.open) && n >= 0 {
				t.Fatalf("op %d: count %d, %d open", i, st.b.n, len(st.open))
			}
			now = now.plus(int64(gapMS % 2000))
		}
	})
}

// leasedAt is what st's bucket counts as leased at now (nothing once
// leasedUntil has passed).
func leasedAt(st keyState, now clock) float64 {
	if !st.found || st.b.leasedUntil <= now.ms() {
		return 0
	}
	return st.b.leased
}

// TestApplyBatchKeepsAnExpiryExactlyNeeded: commit pushes a key's expiry
// out only when the state needs a later one; an expiry that is already
// exactly the one needed — to the millisecond — stays, since pushing it
// out would add slack for nothing. Each case closes a request at t0 (a
// finish that settles nothing, so the bucket holds 6 of 10 tokens: 2 s to
// refill at 2/s) from a state built so that one of the four needs (the
// bucket's refill, the open hash, the tombstones' hash, the aggregate's
// refill) equals the stored expiry and the others are shorter.
func TestApplyBatchKeepsAnExpiryExactlyNeeded(t *testing.T) {
	now := t0.ms()
	sh := testShape
	sh.aggRate, sh.aggCap = 2*micro, 10*micro
	stored := func(expires, openExpires, voidsUntil int64) keyState {
		return keyState{
			b: bucketVal{
				tokens: 6 * micro, sec: t0.sec, usec: t0.usec,
				expiresMS: expires, openExpires: openExpires, n: 1, voidsUntil: voidsUntil,
			},
			found: true,
			open:  map[string]openReq{"a": {paid: micro, expiresMS: openExpires}},
			voids: map[string]bool{},
		}
	}
	for _, c := range []struct {
		name          string
		st            keyState
		aggExpires    int64
		want, wantAgg int64 // ms after t0
	}{
		{"refill equals the expiry", stored(now+2000, now+1000, 0), now + 2000, 2000, 2000},
		{"open hash equals the expiry", stored(now+2500, now+2500, 0), now + 2000, 2500, 2000},
		{"tombstones' hash equals the expiry", stored(now+2500, now+1000, now+2500-voidsGraceMS), now + 2000, 2500, 2000},
		// The aggregate needs 2 s and has 1,999 ms: pushed out with a
		// second of slack.
		{"aggregate needs a millisecond more", stored(now+2000, now+1000, 0), now + 1999, 2000, 3000},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			agg := keyState{b: bucketVal{tokens: 6 * micro, sec: t0.sec, usec: t0.usec, expiresMS: c.aggExpires}, found: true}
			got := applyBatch(&st, &agg, sh, t0, []op{{kind: opFinish, id: "a"}})
			if got[0].status != stAdmitted || st.b.n != 0 {
				t.Fatalf("the finish was not applied: %+v, %d open", got[0], st.b.n)
			}
			if e := st.b.expiresMS - now; e != c.want {
				t.Errorf("the bucket expires at +%d ms, want +%d", e, c.want)
			}
			if e := agg.b.expiresMS - now; e != c.wantAgg {
				t.Errorf("the aggregate expires at +%d ms, want +%d", e, c.wantAgg)
			}
		})
	}
}
