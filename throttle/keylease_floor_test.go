package throttle

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestAnotherReplicasDebitMeetsTheFloorOfTheBucketAndTheLease: while
// replica A's lease is out (its tokens spent in Redis), replica B settles
// a request that cost more than it paid, deeper than the debt floor. The
// floor cuts that debit where it would cut it without the lease — at the
// floor of the bucket and the lease together — so that once the lease is
// back the bucket holds what the in-process store holds after the same
// requests: the caller keeps nothing of the debt the lease held.
//
// A takes a lease of 8 from a bucket of 80 (80 less two requests of 1),
// admits one request of 1 on it, and keeps it out; B admits 70 through
// Redis and settles it at 75 (the floor of 3 cuts nothing without the
// lease: 2 left) or 100 (the floor cuts 17: -3 left).
func TestAnotherReplicasDebitMeetsTheFloorOfTheBucketAndTheLease(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, c := range []struct {
			price, want float64
		}{{75, 2}, {100, -3}} {
			a := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
			b := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
			mem := NewMemoryStore(MemoryOptions{})
			bk := Bucket{Key: f.key(fmt.Sprint("floor-with-lease-", c.price)), Limit: Limit{Rate: 1e-6, Capacity: 80}}
			r, rm := withBusyLease(t, a, mem, bk) // Redis 70, A's lease 7, r runs on it
			r.Ticket.Settle(1)
			rm.Ticket.Settle(1)
			big := Request{Bucket: bk, Cost: 70, Debt: 3, MaxInFlight: 8}
			x, xm := mustAdmit(t, b, big), mustAdmit(t, mem, big)
			if !x.Allowed || !xm.Allowed {
				t.Fatalf("B's 70 of 70: %+v / in-process %+v", x, xm)
			}
			x.Ticket.Settle(c.price)
			xm.Ticket.Settle(c.price)
			flushWithin(t, b) // B's debit reaches Redis while A's lease is out
			if st := a.Stats(); st.Leases != 1 || st.Local != 1 {
				t.Fatalf("A: %+v; want one lease, one request admitted on it", st)
			}
			flushWithin(t, a) // the lease goes back
			got, want := mustPeek(t, a, bk).Remaining, mustPeek(t, mem, bk).Remaining
			// The rate is a micro-token a second: either may have refilled
			// a few since the other's requests.
			if math.Abs(want-c.want) > 1e-5 || math.Abs(got-want) > 1e-5 {
				t.Errorf("B settled 70 at %v beside A's lease: the bucket holds %v with the lease back, the in-process store %v (want %v)",
					c.price, got, want, c.want)
			}
		}
	})
}

