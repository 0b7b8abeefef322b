package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// fakeClock is a MemoryOptions.Now that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// storeCase is one Store under test and how to name its keys: the memory
// store, and a RedisStore on the single Redis and on the Cluster.
type storeCase struct {
	name  string
	store Store
	key   func(id string) string
}

// everyStore runs fn against a MemoryStore (real clock), a RedisStore on
// the test Redis and one on the test Redis Cluster. The scenarios use
// refill rates slow enough that the time the test takes cannot matter.
func everyStore(t *testing.T, fn func(t *testing.T, sc storeCase)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		pre := testenv.Prefix(t)
		fn(t, storeCase{"memory", NewMemoryStore(MemoryOptions{}), func(id string) string { return BucketKey(pre, "test", id) }})
	})
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		fn(t, storeCase{"redis", f.store, f.key})
	})
}

// slow refills a token in about 11 days: nothing the test does earns one.
// It does refill a micro-token a second, the unit the stores count in: a
// test that expects an exact count accepts those refilled since it began
// (slowHolds, slowLeft), so that a loaded machine that stretches it past a
// second does not fail it.
var slow = Limit{Rate: 1e-6, Capacity: 10}

// slowLeft reports whether a bucket of the slow rate, made after start,
// shows got tokens where want are expected: want, and the micro-token a
// second it may have refilled since.
func slowLeft(got, want float64, start time.Time) bool {
	return slowHolds(toMicro(got), want, start)
}

// slowRetry is the exact Retry-After of a request of cost refused by a
// bucket of the slow rate that holds remaining tokens: a second for each
// micro-token missing.
func slowRetry(cost, remaining float64) time.Duration {
	return time.Duration(toMicro(cost)-toMicro(remaining)) * time.Second
}

func mustAdmit(t *testing.T, s Store, req Request) Admission {
	t.Helper()
	a, err := s.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("Admit(%q, cost %v): %v", req.Key, req.Cost, err)
	}
	return a
}

func mustPeek(t *testing.T, s Store, b Bucket) Result {
	t.Helper()
	r, err := s.Peek(context.Background(), b)
	if err != nil {
		t.Fatalf("Peek(%q): %v", b.Key, err)
	}
	return r
}

// settled waits until the bucket holds want tokens (a Redis store sends
// finishes shortly after they are made), failing after a deadline.
func settled(t *testing.T, s Store, b Bucket, want float64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		r := mustPeek(t, s, b)
		if math.Abs(r.Remaining-want) < 1e-3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %v tokens, want %v", b.Key, r.Remaining, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStoreAdmitsUntilEmpty(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		b := Bucket{Key: sc.key("empty"), Limit: slow}
		start := time.Now()
		for i := range 3 {
			a := mustAdmit(t, sc.store, Request{Bucket: b, Cost: 3})
			if !a.Allowed || !slowLeft(a.Result.Remaining, 10-3*float64(i+1), start) {
				t.Fatalf("admit %d: %+v", i+1, a)
			}
			a.Ticket.Release()
		}
		a := mustAdmit(t, sc.store, Request{Bucket: b, Cost: 3})
		if a.Allowed || a.Refusal != RefusedBucket || !slowLeft(a.Result.Remaining, 1, start) {
			t.Fatalf("fourth admit: %+v, want refused by the bucket with 1 left", a)
		}
		// Retry-After is exact: 2 missing tokens (less the micro-tokens
		// refilled) at 1e-6/s.
		if want := slowRetry(3, a.Result.Remaining); a.Result.RetryAfter != want || a.Ticket != nil {
			t.Fatalf("retry after %v, want %v; ticket %+v", a.Result.RetryAfter, want, a.Ticket)
		}
		settled(t, sc.store, b, 1)
	})
}

