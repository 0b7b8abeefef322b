package throttle

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// An aggregate bucket (the IPv6 /48) the primary refused is refused in
// process for every caller under it — each /64 a key of its own — until
// what is known of it could pay: no call, RefusedAggregate, the
// aggregate's tokens and limit, and a Retry-After that counts down from
// the primary's to the moment the first request goes to the primary again
// and is admitted. Another aggregate is not refused.
func TestFailoverRefusesAnAggregateForFree(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 10, Capacity: 10}}
	own := func(i int) Bucket {
		return Bucket{Key: "{n}:" + strconv.Itoa(i), Limit: Limit{Rate: 10, Capacity: 100}}
	}
	mustAdmit(t, f, Request{Bucket: own(0), Aggregate: agg, Cost: 8}).Ticket.Release() // 2 left in the /48
	refusedFrom := time.Now()
	a := mustAdmit(t, f, Request{Bucket: own(1), Aggregate: agg, Cost: 5})
	refusedTo := time.Now()
	if a.Allowed || a.Refusal != RefusedAggregate || primary.n() != 2 {
		t.Fatalf("the primary's refusal: refusal=%d %+v after %d calls, want the aggregate's", a.Refusal, a.Result, primary.n())
	}
	retry := a.Result.RetryAfter // about 300 ms: 3 tokens at 10/s
	n := 0
	for i := 2; time.Since(refusedFrom) < retry-50*time.Millisecond && n < 40; i++ {
		before := time.Now()
		r := mustAdmit(t, f, Request{Bucket: own(i), Aggregate: agg, Cost: 5})
		after := time.Now()
		n++
		res := r.Result
		if r.Allowed || r.Refusal != RefusedAggregate || res.Allowed || res.Cost != 5 || res.Limit != agg.Limit {
			t.Fatalf("request %d of another /64 before Retry-After: allowed=%v refusal=%d %+v, want refused by the aggregate", n, r.Allowed, r.Refusal, res)
		}
		// Its headers follow from the aggregate's tokens at its rate, as
		// the primary's would: Retry-After when 5 are there, the reset
		// when all 10 are.
		wantRetry := time.Duration(math.Ceil((5-res.Remaining)/10*1000)) * time.Millisecond
		wantReset := time.Duration((10 - res.Remaining) / 10 * float64(time.Second))
		if res.Remaining < 2 || res.Remaining >= 5 || res.RetryAfter != wantRetry || (res.ResetAfter-wantReset).Abs() > time.Millisecond {
			t.Fatalf("a free refusal with %g tokens: retry %v, reset %v; want %v, %v", res.Remaining, res.RetryAfter, res.ResetAfter, wantRetry, wantReset)
		}
		// It counts down from the primary's: what has passed since the
		// primary answered, to the millisecond.
		if lo, hi := retry-after.Sub(refusedFrom)-time.Millisecond, retry-before.Sub(refusedTo)+time.Millisecond; res.RetryAfter < lo || res.RetryAfter > hi {
			t.Fatalf("free refusal %d: Retry-After %v, want %v..%v (%v from the primary's %v)", n, res.RetryAfter, lo, hi, before.Sub(refusedTo), retry)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n == 0 || primary.n() != 2 || f.FreeRefusals() != uint64(n) {
		t.Fatalf("%d requests of a refused /48 made %d calls (%d refused for free), want none", n, primary.n()-2, f.FreeRefusals())
	}
	other := &Bucket{Key: "{m}", Limit: agg.Limit}
	if r := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{m}:1", Limit: own(0).Limit}, Aggregate: other, Cost: 5}); !r.Allowed || primary.n() != 3 {
		t.Fatalf("another /48: allowed=%v refusal=%d after %d calls, want asked and admitted", r.Allowed, r.Refusal, primary.n()-2)
	}
	time.Sleep(time.Until(refusedTo.Add(retry)))
	if r := mustAdmit(t, f, Request{Bucket: own(99), Aggregate: agg, Cost: 5}); !r.Allowed || primary.n() != 4 {
		t.Fatalf("at Retry-After: allowed=%v refusal=%d %+v after %d calls, want asked and admitted", r.Allowed, r.Refusal, r.Result, primary.n()-3)
	}
}