// TestScriptMatchesTwinAtTheFloorBesideALease holds admit.lua to
// applyBatch where debits meet the debt floor while leases are out, and
// checks what the bucket holds once they are back (or counted no more):
// what the same requests leave without leases, or less: a give-back that
// comes after its lease stopped counting refunds nothing.
// The bucket holds 10 with a floor of 5 and refills a micro-token a
// second.
func TestScriptMatchesTwinAtTheFloorBesideALease(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		sh := shape{rate: 1, capacity: 10 * micro, floor: 5 * micro, max: 4, ttlMS: 200}
		lease := func(id string, cost float64) op { return op{kind: opLease, id: id, amount: cost * micro} }
		admit := func(id string, cost float64) op { return op{kind: opAdmit, id: id, amount: cost * micro} }
		finish := func(id string, delta float64) op { return op{kind: opFinish, id: id, amount: delta * micro} }
		giveBack := func(id string, took float64, spent ...float64) op {
			o := op{kind: opFinish, id: id, replay: []replayed{{d: -took * micro, agoUS: 1 << 40}}}
			for _, d := range spent {
				o.replay = append(o.replay, replayed{d: d * micro})
			}
			return o
		}
		for _, c := range []struct {
			name    string
			batches [][]op
			keep    bool          // the first batch opens requests for a minute
			pause   time.Duration // before the last batch
			want    float64       // tokens after the last
		}{
			{name: "cut short of both floors", batches: [][]op{
				{lease("L", 2), admit("a", 8), finish("a", 6)},
				{giveBack("L", 2, 1)},
			}, want: -5},
			{name: "cut at both floors", batches: [][]op{
				{lease("L", 2), admit("a", 8), finish("a", 100)},
				{giveBack("L", 2, 1)},
			}, want: -5},
			{name: "a move hands it back", batches: [][]op{
				{lease("L", 2), admit("a", 8), finish("a", 100)},
				{{kind: opMove, id: "L", replay: []replayed{{d: -2 * micro, agoUS: 1 << 40}}}},
			}, want: -5},
			{name: "two leases out", batches: [][]op{
				{lease("L", 2), lease("M", 3), admit("a", 5), finish("a", 100)},
				{giveBack("L", 2)},
				{giveBack("M", 3, 1)},
			}, want: -5},
			{name: "a lease that spent all it took", batches: [][]op{
				{lease("L", 2), admit("a", 8), finish("a", 100)},
				{finish("L", 0)},
			}, want: -5},
			// A debit of its replay finds the bucket below the floor the
			// lease's close raised: it lifts it to nothing (-3 after the
			// refund, if it did).
			{name: "a debit never lifts a bucket below its floor", batches: [][]op{
				{lease("L", 2), admit("a", 8), finish("a", 100)},
				{{kind: opFinish, id: "L", replay: []replayed{{d: micro}, {d: -2 * micro}}}},
			}, want: -5},
			// k, open for a minute, keeps the open hash (and the lease's
			// entry in it) however long the pause past the lease's TTL
			// lasts on a loaded machine. A lease that comes back after
			// its entry expired refunds nothing: Redis took it for dead
			// (lifting the bucket to the floor that no longer counts it,
			// -5), and what it held is lost, as a dead process's is.
			{name: "a give-back after the lease stopped counting", batches: [][]op{
				{admit("k", 1)},
				{lease("L", 2), admit("a", 7), finish("a", 100)},
				{giveBack("L", 2)},
			}, keep: true, pause: 300 * time.Millisecond, want: -5},
			{name: "a void after the lease stopped counting", batches: [][]op{
				{admit("k", 1)},
				{lease("L", 2), admit("a", 7), finish("a", 100)},
				{{kind: opVoid, id: "L"}},
			}, keep: true, pause: 300 * time.Millisecond, want: -5},
			// Of a late give-back only a net debit applies: the lease
			// spent 3 of the 2 it took (10 - 1 - 2 - 1).
			{name: "a late give-back debits what its lease overspent", batches: [][]op{
				{admit("k", 1)},
				{lease("L", 2)},
				{giveBack("L", 2, 3)},
			}, keep: true, pause: 300 * time.Millisecond, want: 6},
			// and what it held is lost: 1 of the 2 it took (10 - 1 - 2).
			{name: "a late give-back refunds nothing", batches: [][]op{
				{admit("k", 1)},
				{lease("L", 2)},
				{giveBack("L", 2, 1)},
			}, keep: true, pause: 300 * time.Millisecond, want: 7},
			// A late move too: it keeps its running request's slot.
			{name: "a late move", batches: [][]op{
				{admit("k", 1)},
				{lease("L", 2), admit("a", 7), finish("a", 100)},
				{{kind: opMove, id: "L", replay: []replayed{{d: -2 * micro, agoUS: 1 << 40}}}},
			}, keep: true, pause: 300 * time.Millisecond, want: -5},
		} {
			key := f.key("floor-twin-" + c.name)
			var twin keyState
			var last opResult
			for i, ops := range c.batches {
				if i == len(c.batches)-1 {
					time.Sleep(c.pause)
				}
				bsh := sh
				if c.keep && i == 0 {
					bsh.ttlMS = 60000
				}
				got := f.run(key, bsh, ops)
				stored := f.state(key)
				at := clock{sec: stored.b.sec, usec: stored.b.usec}
				twin = expiredAt(twin, at)
				want := applyBatch(&twin, nil, bsh, at, ops)
				compareResults(t, i, ops, got, want)
				if twin.b != stored.b {
					t.Fatalf("%s, batch %d: Redis stores %+v, the twin %+v", c.name, i, stored.b, twin.b)
				}
				last = got[len(got)-1]
			}
			// A micro-token a second: a loaded machine may refill a few.
			if last.status != stAdmitted || last.tokens < c.want*micro || last.tokens > c.want*micro+10 {
				t.Errorf("%s: the last operation answered %+v, want %v tokens", c.name, last, c.want)
			}
		}
	})
}

// TestALeasesRefundNeverFollowsADebitTheFloorCut: a refund the lease
// makes in process is recorded into the settlements before it, never as
// a refund of its own after one of them: its give-back's replay applies
// the settlements made before the bucket's last write all at that write's
// moment, so a debit the floor cuts there, followed by a refund applied in
// full, would leave the bucket higher than the same requests leave it
// without leases.
//
// A's lease (8, 7 left) runs r (1); A's request b goes to Redis, costs
// 0.5 more than it paid, and the lease pays that; r then costs nothing
// (its 1 back to the lease). B admits 60 and settles it at 100, deep below
// the floor of 3. With the lease back the bucket holds -3, as in process.
func TestALeasesRefundNeverFollowsADebitTheFloorCut(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		sc := newFloorScene(t, f, "refund-after-cut")
		sc.x.Ticket.Settle(1.5) // paid by the lease
		sc.xm.Ticket.Settle(1.5)
		sc.r.Ticket.Settle(0)
		sc.rm.Ticket.Settle(0)
		sc.deepDebt(t)
		flushWithin(t, sc.a) // the lease goes back
		got, want := mustPeek(t, sc.a, sc.bk).Remaining, mustPeek(t, sc.mem, sc.bk).Remaining
		// A micro-token a second: either may have refilled a few.
		if math.Abs(want+3) > 1e-5 || math.Abs(got-want) > 1e-5 {
			t.Errorf("with the lease back the bucket holds %v, the in-process store %v (want -3)", got, want)
		}
	})
}

