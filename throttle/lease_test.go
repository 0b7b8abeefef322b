package throttle

import (
	"context"
	"testing"
	"time"
)

func TestGlobalLeases(t *testing.T) {
	primary := &flakyStore{Store: NewMemoryStore(MemoryOptions{})}
	g := &Global{Store: primary, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-3, Capacity: 100}}, Chunk: 10, Hold: 100 * time.Millisecond}
	ctx := context.Background()
	for i := range 25 {
		if _, ok, err := g.Take(ctx, 1); !ok || err != nil {
			t.Fatalf("take %d: %v %v", i, ok, err)
		}
	}
	if primary.n() != 3 {
		t.Fatalf("25 unit takes in chunks of 10 made %d calls, want 3", primary.n())
	}
	g.Give(1) // a request its own bucket refused: back to the lease, no call
	if primary.n() != 3 {
		t.Fatalf("a give made a call")
	}
	// Two full leases of 10 were used, the third holds 5 used of 10; after
	// Hold it goes back: 100 - 10 - 10 - 4 = 76 (one unit was given back).
	deadline := time.Now().Add(2 * time.Second)
	for {
		r := mustPeek(t, primary.Store, g.Bucket)
		if r.Remaining > 75.99 && r.Remaining < 76.01 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shared bucket holds %v after the lease went back, want 76", r.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGlobalRefuses(t *testing.T) {
	g := &Global{Store: NewMemoryStore(MemoryOptions{}), Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-3, Capacity: 10}}, Chunk: 4}
	ctx := context.Background()
	took := 0.0
	for {
		res, ok, err := g.Take(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if res.RetryAfter <= 0 || took != 9 {
				t.Fatalf("refused after %v tokens with %+v; want 9 taken (3 of the last chunk too small), a retry", took, res)
			}
			break
		}
		took += 3
		if took > 10 {
			t.Fatalf("took %v tokens from a budget of 10", took)
		}
	}
	g.Close()
}

// TestGlobalFailOpenRefundMintsNothing: a request the global budget
// admitted through fail_mode open while the store was down was never
// charged there; when it settles, its caller gives back what the take
// charged (Result.Cost), and no refund of it reaches the shared bucket
// with the leases taken before.
func TestGlobalFailOpenRefundMintsNothing(t *testing.T) {
	primary := &flakyStore{Store: NewMemoryStore(MemoryOptions{})}
	fo, _ := newFailover(FailOpen, 1)
	fo.Primary = primary
	g := &Global{Store: fo, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-6, Capacity: 100}}, Chunk: 10, Hold: time.Hour}
	ctx := context.Background()
	// Charged: a lease of 10, all spent by a request that keeps it.
	if res, ok, err := g.Take(ctx, 10); !ok || err != nil || res.Cost != 10 {
		t.Fatalf("take with the store up: %+v %v %v", res, ok, err)
	}
	primary.set(true)
	res, ok, err := g.Take(ctx, 5)
	if !ok || err != nil {
		t.Fatalf("take with the store down (fail_mode open): %+v %v %v", res, ok, err)
	}
	if res.Cost > 0 { // as toll.Pass settles: only what the take charged comes back
		g.Give(res.Cost - 1) // it ran, and cost 1 of what it took
	}
	primary.set(false)
	g.Close()
	if r := mustPeek(t, primary.Store, g.Bucket); r.Remaining != 90 {
		t.Fatalf("the shared bucket holds %v after the leases went back, want 90: the request admitted fail-open was refunded into it", r.Remaining)
	}
}

// An overuse settled after the last lease went back (a request that took
// 5 and cost 20) is owed to the shared bucket: the next lease would pay
// it, and a replica shutting down first charges it at Close.
func TestGlobalCloseChargesAnOveruseWithNoLeaseOpen(t *testing.T) {
	store := NewMemoryStore(MemoryOptions{})
	g := &Global{Store: store, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-6, Capacity: 100}}, Chunk: 5, Hold: time.Hour}
	res, ok, err := g.Take(context.Background(), 5)
	if !ok || err != nil || res.Cost != 5 {
		t.Fatalf("take: %+v %v %v", res, ok, err)
	}
	g.mu.Lock()
	g.returnLocked() // the hold ends: the lease goes back, all of it spent
	g.mu.Unlock()
	g.Give(5 - 20) // the request cost 20 of the 5 it took
	g.Close()
	if r := mustPeek(t, store, g.Bucket); r.Remaining > 80.01 {
		t.Fatalf("the shared bucket holds %.3f after a request of 20 and Close, want 80", r.Remaining)
	}
}
