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

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestMemoryStore(t *testing.T) (*MemoryStore, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	return NewMemoryStore(MemoryOptions{Now: clock.Now}), clock
}

func mustSpend(t *testing.T, s Store, key string, lim Limit, cost float64) Result {
	t.Helper()
	r, err := s.Spend(context.Background(), key, lim, cost)
	if err != nil {
		t.Fatalf("Spend(%q, %v, %v): %v", key, lim, cost, err)
	}
	return r
}

func mustPeek(t *testing.T, s Store, key string, lim Limit) Result {
	t.Helper()
	r, err := s.Peek(context.Background(), key, lim)
	if err != nil {
		t.Fatalf("Peek(%q, %v): %v", key, lim, err)
	}
	return r
}

func TestMemoryBackToBack(t *testing.T) {
	tests := []struct {
		name     string
		capacity float64
		cost     float64
		want     int
	}{
		{"unit costs", 100, 1, 100},
		{"one MaxCost fits once", 100, 60, 1},
		{"remainder is not enough", 10, 3, 3},
		{"fractional cost", 10, 0.25, 40},
		{"fractional costs that sum exactly", 20, 7.5, 2},
		{"cost equals capacity", 5, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestMemoryStore(t)
			lim := Limit{Rate: 1, Capacity: tt.capacity}
			for i := range tt.want {
				r := mustSpend(t, s, "k", lim, tt.cost)
				if !r.Allowed {
					t.Fatalf("spend %d rejected: %+v", i+1, r)
				}
				if want := tt.capacity - float64(i+1)*tt.cost; r.Remaining != want {
					t.Fatalf("spend %d: remaining %v, want %v", i+1, r.Remaining, want)
				}
			}
			if r := mustSpend(t, s, "k", lim, tt.cost); r.Allowed {
				t.Fatalf("spend %d admitted: %+v", tt.want+1, r)
			}
		})
	}
}

func TestMemoryRefill(t *testing.T) {
	s, clock := newTestMemoryStore(t)
	lim := Limit{Rate: 2, Capacity: 10}
	mustSpend(t, s, "k", lim, 10)
	clock.Advance(1500 * time.Millisecond)
	if r := mustPeek(t, s, "k", lim); r.Remaining != 3 || r.ResetAfter != 3500*time.Millisecond {
		t.Fatalf("after 1.5 s at 2/s: %+v, want 3 tokens, full in 3.5 s", r)
	}
	if r := mustSpend(t, s, "k", lim, 3); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("spend of the refilled 3: %+v", r)
	}
	if r := mustSpend(t, s, "k", lim, 0.5); r.Allowed {
		t.Fatalf("spend from an empty bucket admitted: %+v", r)
	}
	clock.Advance(250 * time.Millisecond)
	if r := mustSpend(t, s, "k", lim, 0.5); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("spend after 250 ms: %+v", r)
	}
}

func TestMemoryRejectionDeductsNothing(t *testing.T) {
	s, _ := newTestMemoryStore(t)
	lim := Limit{Rate: 1, Capacity: 10}
	mustSpend(t, s, "k", lim, 8)
	before := mustPeek(t, s, "k", lim)
	for range 5 {
		r := mustSpend(t, s, "k", lim, 3)
		if r.Allowed || r.Remaining != before.Remaining || r.Cost != 3 {
			t.Fatalf("rejection %+v, want rejected with %v remaining", r, before.Remaining)
		}
	}
	if after := mustPeek(t, s, "k", lim); after.Remaining != before.Remaining {
		t.Fatalf("rejections deducted: %v -> %v", before.Remaining, after.Remaining)
	}
	// The small spend still fits.
	if r := mustSpend(t, s, "k", lim, 2); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("spend of 2 after rejections: %+v", r)
	}
}

