package throttle

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"
)

// sharingFailovers is n fail_mode local Failovers (n replicas) over one
// primary, each with a local store of its own on clock (nil: time.Now).
func sharingFailovers(n int, clock func() time.Time) ([]*Failover, *flakyStore) {
	primary := &flakyStore{Store: NewMemoryStore(MemoryOptions{})}
	reps := make([]*Failover, n)
	for i := range reps {
		reps[i] = &Failover{Primary: primary, Local: NewMemoryStore(MemoryOptions{Now: clock}), Mode: FailLocal, Replicas: n,
			ProbeInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	}
	return reps, primary
}

// admitCount counts the admissions of tries requests req on f, released at
// once unless hold.
func admitCount(t *testing.T, f *Failover, req Request, tries int, hold bool) int {
	t.Helper()
	n := 0
	for range tries {
		a := mustAdmit(t, f, req)
		if a.Allowed {
			n++
		}
		if !hold {
			a.Ticket.Release()
		}
	}
	return n
}

// TestFailoverLocalReplicasShareTheBucket: over an outage, replicas in
// fail_mode local together admit at most what the shared bucket held (as
// each last heard of it) plus its refill — a caller each replica saw, and
// one none saw — and hold at most MaxInFlight of a caller's requests open
// at once.
func TestFailoverLocalReplicasShareTheBucket(t *testing.T) {
	limit := Limit{Rate: 1e-3, Capacity: 10}
	t.Run("known", func(t *testing.T) {
		start := time.Now()
		reps, primary := sharingFailovers(2, nil)
		b := Bucket{Key: "k", Limit: limit}
		for _, f := range reps {
			if a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}); !a.Allowed {
				t.Fatalf("a full bucket refused 1: %+v", a.Result)
			} else {
				a.Ticket.Release()
			}
		}
		primary.set(true)
		during := 0
		for _, f := range reps {
			during += admitCount(t, f, Request{Bucket: b, Cost: 1}, 50, false)
		}
		if most := limit.Capacity + math.Floor(limit.Rate*time.Since(start).Seconds()); float64(2+during) > most {
			t.Fatalf("2 replicas admitted 2 before the outage and %d during it, from a bucket of %g: want at most %g", during, limit.Capacity, most)
		}
		if during < 7 { // 9/2 and 8/2: 4 each
			t.Fatalf("2 replicas admitted %d during the outage, want the 8 their shares hold", during)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		reps, primary := sharingFailovers(2, nil)
		primary.set(true)
		b := Bucket{Key: "never", Limit: limit}
		during := 0
		for _, f := range reps {
			during += admitCount(t, f, Request{Bucket: b, Cost: 1}, 50, false)
		}
		if during != 10 {
			t.Fatalf("2 replicas admitted %d of a caller neither knew, from a bucket of 10: want 10", during)
		}
	})
	t.Run("in flight", func(t *testing.T) {
		for _, n := range []int{2, 3} {
			reps, primary := sharingFailovers(n, nil)
			primary.set(true)
			b := Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 1000}}
			open := 0
			for _, f := range reps {
				open += admitCount(t, f, Request{Bucket: b, Cost: 1, MaxInFlight: 4}, 50, true)
			}
			// Each replica holds ceil(4 / n): 4 on 2 replicas, 6 on 3.
			if want := n * ((4 + n - 1) / n); open != want {
				t.Fatalf("%d replicas held %d requests open at once with MaxInFlight 4, want %d", n, open, want)
			}
		}
		reps, primary := sharingFailovers(2, nil)
		primary.set(true)
		b := Bucket{Key: "one", Limit: Limit{Rate: 1, Capacity: 1000}}
		if open := admitCount(t, reps[0], Request{Bucket: b, Cost: 1, MaxInFlight: 1}, 5, true); open != 1 {
			t.Fatalf("a replica held %d requests open with MaxInFlight 1, want 1 (never 0)", open)
		}
	})
}

// TestFailoverLocalReplicasShareTheAggregate: the aggregate bucket (an
// IPv6 /48) is shared out as the caller's own is: callers of one /48 on
// two replicas admit together at most what it holds.
func TestFailoverLocalReplicasShareTheAggregate(t *testing.T) {
	reps, primary := sharingFailovers(2, nil)
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	own := Limit{Rate: 1e-3, Capacity: 100}
	// The /48 drained to 4 through the primary: a refusal tells each replica so.
	if a := mustAdmit(t, reps[0], Request{Bucket: Bucket{Key: "{n}:x", Limit: own}, Aggregate: agg, Cost: 6}); !a.Allowed {
		t.Fatalf("a full /48 refused 6: %+v", a.Result)
	}
	for _, f := range reps {
		if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: "{n}:y", Limit: own}, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
			t.Fatalf("want the /48 holding 4 to refuse 5, got %+v", a)
		}
	}
	primary.set(true)
	during := 0
	for i, f := range reps {
		b := Bucket{Key: "{n}:" + string(rune('a'+i)), Limit: own}
		during += admitCount(t, f, Request{Bucket: b, Aggregate: agg, Cost: 1}, 50, false)
	}
	if during > 4 {
		t.Fatalf("2 replicas admitted %d through a /48 holding 4, want at most 4", during)
	}
	fresh := &Bucket{Key: "{m}", Limit: agg.Limit}
	during = 0
	for i, f := range reps {
		b := Bucket{Key: "{m}:" + string(rune('a'+i)), Limit: own}
		during += admitCount(t, f, Request{Bucket: b, Aggregate: fresh, Cost: 1}, 50, false)
	}
	if during != 10 {
		t.Fatalf("2 replicas admitted %d through a /48 neither knew, of 10: want 10", during)
	}
}