func TestStoreInFlightCap(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		req := Request{Bucket: Bucket{Key: sc.key("cap"), Limit: slow}, Cost: 1, MaxInFlight: 2}
		start := time.Now()
		a1, a2 := mustAdmit(t, sc.store, req), mustAdmit(t, sc.store, req)
		a3 := mustAdmit(t, sc.store, req)
		if !a1.Allowed || !a2.Allowed || a3.Allowed || a3.Refusal != RefusedInFlight || !slowLeft(a3.Result.Remaining, 8, start) {
			t.Fatalf("three admits with a cap of 2: %+v / %+v / %+v", a1, a2, a3)
		}
		a1.Ticket.Release()
		deadline := time.Now().Add(3 * time.Second)
		for {
			a := mustAdmit(t, sc.store, req)
			if a.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a released slot was never freed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func TestStoreSettle(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		b := Bucket{Key: sc.key("settle"), Limit: slow}
		start := time.Now()
		// Refund: paid 6, cost 2 → 4 back.
		a := mustAdmit(t, sc.store, Request{Bucket: b, Cost: 6, Debt: 5})
		a.Ticket.Settle(2)
		a.Ticket.Settle(0) // a second settle does nothing
		settled(t, sc.store, b, 8)
		// A refund never exceeds what was paid: a negative cost settles at
		// 0 (paid 3 → 3 back, not 103); an unknown (NaN) one at the price.
		a = mustAdmit(t, sc.store, Request{Bucket: b, Cost: 3, Debt: 5})
		a.Ticket.Settle(-100)
		settled(t, sc.store, b, 8)
		a = mustAdmit(t, sc.store, Request{Bucket: b, Cost: 3, Debt: 5})
		a.Ticket.Settle(math.NaN())
		settled(t, sc.store, b, 5)
		a = mustAdmit(t, sc.store, Request{Bucket: b, Cost: 3, Debt: 5})
		a.Ticket.Settle(0)
		settled(t, sc.store, b, 5)
		// Debit: paid 1, cost 20 → down to the floor of -5, not -11.
		a = mustAdmit(t, sc.store, Request{Bucket: b, Cost: 1, Debt: 5})
		a.Ticket.Settle(20)
		settled(t, sc.store, b, -5)
		r := mustAdmit(t, sc.store, Request{Bucket: b, Cost: 1, Debt: 5})
		if r.Allowed || !slowLeft(r.Result.Remaining, -5, start) || r.Result.RetryAfter != slowRetry(1, r.Result.Remaining) {
			t.Fatalf("admit from a bucket in debt: %+v", r)
		}
		// A refused request settles nothing (its ticket is zero).
		r.Ticket.Settle(0)
		settled(t, sc.store, b, -5)
	})
}

func TestStoreShadow(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		req := Request{Bucket: Bucket{Key: sc.key("shadow"), Limit: slow}, Cost: 8, MaxInFlight: 2, Shadow: true}
		a1 := mustAdmit(t, sc.store, req)
		a2 := mustAdmit(t, sc.store, req)
		a3 := mustAdmit(t, sc.store, req)
		if !a1.Allowed || a1.Shadow || !a2.Allowed || !a2.Shadow || a3.Allowed || a3.Refusal != RefusedInFlight {
			t.Fatalf("shadow admits: %+v / %+v / %+v: want paid, shadowed, refused by the cap", a1, a2, a3)
		}
		a2.Ticket.Settle(100) // a shadow admission settles nothing
		a1.Ticket.Settle(8)
		settled(t, sc.store, req.Bucket, 2)
	})
}

func TestStoreAggregate(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		own := Bucket{Key: sc.key("agg") + ":a", Limit: slow}
		other := Bucket{Key: sc.key("agg") + ":b", Limit: slow}
		agg := &Bucket{Key: sc.key("agg"), Limit: Limit{Rate: slow.Rate, Capacity: 5}}
		start := time.Now()
		a := mustAdmit(t, sc.store, Request{Bucket: own, Aggregate: agg, Cost: 4})
		b := mustAdmit(t, sc.store, Request{Bucket: other, Aggregate: agg, Cost: 4})
		if !a.Allowed || b.Allowed || b.Refusal != RefusedAggregate || !slowLeft(b.Result.Remaining, 1, start) || b.Result.Limit != agg.Limit {
			t.Fatalf("aggregate: %+v then %+v", a, b)
		}
		a.Ticket.Settle(0) // refunds the aggregate too
		settled(t, sc.store, *agg, 5)
		settled(t, sc.store, own, 10)
	})
}