func TestMemoryRetryAfterIsExact(t *testing.T) {
	s, clock := newTestMemoryStore(t)
	lim := Limit{Rate: 2, Capacity: 10}
	mustSpend(t, s, "k", lim, 10)
	r := mustSpend(t, s, "k", lim, 3) // deficit 3 tokens at 2/s
	if r.Allowed || r.RetryAfter != 1500*time.Millisecond || r.RetryAfterSeconds() != 2 {
		t.Fatalf("got %+v (RetryAfterSeconds %d), want rejected, retry 1500ms, 2 s", r, r.RetryAfterSeconds())
	}
	if r.ResetAfter != 5*time.Second || r.ResetSeconds() != 5 {
		t.Fatalf("ResetAfter %v, want 5s", r.ResetAfter)
	}
	clock.Advance(r.RetryAfter - time.Millisecond)
	if r := mustSpend(t, s, "k", lim, 3); r.Allowed || r.RetryAfter != time.Millisecond || r.RetryAfterSeconds() != 1 {
		t.Fatalf("1 ms early: %+v, want rejected with 1 ms to go", r)
	}
	clock.Advance(time.Millisecond)
	if r := mustSpend(t, s, "k", lim, 3); !r.Allowed || r.RetryAfter != 0 || r.RetryAfterSeconds() != 0 {
		t.Fatalf("after RetryAfter: %+v, want admitted", r)
	}
}

func TestMemoryNeverAboveCapacity(t *testing.T) {
	s, clock := newTestMemoryStore(t)
	lim := Limit{Rate: 1000, Capacity: 10}
	mustSpend(t, s, "k", lim, 1)
	for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * 365 * time.Hour} {
		clock.Advance(d)
		r := mustPeek(t, s, "k", lim)
		if r.Remaining > lim.Capacity {
			t.Fatalf("after %v: %v tokens > capacity %v", d, r.Remaining, lim.Capacity)
		}
	}
	if r := mustPeek(t, s, "k", lim); r.Remaining != 10 || r.ResetAfter != 0 || r.ResetSeconds() != 0 {
		t.Fatalf("long idle bucket: %+v, want full", r)
	}
}

func TestMemoryPeekCreatesNothing(t *testing.T) {
	s, _ := newTestMemoryStore(t)
	lim := Limit{Rate: 1, Capacity: 10}
	r := mustPeek(t, s, "unknown", lim)
	want := Result{Allowed: true, Remaining: 10, Limit: lim}
	if r != want {
		t.Fatalf("Peek of an unknown key = %+v, want %+v", r, want)
	}
	if _, err := s.Spend(context.Background(), "unknown", lim, 11); !errors.Is(err, ErrCostExceedsCapacity) {
		t.Fatalf("Spend above capacity: %v", err)
	}
	if n := s.size(); n != 0 {
		t.Fatalf("peek and a refused spend created %d buckets", n)
	}
	mustSpend(t, s, "k", lim, 4)
	if r := mustPeek(t, s, "k", lim); r.Remaining != 6 || !r.Allowed || r.Cost != 0 || r.RetryAfter != 0 {
		t.Fatalf("Peek after a spend = %+v", r)
	}
}