// TestFailoverLocalReplicasShareTheGlobalBudget: the global budget's
// leases are admissions like any other: in fail_mode local, two replicas
// take together at most what its bucket holds.
func TestFailoverLocalReplicasShareTheGlobalBudget(t *testing.T) {
	reps, primary := sharingFailovers(2, nil)
	primary.set(true)
	b := Bucket{Key: "global", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	taken := 0.0
	for _, f := range reps {
		g := &Global{Store: f, Bucket: b, Hold: time.Hour}
		for range 200 {
			if _, ok, err := g.Take(context.Background(), 1); err != nil {
				t.Fatal(err)
			} else if ok {
				taken++
			}
		}
		g.Close()
	}
	if taken > 100 {
		t.Fatalf("2 replicas took %g from a global budget of 100", taken)
	}
}

// TestFailoverLocalShareAdmitsAnExpensiveRequest: a request costing more
// than a replica's share of the capacity is still admitted locally, once
// the share has refilled to its price at the replica's rate.
func TestFailoverLocalShareAdmitsAnExpensiveRequest(t *testing.T) {
	clock := newFakeClock()
	reps, primary := sharingFailovers(4, clock.Now)
	f := reps[0]
	primary.set(true)
	b := Bucket{Key: "k", Limit: Limit{Rate: 8, Capacity: 10}} // 2.5 and 2/s a replica
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 8})
	if a.Allowed || math.Abs(a.Result.Remaining-2.5) > 1e-3 || a.Result.RetryAfter != 2750*time.Millisecond {
		t.Fatalf("8 from a share of 2.5: allowed=%v %+v; want refused, 2.75 s to go", a.Allowed, a.Result)
	}
	clock.Advance(a.Result.RetryAfter)
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 8}); !a.Allowed {
		t.Fatalf("8 after its Retry-After: %+v", a.Result)
	}
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}); a.Allowed {
		t.Fatalf("1 right after 8 from a share refilled to 8: %+v", a.Result)
	}
}

// TestFailoverLocalShareKeepsWhatItSpent: a local bucket full to a cheap
// request's capacity (the replica's share) is kept until it would hold the
// whole capacity, so that an expensive request after it finds it as it
// was left, refilled since — not seeded again, as if nothing had been
// spent from it in the outage.
func TestFailoverLocalShareKeepsWhatItSpent(t *testing.T) {
	reps, primary := sharingFailovers(2, nil)
	f := reps[0]
	primary.set(true)
	b := Bucket{Key: "k", Limit: Limit{Rate: 4, Capacity: 10}} // 5 and 2/s a replica
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 0.5, TTL: 10 * time.Millisecond}); !a.Allowed {
		t.Fatalf("0.5 from a share of 5: %+v", a.Result)
	} else {
		a.Ticket.Release()
	}
	spent := time.Now()
	// Full to 5 again after 250 ms: a bucket of capacity 5, its request
	// closed, would be forgotten a second after that.
	time.Sleep(1300 * time.Millisecond)
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 8})
	most := 4.5 + 2*time.Since(spent).Seconds()
	if a.Allowed && most < 8 || !a.Allowed && a.Result.Remaining > most+1e-3 {
		t.Fatalf("8 from a share of 4.5 refilled at 2/s for at most %v: allowed=%v %+v; want at most %.3f tokens",
			time.Since(spent), a.Allowed, a.Result, most)
	}
}

// A bucket seeded for a request that costs its whole capacity (its
// share's capacity is then the whole bucket's) is kept, as one seeded at
// a smaller share is, until it would hold the whole capacity: spent from
// by cheaper requests of the share's capacity, it is not forgotten once it
// would have been full at the seed, and seeded again as if nothing had
// been spent from it.
func TestMemorySeedAtTheWholeCapacityIsKept(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	whole := Bucket{Key: "k", Limit: Limit{Rate: 2, Capacity: 10}}
	s.seed("k", whole, 5, 0, 10) // full at 2.5 s, unless spent from
	clock.Advance(100 * time.Millisecond)
	share := Bucket{Key: "k", Limit: Limit{Rate: 2, Capacity: 5}}
	a, err := s.Admit(t.Context(), Request{Bucket: share, Cost: 4, TTL: time.Millisecond})
	if err != nil || !a.Allowed {
		t.Fatalf("4 from 5: %+v %v", a, err)
	}
	a.Ticket.Release()
	// 1 token left at 0.1 s: the whole 10 at 4.6 s.
	clock.Advance(3900 * time.Millisecond)
	s.mu.Lock()
	s.sweep(clockOf(clock.Now()).ms())
	_, kept := s.keys["k"]
	s.mu.Unlock()
	if !kept {
		t.Fatal("the bucket was forgotten at 4 s, before it would hold its whole capacity (4.6 s)")
	}
}