// TestALeaseAdmitsNothingFromADebtTheFloorNoLongerCuts: a lease's
// estimate of its bucket floors at the debt floor less the lease, where
// Redis stops a debit while the lease is out — not at the debt floor,
// which would count a debt Redis holds as cut off and admit in process
// what the bucket without the lease refuses.
//
// A's lease (8, 7 left) runs r (1); A's request b goes to Redis. B admits
// 60 and settles it at 100: Redis stops the bucket at -11 (the floor of 3
// less the lease's 8). A sees it there (b's finish and a peek), then r
// ends: the lease holds 7, and with the bucket -4. A's next request of 1
// goes to Redis with the lease given back and is refused there (the
// bucket holds -3), as in process.
func TestALeaseAdmitsNothingFromADebtTheFloorNoLongerCuts(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		sc := newFloorScene(t, f, "estimate-below-floor")
		a, mem := sc.a, sc.mem
		sc.deepDebt(t)
		sc.x.Ticket.Settle(1)
		sc.xm.Ticket.Settle(1)
		// The peek carries b's finish (or follows it): both replies show
		// A the bucket at -11.
		if got := mustPeek(t, a, sc.bk).Remaining; got > -4+1e-5 {
			t.Fatalf("A peeks %v with its lease's 7; want -4 or less", got)
		}
		sc.r.Ticket.Settle(1)
		sc.rm.Ticket.Settle(1)
		q, qm := mustAdmit(t, a, sc.req), mustAdmit(t, mem, sc.req)
		if q.Allowed || qm.Allowed {
			t.Errorf("A's q of 1: %+v, the in-process store's %+v; want both refused (the bucket holds -3)", q.Result, qm.Result)
		}
		if q.Allowed {
			q.Ticket.Settle(1)
		}
		if qm.Allowed {
			qm.Ticket.Settle(1)
		}
		if st := a.Stats(); st.Local != 1 {
			t.Errorf("A admitted %d requests on its lease; want only r", st.Local)
		}
	})
}

// floorScene is the opening of the tests of a lease beside a debt at the
// floor: replica A holds a lease of its caller's bucket (capacity 80, a
// debt floor of 3) of 8, 7 left, and runs r (1) on it; A's request x (b)
// of 1 goes to Redis beside it. Each request has its twin in mem, an
// in-process store: the bucket without leases.
type floorScene struct {
	a, b         *RedisStore // A holds the lease; B takes none
	mem          Store
	bk           Bucket
	req          Request // a request of 1 with the debt floor of 3
	r, rm, x, xm Admission
}

func newFloorScene(t *testing.T, f *redisFixture, name string) *floorScene {
	t.Helper()
	sc := &floorScene{
		a:   NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold}),
		b:   NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1}),
		mem: NewMemoryStore(MemoryOptions{}),
		bk:  Bucket{Key: f.key(name), Limit: Limit{Rate: 1e-6, Capacity: 80}},
	}
	sc.r, sc.rm = withBusyLease(t, sc.a, sc.mem, sc.bk) // Redis 70, A's lease 7, r runs on it
	sc.req = Request{Bucket: sc.bk, Cost: 1, Debt: 3, MaxInFlight: 8}
	sc.x, sc.xm = mustAdmit(t, sc.a, sc.req), mustAdmit(t, sc.mem, sc.req)
	if !sc.x.Allowed || !sc.xm.Allowed || sc.a.Stats().Local != 1 {
		t.Fatalf("A's b beside its busy lease: %+v / in-process %+v, %+v", sc.x, sc.xm, sc.a.Stats())
	}
	return sc
}

// deepDebt has B admit 60 and settle it at 100, far below the floor, and
// flushes B.
func (sc *floorScene) deepDebt(t *testing.T) {
	t.Helper()
	big := Request{Bucket: sc.bk, Cost: 60, Debt: 3, MaxInFlight: 8}
	y, ym := mustAdmit(t, sc.b, big), mustAdmit(t, sc.mem, big)
	if !y.Allowed || !ym.Allowed {
		t.Fatalf("B's 60: %+v / in-process %+v", y, ym)
	}
	y.Ticket.Settle(100)
	ym.Ticket.Settle(100)
	flushWithin(t, sc.b)
}