func TestMemoryErrors(t *testing.T) {
	s, _ := newTestMemoryStore(t)
	ctx := context.Background()
	lim := Limit{Rate: 1, Capacity: 10}
	tests := []struct {
		name string
		lim  Limit
		cost float64
		want error
	}{
		{"zero cost", lim, 0, ErrInvalidCost},
		{"negative cost", lim, -1, ErrInvalidCost},
		{"NaN cost", lim, math.NaN(), ErrInvalidCost},
		{"cost above capacity", lim, 10.001, ErrCostExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Spend(ctx, "k", tt.lim, tt.cost); !errors.Is(err, tt.want) {
				t.Errorf("Spend error = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := s.Spend(ctx, "k", Limit{Rate: 0, Capacity: 1}, 1); err == nil {
		t.Error("Spend accepted an invalid limit")
	}
	if _, err := s.Peek(ctx, "k", Limit{Rate: 1}); err == nil {
		t.Error("Peek accepted an invalid limit")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Spend(canceled, "k", lim, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Spend with a canceled context = %v", err)
	}
	if s.size() != 0 {
		t.Error("failed calls created buckets")
	}
}

func TestMemoryForgetsIdleBuckets(t *testing.T) {
	s, clock := newTestMemoryStore(t)
	lim := Limit{Rate: 10, Capacity: 100} // fill time 10 s
	for i := range 100 {
		mustSpend(t, s, fmt.Sprint("k", i), lim, 1)
	}
	if n := s.size(); n != 100 {
		t.Fatalf("%d buckets, want 100", n)
	}
	clock.Advance(lim.FillTime() - time.Millisecond)
	mustPeek(t, s, "other", lim)
	if n := s.size(); n != 100 {
		t.Fatalf("%d buckets before their fill time, want 100", n)
	}
	clock.Advance(time.Millisecond)
	mustPeek(t, s, "other", lim)
	if n := s.size(); n != 0 {
		t.Fatalf("%d buckets after their fill time, want 0", n)
	}
}

func TestMemoryMaxKeysEvictsOldest(t *testing.T) {
	clock := newFakeClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now, MaxKeys: 3})
	lim := Limit{Rate: 1, Capacity: 100}
	for i := range 5 {
		mustSpend(t, s, fmt.Sprint("k", i), lim, 50)
		clock.Advance(time.Second)
	}
	if n := s.size(); n != 3 {
		t.Fatalf("%d buckets, want MaxKeys 3", n)
	}
	for i, want := range []float64{100, 100, 53, 52, 51} {
		if r := mustPeek(t, s, fmt.Sprint("k", i), lim); r.Remaining != want {
			t.Errorf("k%d: %v tokens, want %v", i, r.Remaining, want)
		}
	}
	// Spending again moves a bucket to the back of the line.
	mustSpend(t, s, "k2", lim, 1)
	mustSpend(t, s, "k5", lim, 1)
	if r := mustPeek(t, s, "k2", lim); r.Remaining == 100 {
		t.Error("recently charged k2 was evicted")
	}
	if r := mustPeek(t, s, "k3", lim); r.Remaining != 100 {
		t.Errorf("k3 has %v tokens, want evicted (100)", r.Remaining)
	}
}

func TestMemoryConcurrentSpends(t *testing.T) {
	s, _ := newTestMemoryStore(t) // the clock stands still: no refill
	lim := Limit{Rate: 1, Capacity: 1000}
	const goroutines, each = 64, 50
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				r, err := s.Spend(context.Background(), "shared", lim, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
				_, _ = s.Spend(context.Background(), fmt.Sprint("own", g), lim, 1)
				_, _ = s.Peek(context.Background(), "shared", lim)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Fatalf("admitted %d of %d concurrent unit spends, want exactly capacity 1000", got, goroutines*each)
	}
	if r := mustPeek(t, s, "shared", lim); r.Remaining != 0 {
		t.Fatalf("%v tokens left, want 0", r.Remaining)
	}
}

func TestMemoryRealClock(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	lim := Limit{Rate: 1e-3, Capacity: 2}
	if r := mustSpend(t, s, "k", lim, 2); !r.Allowed {
		t.Fatalf("first spend %+v", r)
	}
	if r := mustSpend(t, s, "k", lim, 1); r.Allowed {
		t.Fatalf("second spend %+v", r)
	}
}

// TestSeedVerification replays the classic curl checks: twenty 10 m radius
// queries fit a 100-token bucket refilling at 20/s, and a second 50 km query
// right after the first is refused.
func TestSeedVerification(t *testing.T) {
	s, clock := newTestMemoryStore(t)
	w := DefaultWeights()
	lim := Limit{Rate: 20, Capacity: 100}
	for i := range 20 {
		if r := mustSpend(t, s, BucketKey("geotoll", "demo", "cheap"), lim, w.Radius(10, 0)); !r.Allowed {
			t.Fatalf("cheap request %d refused: %+v", i+1, r)
		}
		clock.Advance(10 * time.Millisecond)
	}
	heavy := BucketKey("geotoll", "demo", "heavy")
	if r := mustSpend(t, s, heavy, lim, w.Radius(50000, 0)); !r.Allowed {
		t.Fatalf("first 50 km request refused: %+v", r)
	}
	clock.Advance(50 * time.Millisecond)
	r := mustSpend(t, s, heavy, lim, w.Radius(50000, 0))
	if r.Allowed {
		t.Fatalf("second 50 km request admitted: %+v", r)
	}
	if r.Cost != 60 || r.RetryAfterSeconds() != 1 {
		t.Fatalf("second 50 km request: %+v, want cost 60, Retry-After 1", r)
	}
}