func TestStoreErrors(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		b := Bucket{Key: sc.key("errors"), Limit: slow}
		for _, c := range []struct {
			req  Request
			want error
		}{
			{Request{Bucket: b, Cost: 11}, ErrCostExceedsCapacity},
			{Request{Bucket: b, Cost: 0}, ErrInvalidCost},
			{Request{Bucket: b, Cost: math.NaN()}, ErrInvalidCost},
			{Request{Bucket: b, Cost: 1e-9}, ErrInvalidCost},
		} {
			if _, err := sc.store.Admit(context.Background(), c.req); !errors.Is(err, c.want) {
				t.Errorf("Admit(cost %v) = %v, want %v", c.req.Cost, err, c.want)
			}
		}
		if _, err := sc.store.Admit(context.Background(), Request{Bucket: Bucket{Limit: slow}, Cost: 1}); err == nil {
			t.Error("a request without a key was accepted")
		}
		if r := mustPeek(t, sc.store, b); r.Remaining != 10 {
			t.Errorf("refused requests changed the bucket: %+v", r)
		}
	})
}

func TestMemoryRetryAfterIsExact(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	req := Request{Bucket: Bucket{Key: "k", Limit: Limit{Rate: 2, Capacity: 10}}, Cost: 10}
	mustAdmit(t, s, req).Ticket.Release()
	req.Cost = 3
	a := mustAdmit(t, s, req) // deficit 3 tokens at 2/s
	if a.Allowed || a.Result.RetryAfter != 1500*time.Millisecond || a.Result.RetryAfterSeconds() != 2 || a.Result.ResetAfter != 5*time.Second {
		t.Fatalf("got %+v, want refused, retry 1500 ms, reset 5 s", a.Result)
	}
	clock.Advance(a.Result.RetryAfter - time.Millisecond)
	if a := mustAdmit(t, s, req); a.Allowed || a.Result.RetryAfter != time.Millisecond {
		t.Fatalf("1 ms early: %+v, want refused with 1 ms to go", a.Result)
	}
	clock.Advance(time.Millisecond)
	if a := mustAdmit(t, s, req); !a.Allowed || a.Result.RetryAfter != 0 {
		t.Fatalf("after RetryAfter: %+v, want admitted", a.Result)
	}
}

func TestMemoryForgetsIdleBuckets(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	req := Request{Bucket: Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}, Cost: 4, TTL: time.Second}
	a := mustAdmit(t, s, req)
	if s.size() != 1 {
		t.Fatalf("%d keys after an admission", s.size())
	}
	a.Ticket.Release()
	clock.Advance(6 * time.Second) // full after 4 s, plus the expiry's slack
	mustPeek(t, s, req.Bucket)
	if n := s.size(); n != 0 {
		t.Fatalf("%d keys held after the bucket refilled", n)
	}
	// A bucket with a request open lives until the request expires.
	a = mustAdmit(t, s, Request{Bucket: req.Bucket, Cost: 1, TTL: 30 * time.Second})
	clock.Advance(10 * time.Second)
	mustPeek(t, s, req.Bucket)
	if n := s.size(); n != 1 {
		t.Fatalf("the bucket of an open request was forgotten")
	}
}

// A key is gone once the clock is past its expiry, as Redis expires a key
// of PEXPIREAT t only when its clock is past t: at t itself it still holds
// (with its open requests, whose late finish still refunds).
func TestMemoryKeyLivesThroughItsExpiryMillisecond(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	req := Request{Bucket: Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}, Cost: 4, TTL: time.Second}
	mustAdmit(t, s, req).Ticket.Release()
	s.mu.Lock()
	expires := s.keys["k"].state.b.expiresMS
	s.mu.Unlock()
	other := Bucket{Key: "other", Limit: req.Limit}
	clock.Advance(time.Duration(expires-clock.Now().UnixMilli()) * time.Millisecond)
	mustPeek(t, s, other) // sweeps at the expiry's millisecond
	if n := s.size(); n != 1 {
		t.Fatalf("at its expiry's millisecond the key is gone (%d keys): Redis still holds it", n)
	}
	clock.Advance(time.Millisecond)
	mustPeek(t, s, other)
	if n := s.size(); n != 0 {
		t.Fatalf("past its expiry the key is held (%d keys)", n)
	}
}

