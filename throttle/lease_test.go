package throttle

import (
	"context"
	"errors"
	"math"
	"sync"
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

// gatedStore is a store whose Admit, while it is shut, announces itself on
// entered and waits until the gate opens (or its context ends): a lease
// call that takes as long as a test needs. It counts the calls in flight
// at once.
type gatedStore struct {
	Store
	entered chan struct{}
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	now     int
	most    int
}

func (s *gatedStore) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gatedStore) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *gatedStore) Admit(ctx context.Context, req Request) (Admission, error) {
	s.mu.Lock()
	gate := s.gate
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	if gate != nil {
		s.entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return Admission{}, ctx.Err()
		}
	}
	return s.Store.Admit(ctx, req)
}

// unheld runs f and fails the test if it has not returned after a
// generous time: it guards against a hang, it measures no speed.
func unheld(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for the lease call on its way", what)
	}
}

// TestGlobalLeaseCallHoldsNobody: while one request's lease call is on
// its way, a request the tokens in hand can pay is admitted, a give-back
// goes in, and a request that waits for the lease leaves when its own
// context ends; one lease call is on its way at a time; and every token
// is accounted for once the call is back.
func TestGlobalLeaseCallHoldsNobody(t *testing.T) {
	mem := NewMemoryStore(MemoryOptions{})
	store := &gatedStore{Store: mem, entered: make(chan struct{}, 16)}
	g := &Global{Store: store, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-6, Capacity: 1000}}, Chunk: 100, Hold: time.Hour}
	ctx := context.Background()
	if _, ok, err := g.Take(ctx, 50); !ok || err != nil { // a lease of 100: 50 in hand
		t.Fatalf("first take: %v %v", ok, err)
	}
	store.shut()
	big := make(chan error, 1)
	go func() {
		_, ok, err := g.Take(ctx, 120) // 50 in hand cannot pay: a lease
		if err == nil && !ok {
			err = errors.New("refused")
		}
		big <- err
	}()
	<-store.entered // the lease call is on its way, and stays there
	unheld(t, "Give", func() { g.Give(1) })
	unheld(t, "a request the tokens in hand pay", func() {
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, ok, err := g.Take(short, 1); !ok || err != nil {
			t.Errorf("Take(1) with 51 in hand: %v %v", ok, err)
		}
	})
	waiter, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, _, err := g.Take(waiter, 200) // needs a lease: waits for the one on its way
		left <- err
	}()
	cancel()
	unheld(t, "a waiter whose context ended", func() {
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("a waiter whose context ended got %v, want context.Canceled", err)
		}
	})
	store.open()
	if err := <-big; err != nil {
		t.Fatalf("the request that leased: %v", err)
	}
	store.mu.Lock()
	most := store.most
	store.mu.Unlock()
	if most != 1 {
		t.Errorf("%d lease calls on their way at once, want 1", most)
	}
	// Spent: 50 + 1 + 120, given back 1; all the rest goes back at Close.
	g.Close()
	if r := mustPeek(t, mem, g.Bucket); r.Remaining < 829.99 || r.Remaining > 830.01 {
		t.Fatalf("the shared bucket holds %.3f after Close, want 830", r.Remaining)
	}
}

// TestGlobalConcurrentTakesAccountEveryToken: takes, give-backs and the
// returns at the end of each hold, all at once, leave the shared bucket
// charged exactly what the requests spent.
func TestGlobalConcurrentTakesAccountEveryToken(t *testing.T) {
	mem := NewMemoryStore(MemoryOptions{})
	g := &Global{Store: mem, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-3, Capacity: 1e5}}, Chunk: 10, Hold: time.Millisecond}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				cost := float64(1 + (w+i)%7)
				res, ok, err := g.Take(context.Background(), cost)
				if !ok || err != nil {
					t.Errorf("take %v: %v %v", cost, ok, err)
					return
				}
				g.Give(res.Cost - 1) // each request ran and cost 1
			}
		})
	}
	wg.Wait()
	g.Close()
	// A give-back that came after its lease went back stays in hand,
	// where Close has no lease to return it with.
	g.mu.Lock()
	kept := g.have
	g.mu.Unlock()
	want := 1e5 - 1600 - kept
	if r := mustPeek(t, mem, g.Bucket); r.Remaining < want || r.Remaining > want+0.1 {
		t.Fatalf("the shared bucket holds %.3f after 1,600 requests of 1 (%v kept in hand), want %v", r.Remaining, kept, want)
	}
}

// TestGlobalReturnThatFiredBeforeCloseKeepsLaterLeases: the hold's timer
// fires as Close begins, and Close gets the lock first: it stops the
// timer (too late: its func is waiting for the lock) and returns the
// leases itself. A request that takes from the budget after Close (a
// handler still running when shutdown's wait for them ended) takes a new
// lease, held for Hold by a timer of its own. When the old timer's func
// gets the lock at last, it must not return that lease: its hold has just
// begun.
func TestGlobalReturnThatFiredBeforeCloseKeepsLaterLeases(t *testing.T) {
	t.Parallel()
	timers := &manualTimers{}
	store := NewMemoryStore(MemoryOptions{})
	g := &Global{Store: store, Bucket: Bucket{Key: "global", Limit: Limit{Rate: 1e-6, Capacity: 100}}, Chunk: 10,
		Hold: time.Hour, afterFunc: timers.afterFunc}
	ctx := context.Background()
	if _, ok, err := g.Take(ctx, 1); !ok || err != nil {
		t.Fatalf("take: %v %v", ok, err)
	}
	g.Close() // the hold's timer fired, but Close got the lock first
	if r := mustPeek(t, store, g.Bucket); math.Abs(r.Remaining-99) > 0.01 {
		t.Fatalf("the shared bucket holds %.3f after Close, want 99", r.Remaining)
	}
	if _, ok, err := g.Take(ctx, 1); !ok || err != nil { // after Close: a new lease, a new hold
		t.Fatalf("take after Close: %v %v", ok, err)
	}
	if n := timers.n(); n != 2 {
		t.Fatalf("%d hold timers made, want 2", n)
	}
	timers.fire(0) // the first hold's func gets the lock at last
	if r := mustPeek(t, store, g.Bucket); math.Abs(r.Remaining-89) > 0.01 {
		t.Fatalf("the shared bucket holds %.3f once the first hold's timer ran, want 89: the lease taken after Close went back before its hold", r.Remaining)
	}
	timers.fire(1) // the second hold ends: its lease goes back
	if r := mustPeek(t, store, g.Bucket); math.Abs(r.Remaining-98) > 0.01 {
		t.Fatalf("the shared bucket holds %.3f after the second hold, want 98", r.Remaining)
	}
	timers.stopAll()
}