// A request the known aggregate can pay — a cheaper one — goes to the
// primary, and is admitted by it.
func TestFailoverAsksWhenTheAggregateHoldsTheCost(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	lim := Limit{Rate: 1e-3, Capacity: 100}
	mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:a", Limit: lim}, Aggregate: agg, Cost: 8}).Ticket.Release()
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:b", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
		t.Fatalf("the primary's refusal: %+v", a)
	}
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:c", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate || primary.n() != 2 {
		t.Fatalf("5 of a /48 holding 2: refusal=%d after %d calls, want refused for free", a.Refusal, primary.n()-2)
	}
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:d", Limit: lim}, Aggregate: agg, Cost: 2}); !a.Allowed || primary.n() != 3 {
		t.Fatalf("2 of a /48 holding 2: allowed=%v refusal=%d after %d calls, want asked and admitted", a.Allowed, a.Refusal, primary.n()-2)
	}
}

// After the primary refused an aggregate, a refund this replica settles
// through it that lets the next request pay sends that request to the
// primary, which admits it.
func TestFailoverAggregateFreeRefusalSeesItsOwnRefund(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	lim := Limit{Rate: 1e-3, Capacity: 100}
	held := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:a", Limit: lim}, Aggregate: agg, Cost: 10})
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:b", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
		t.Fatalf("the primary's refusal: %+v", a)
	}
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:c", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate || primary.n() != 2 {
		t.Fatalf("before the refund: refusal=%d after %d calls, want refused for free", a.Refusal, primary.n()-2)
	}
	held.Ticket.Settle(2) // 8 back in the /48
	if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:d", Limit: lim}, Aggregate: agg, Cost: 5}); !a.Allowed || primary.n() != 3 {
		t.Fatalf("after a refund of 8: allowed=%v refusal=%d after %d calls, want asked and admitted", a.Allowed, a.Refusal, primary.n()-2)
	}
}

// The guards of a caller's free refusal hold for its aggregate's: a shadow
// request, one under other limits, and every request after a refusal that
// answered a call sent while a settlement through the aggregate may have
// been on its way go to the primary.
func TestFailoverAggregateFreeRefusalGuards(t *testing.T) {
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	lim := Limit{Rate: 1e-3, Capacity: 100}
	refused := func(t *testing.T, f *Failover) {
		t.Helper()
		mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:a", Limit: lim}, Aggregate: agg, Cost: 8}).Ticket.Release()
		if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:b", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
			t.Fatalf("the primary's refusal: %+v", a)
		}
	}
	t.Run("shadow", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 1)
		refused(t, f)
		if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:c", Limit: lim}, Aggregate: agg, Cost: 5, Shadow: true}); !a.Allowed || !a.Shadow || primary.n() != 3 {
			t.Fatalf("a shadow request: %+v after %d calls, want asked and admitted in shadow", a, primary.n()-2)
		}
	})
	t.Run("other limits", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 1)
		refused(t, f)
		bigger := &Bucket{Key: agg.Key, Limit: Limit{Rate: 1e-3, Capacity: 20}}
		if mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:c", Limit: lim}, Aggregate: bigger, Cost: 5}); primary.n() != 3 {
			t.Fatalf("the aggregate's limits changed: %d calls, want asked", primary.n()-2)
		}
	})
	t.Run("settled before the call", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 1)
		f.Timeout = time.Minute // how long a finish may take to reach the primary
		held := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:a", Limit: lim}, Aggregate: agg, Cost: 10})
		held.Ticket.Settle(9) // 1 back, its finish on its way with a Redis primary
		for i := range 2 {
			if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:c", Limit: lim}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate || primary.n() != 2+i {
				t.Fatalf("request %d right after a settlement through the /48: refusal=%d after %d calls, want asked", i, a.Refusal, primary.n()-1)
			}
		}
	})
}

// What is known of settlements through aggregates is bounded by Remember,
// as what is known of the aggregates is.
func TestFailoverRemembersBoundedAggregateSettlements(t *testing.T) {
	f, _ := newFailover(FailLocal, 1)
	f.Remember = 2
	for i := range 5 {
		tag := "{" + strconv.Itoa(i) + "}"
		agg := &Bucket{Key: tag, Limit: Limit{Rate: 1e-3, Capacity: 10}}
		mustAdmit(t, f, Request{Bucket: Bucket{Key: tag + ":a", Limit: agg.Limit}, Aggregate: agg, Cost: 2}).Ticket.Settle(1)
	}
	f.known.mu.Lock()
	n := len(f.known.aggSettled)
	f.known.mu.Unlock()
	if n > 2 || n == 0 {
		t.Fatalf("%d aggregates' settlements remembered with Remember 2, want 1..2", n)
	}
}