func TestMemoryMaxKeysEvictsSoonestExpiry(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 3})
	for i := range 5 {
		req := Request{Bucket: Bucket{Key: fmt.Sprint("k", i), Limit: Limit{Rate: 1, Capacity: 100}}, Cost: float64(10 - i), TTL: time.Millisecond}
		mustAdmit(t, s, req).Ticket.Release()
	}
	if n := s.size(); n != 3 {
		t.Fatalf("%d keys held, want the bound 3", n)
	}
	// The bound drops the bucket that expires soonest: each new one spent
	// least, so it is the one to go, and the dearest three remain.
	for _, k := range []string{"k0", "k1", "k2"} {
		s.mu.Lock()
		_, ok := s.keys[k]
		s.mu.Unlock()
		if !ok {
			t.Errorf("%s, which expires after the others, was evicted", k)
		}
	}
}

func TestMemoryConcurrentAdmits(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{Now: newFakeClock().Now}) // no refill
	b := Bucket{Key: "shared", Limit: Limit{Rate: 1, Capacity: 1000}}
	const goroutines, each = 64, 50
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				a, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if a.Allowed {
					admitted.Add(1)
					a.Ticket.Release()
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Fatalf("admitted %d of %d concurrent unit admits, want exactly the capacity 1000", got, goroutines*each)
	}
}

// TestAggregateRateBelowAMicroToken: a rate that rounds to 0 micro-tokens
// per second (below 0.5e-6 tokens) is refused as invalid by every store,
// before any call — for the aggregate bucket as for the caller's own, and
// for a peek — instead of reaching admit.lua (which errors, so a Failover
// would count a configuration error as a failing store) or the memory
// store's arithmetic (which never refills it, nor says when it is full).
func TestAggregateRateBelowAMicroToken(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		own := Bucket{Key: sc.key("agg-rate") + ":a", Limit: slow}
		tiny := Limit{Rate: 4e-7, Capacity: 1}
		agg := &Bucket{Key: sc.key("agg-rate"), Limit: tiny}
		calls := func() uint64 {
			if rs, ok := sc.store.(*RedisStore); ok {
				return rs.Stats().Calls
			}
			return 0
		}
		before := calls()
		if a, err := sc.store.Admit(context.Background(), Request{Bucket: own, Aggregate: agg, Cost: 1}); err == nil {
			t.Errorf("an aggregate at %g tokens/s was accepted: %+v", tiny.Rate, a)
		}
		if a, err := sc.store.Admit(context.Background(), Request{Bucket: Bucket{Key: own.Key, Limit: tiny}, Cost: 1}); err == nil {
			t.Errorf("a bucket at %g tokens/s was accepted: %+v", tiny.Rate, a)
		}
		if r, err := sc.store.Peek(context.Background(), *agg); err == nil {
			t.Errorf("a peek at %g tokens/s was accepted: %+v", tiny.Rate, r)
		}
		if n := calls() - before; n != 0 {
			t.Errorf("%d calls made for invalid requests, want none", n)
		}
	})
}

// A request that neither its own bucket nor its aggregate can pay is
// refused with the longer of the two waits: its Retry-After is when both
// can pay, not only its own bucket (which would send it back to be refused
// by the aggregate).
func TestStoreRefusalWaitsForTheAggregateToo(t *testing.T) {
	t.Parallel()
	everyStore(t, func(t *testing.T, sc storeCase) {
		own := Bucket{Key: sc.key("both") + ":a", Limit: Limit{Rate: 1, Capacity: 10}}
		other := Bucket{Key: sc.key("both") + ":b", Limit: Limit{Rate: 1, Capacity: 10}}
		agg := &Bucket{Key: sc.key("both"), Limit: Limit{Rate: 0.01, Capacity: 10}}
		mustAdmit(t, sc.store, Request{Bucket: own, Aggregate: agg, Cost: 8}).Ticket.Release()   // own 2, aggregate 2
		mustAdmit(t, sc.store, Request{Bucket: other, Aggregate: agg, Cost: 2}).Ticket.Release() // aggregate 0
		a := mustAdmit(t, sc.store, Request{Bucket: own, Aggregate: agg, Cost: 5})
		// Own: 3 tokens short at 1/s; the aggregate: 5 short at 0.01/s.
		if a.Allowed || a.Refusal != RefusedAggregate || a.Result.RetryAfter < 400*time.Second || a.Result.Limit != agg.Limit {
			t.Fatalf("own bucket 2 and aggregate 0, a request of 5: %v, Retry-After %v, limit %+v; want refused by the aggregate, about 500 s",
				a.Refusal, a.Result.RetryAfter, a.Result.Limit)
		}
	})
}
