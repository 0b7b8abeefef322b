package throttle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flakyStore is a primary that fails while down and counts its calls.
type flakyStore struct {
	Store
	mu    sync.Mutex
	down  bool
	calls int
}

func (s *flakyStore) hit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.down {
		return errors.New("redis down")
	}
	return nil
}

func (s *flakyStore) set(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }
func (s *flakyStore) n() int        { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

func (s *flakyStore) Admit(ctx context.Context, req Request) (Admission, error) {
	if err := s.hit(); err != nil {
		return Admission{}, err
	}
	return s.Store.Admit(ctx, req)
}

func (s *flakyStore) Peek(ctx context.Context, b Bucket) (Result, error) {
	if err := s.hit(); err != nil {
		return Result{}, err
	}
	return s.Store.Peek(ctx, b)
}

func newFailover(mode FailMode, replicas int) (*Failover, *flakyStore) {
	primary := &flakyStore{Store: NewMemoryStore(MemoryOptions{})}
	return &Failover{Primary: primary, Local: NewMemoryStore(MemoryOptions{}), Mode: mode, Replicas: replicas,
		ProbeInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, primary
}

func TestFailoverModes(t *testing.T) {
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	for _, mode := range []FailMode{FailLocal, FailOpen, FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			f, primary := newFailover(mode, 1)
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			primary.set(true)
			a, err := f.Admit(context.Background(), Request{Bucket: b, Cost: 4})
			switch mode {
			case FailLocal:
				if err != nil || !a.Allowed || a.Result.Remaining != 6 || a.Ticket == nil {
					t.Fatalf("local: %+v %v", a, err)
				}
			case FailOpen:
				if err != nil || !a.Allowed || a.Result.Remaining != 10 || a.Ticket != nil {
					t.Fatalf("open: %+v %v", a, err)
				}
			case FailClosed:
				if !errors.Is(err, ErrStoreDown) {
					t.Fatalf("closed: %+v %v, want ErrStoreDown", a, err)
				}
			}
			h := f.Health()
			if !h.Degraded || h.StoreErrors != 1 || h.Fallbacks != 1 || h.Err != "redis down" {
				t.Fatalf("health %+v", h)
			}
		})
	}
}

// TestFailoverValidate: fail_mode local needs a local store; open and
// closed do not.
func TestFailoverValidate(t *testing.T) {
	for _, mode := range []FailMode{FailLocal, FailOpen, FailClosed} {
		f, _ := newFailover(mode, 1)
		f.Local = nil
		if err := f.Validate(); (err != nil) != (mode == FailLocal) {
			t.Errorf("fail_mode %s without a local store: %v", mode, err)
		}
	}
}

// TestFailoverDefaults: a setting left at 0 takes its default, a set one
// is kept.
func TestFailoverDefaults(t *testing.T) {
	var f Failover
	if f.remember() != 1<<16 || f.timeout() != 3*DefaultTimeout || f.probeInterval() != DefaultProbeInterval {
		t.Errorf("defaults: remember %d, timeout %v, probe every %v", f.remember(), f.timeout(), f.probeInterval())
	}
	f = Failover{Remember: 5, Timeout: time.Second, ProbeInterval: time.Minute}
	if f.remember() != 5 || f.timeout() != time.Second || f.probeInterval() != time.Minute {
		t.Errorf("set: remember %d, timeout %v, probe every %v", f.remember(), f.timeout(), f.probeInterval())
	}
}

// TestFailoverLocalRateIsDividedByReplicas: with 4 replicas, a fallback
// bucket holds a quarter of the capacity and refills at a quarter of the
// rate, so the replicas together admit what the shared bucket would.
func TestFailoverLocalRateIsDividedByReplicas(t *testing.T) {
	clock := newFakeClock()
	f, primary := newFailover(FailLocal, 4)
	f.Local = NewMemoryStore(MemoryOptions{Now: clock.Now})
	primary.set(true)
	b := Bucket{Key: "k", Limit: Limit{Rate: 8, Capacity: 10}}
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 2.6}); a.Allowed {
		t.Fatalf("2.6 from a share of 10/4: %+v", a.Result)
	}
	mustAdmit(t, f, Request{Bucket: b, Cost: 2.5}).Ticket.Release()
	clock.Advance(time.Second) // 2 tokens back at 8/4 per second, not 8
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 2.5}); a.Allowed || a.Result.Remaining != 2 || a.Result.RetryAfter != 250*time.Millisecond {
		t.Fatalf("after 1 s at rate 8 over 4 replicas: %+v; want 2 tokens, 250 ms to go", a.Result)
	}
}

// TestFailoverLocalStartsFromTheLastKnownBudget: a caller the primary knew
// to be nearly empty does not get a fresh, full local bucket when the
// primary fails.
func TestFailoverLocalStartsFromTheLastKnownBudget(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 9}).Ticket.Release()
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 2}); a.Allowed {
		t.Fatalf("the fallback bucket started full: %+v", a.Result)
	}
	other := Bucket{Key: "other", Limit: b.Limit}
	if a := mustAdmit(t, f, Request{Bucket: other, Cost: 9}); !a.Allowed {
		t.Fatalf("an unknown caller's fallback bucket is not full: %+v", a.Result)
	}
}

// TestFailoverRemembersAtMostRemember: the budgets the fallback starts from
// are kept for at most Remember callers; when full, about half are
// forgotten before the next is noted. With 2 and three nearly empty
// callers, exactly two are still known to be nearly empty.
func TestFailoverRemembersAtMostRemember(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	f.Remember = 2
	limit := Limit{Rate: 1e-3, Capacity: 10}
	for _, key := range []string{"a", "b", "c"} {
		mustAdmit(t, f, Request{Bucket: Bucket{Key: key, Limit: limit}, Cost: 9}).Ticket.Release()
	}
	primary.set(true)
	known := 0
	for _, key := range []string{"a", "b", "c"} {
		if a := mustAdmit(t, f, Request{Bucket: Bucket{Key: key, Limit: limit}, Cost: 2}); !a.Allowed {
			known++
		}
	}
	if known != 2 {
		t.Fatalf("%d of 3 callers known to the fallback with Remember 2, want 2", known)
	}
}

func TestFailoverProbesOncePerInterval(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	f.ProbeInterval = 50 * time.Millisecond
	primary.set(true)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 1000}}
	start := time.Now()
	for range 20 {
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
	}
	// One call, then one probe per interval: none while the 20 admits take
	// less than an interval, as they do unless the machine crawls — and
	// then the bound grows with them, never switches off.
	if n, most := primary.n(), 1+int(time.Since(start)/f.ProbeInterval); n < 1 || n > most {
		t.Fatalf("%d calls to a failing primary in %v, want 1 and at most one probe per %v", n, time.Since(start), f.ProbeInterval)
	}
	primary.set(false)
	time.Sleep(60 * time.Millisecond)
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
	if primary.n() != 2 || f.Health().Degraded {
		t.Fatalf("after the interval: %d calls, degraded %v; want the probe to recover", primary.n(), f.Health().Degraded)
	}
}

// TestFailoverRefusesForFree: a caller the primary refused is refused in
// process, without a call, until its bucket could pay again; the first
// request after that asks the primary and is admitted.
func TestFailoverRefusesForFree(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 20, Capacity: 10}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 10}).Ticket.Release()
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 5})
	if a.Allowed || primary.n() != 2 {
		t.Fatalf("the refusal itself: %+v after %d calls", a, primary.n())
	}
	retry := a.Result.RetryAfter
	for range 50 {
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 5})
		if a.Allowed || a.Result.RetryAfter <= 0 || a.Result.RetryAfter > retry {
			t.Fatalf("a free refusal: %+v", a.Result)
		}
		// Its headers follow from the tokens it reports, at 20 tokens/s:
		// Retry-After when 5 are there, the reset when all 10 are.
		r := a.Result
		wantRetry := time.Duration(math.Ceil((5-r.Remaining)/20*1000)) * time.Millisecond
		wantReset := time.Duration((10 - r.Remaining) / 20 * float64(time.Second))
		if r.Remaining < 0 || r.Remaining >= 5 || r.RetryAfter != wantRetry || (r.ResetAfter-wantReset).Abs() > time.Millisecond {
			t.Fatalf("a free refusal with %g tokens: retry %v, reset %v; want %v, %v", r.Remaining, r.RetryAfter, r.ResetAfter, wantRetry, wantReset)
		}
	}
	if primary.n() != 2 || f.FreeRefusals() != 50 {
		t.Fatalf("%d calls for 50 refused requests (%d free), want none", primary.n()-2, f.FreeRefusals())
	}
	// Later, with a few tokens back (about 2 after 100 ms; a request of 9
	// still does not fit): the reset counts from what the bucket holds, not
	// from empty.
	time.Sleep(100 * time.Millisecond)
	a = mustAdmit(t, f, Request{Bucket: b, Cost: 9})
	wantReset := time.Duration((10 - a.Result.Remaining) / 20 * float64(time.Second))
	if a.Allowed || a.Result.Remaining < 1 || (a.Result.ResetAfter-wantReset).Abs() > time.Millisecond || primary.n() != 2 {
		t.Fatalf("a free refusal after 100 ms: %+v after %d calls; want refused for free, reset %v", a, primary.n(), wantReset)
	}
	// A cheaper request fits sooner, and goes to the primary.
	time.Sleep(retry)
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !a.Allowed || primary.n() != 3 {
		t.Fatalf("after Retry-After: %+v, %d calls", a, primary.n())
	}
}

func TestFailoverCancelledRequestIsNotFailedOver(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	primary.set(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Admit(ctx, Request{Bucket: Bucket{Key: "k", Limit: slow}, Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit with a done context: %v", err)
	}
	if h := f.Health(); h.Degraded || h.Fallbacks != 0 || primary.n() != 0 {
		t.Fatalf("a cancelled request counted against the store: %+v, %d calls", h, primary.n())
	}
}

// The failover logs to its configured Logger: the limiter going down is
// written there, not to slog's default.
func TestFailoverLogsToItsLogger(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	var buf bytes.Buffer
	f.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	primary.set(true)
	if _, err := f.Admit(context.Background(), Request{Bucket: Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if buf.Len() == 0 {
		t.Error("a failed limiter call logged nothing to the failover's Logger")
	}
}

// A request that costs exactly what a refused bucket holds again (its
// whole capacity, refilled) is not refused for free: it goes to the store
// and is admitted.
func TestFailoverAsksWhenTheBucketHoldsTheCost(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 100, Capacity: 10}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 10}).Ticket.Release()
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 10}); a.Allowed || primary.n() != 2 {
		t.Fatalf("the refusal: %+v after %d calls", a, primary.n())
	}
	time.Sleep(150 * time.Millisecond) // 10 tokens at 100/s: full after 100 ms
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 10}); !a.Allowed || primary.n() != 3 {
		t.Fatalf("with the bucket full again: %+v after %d calls, want admitted by the store", a, primary.n())
	}
}

// TestFailoverFreeRefusalSeesItsOwnRefund: after the primary refused a
// caller, a request of that caller admitted through this Failover settles
// with a refund that lets the next request pay: that request goes to the
// primary and is admitted, rather than refused for free until the first
// refusal's Retry-After.
func TestFailoverFreeRefusalSeesItsOwnRefund(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	held := mustAdmit(t, f, Request{Bucket: b, Cost: 10})
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); a.Allowed || primary.n() != 2 {
		t.Fatalf("the refusal: %+v after %d calls", a, primary.n())
	}
	held.Ticket.Settle(2) // 8 back
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !a.Allowed || primary.n() != 3 {
		t.Fatalf("after a refund of 8: allowed=%v %+v after %d calls; want asked and admitted", a.Allowed, a.Result, primary.n())
	}
}

// TestFailoverLocalDividesTheAggregate: with 4 replicas, fail_mode local
// gives a replica a quarter of the aggregate bucket (the IPv6 /48) too,
// refilled at a quarter of its rate, as it does the caller's own.
func TestFailoverLocalDividesTheAggregate(t *testing.T) {
	clock := newFakeClock()
	f, primary := newFailover(FailLocal, 4)
	f.Local = NewMemoryStore(MemoryOptions{Now: clock.Now})
	primary.set(true)
	own := Bucket{Key: "k:a", Limit: Limit{Rate: 8, Capacity: 100}}
	agg := &Bucket{Key: "k", Limit: Limit{Rate: 8, Capacity: 10}}
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2.6}); a.Allowed || a.Refusal != RefusedAggregate {
		t.Fatalf("2.6 from an aggregate share of 10/4: allowed=%v refusal=%d %+v", a.Allowed, a.Refusal, a.Result)
	}
	mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2.5}).Ticket.Release()
	clock.Advance(time.Second) // 2 tokens back in the aggregate at 8/4 per second, not 8
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2.5})
	if a.Allowed || a.Refusal != RefusedAggregate || a.Result.Remaining != 2 || a.Result.RetryAfter != 250*time.Millisecond {
		t.Fatalf("after 1 s at aggregate rate 8 over 4 replicas: allowed=%v refusal=%d %+v; want refused by the aggregate, 2 tokens, 250 ms to go",
			a.Allowed, a.Refusal, a.Result)
	}
}

// TestFailoverPeeksReuseWhatItLearnt: within PeekReuse (1 s by default) of
// what the Failover learnt of a bucket — a peek's answer, an admission's,
// the settlements since — a peek is answered from it, refilled to the
// moment asked, without a call; past it, or under another limit, a peek
// asks the primary again. A peek after an admission or a settlement of
// this Failover sees them.
func TestFailoverPeeksReuseWhatItLearnt(t *testing.T) {
	f, primary := newFailover(FailClosed, 1)
	if f.peekReuse() != DefaultPeekReuse || DefaultPeekReuse != time.Second {
		t.Fatalf("reuse %v by default, want %v", f.peekReuse(), time.Second)
	}
	// No pause of the test outlives an hour (the default's own test is
	// toll's TestBudgetReadsCostOneRedisCallPerSecond).
	f.PeekReuse = time.Hour
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}} // refills a thousandth a second
	first := mustPeek(t, f, b)
	for range 100 {
		if r := mustPeek(t, f, b); math.Abs(r.Remaining-first.Remaining) > 1e-3 || r.Limit != b.Limit || !r.Allowed {
			t.Fatalf("a peek within the reuse: %+v, want %+v", r, first)
		}
	}
	if primary.n() != 1 {
		t.Fatalf("101 peeks within the reuse made %d calls, want 1", primary.n())
	}
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 4})
	r := mustPeek(t, f, b)
	if primary.n() != 2 || math.Abs(r.Remaining-6) > 1e-2 {
		t.Fatalf("a peek after an admission of 4: %+v after %d calls; want about 6 tokens, no call of its own", r, primary.n())
	}
	wantReset := millis(resetMS(r.Remaining, b.Limit.Rate, b.Limit.Capacity))
	if r.ResetAfter != wantReset {
		t.Errorf("reset %v, want %v (as the store computes it)", r.ResetAfter, wantReset)
	}
	a.Ticket.Settle(1) // 3 back
	if r := mustPeek(t, f, b); primary.n() != 2 || math.Abs(r.Remaining-9) > 1e-2 {
		t.Fatalf("a peek after a refund of 3: %+v after %d calls; want about 9 tokens, no call", r, primary.n())
	}
	other := Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}
	mustPeek(t, f, other)
	if primary.n() != 3 {
		t.Fatalf("a peek under another limit made %d calls in all, want it asked (3)", primary.n())
	}

	f.PeekReuse = 20 * time.Millisecond
	mustPeek(t, f, other)
	time.Sleep(30 * time.Millisecond)
	mustPeek(t, f, other)
	if primary.n() != 4 {
		t.Fatalf("a peek past the reuse: %d calls in all, want it asked (4)", primary.n())
	}
	f.PeekReuse = -1
	mustPeek(t, f, other)
	mustPeek(t, f, other)
	if primary.n() != 6 {
		t.Fatalf("with reuse off, 2 peeks: %d calls in all, want 6", primary.n())
	}
}

// heldPeek holds the answer of its next peek (read already) until release
// is closed: a Redis peek whose reply is on its way.
type heldPeek struct {
	Store
	read, release chan struct{}
}

func (s *heldPeek) Peek(ctx context.Context, b Bucket) (Result, error) {
	r, err := s.Store.Peek(ctx, b)
	if s.read != nil {
		close(s.read)
		<-s.release
		s.read = nil
	}
	return r, err
}

// A budget read whose answer was read before a refund this replica
// settled does not undo the refund: the caller, refused before, is
// admitted once its bucket can pay, not refused in process until the
// older reading refills (over an hour here).
func TestFailoverPeekKeepsARefundItKnew(t *testing.T) {
	mem := NewMemoryStore(MemoryOptions{})
	held := &heldPeek{Store: mem}
	f := &Failover{Primary: held, Mode: FailClosed, Replicas: 1, ProbeInterval: time.Hour, PeekReuse: time.Nanosecond}
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 9}) // 1 left
	if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); r.Allowed || r.Refusal != RefusedBucket {
		t.Fatalf("want a bucket refusal: %+v", r)
	}
	held.read, held.release = make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); mustPeek(t, f, b) }()
	<-held.read
	a.Ticket.Settle(1) // it cost 1: 8 back, 9 in the bucket
	close(held.release)
	<-done
	if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !r.Allowed {
		t.Fatalf("a request of 5 with 9 in the bucket: refused (Retry-After %v, %d free refusals)", r.Result.RetryAfter, f.FreeRefusals())
	}
}

// While the primary fails, a peek follows the fail mode as admissions do:
// with fail_mode local it shows the local bucket they spend, not what the
// primary said before it failed.
func TestFailoverPeekFollowsTheFailModeWhileDegraded(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // 9 left
	primary.set(true)
	for range 2 {
		if a := mustAdmit(t, f, Request{Bucket: b, Cost: 4}); !a.Allowed {
			t.Fatalf("a local admission of 4: %+v", a)
		}
	}
	refused := mustAdmit(t, f, Request{Bucket: b, Cost: 4})
	r := mustPeek(t, f, b)
	if refused.Allowed || r.Remaining >= 4 || math.Abs(r.Remaining-refused.Result.Remaining) > 1e-2 {
		t.Fatalf("a peek while degraded: %.3f tokens; the local bucket refused 4 with %.3f (allowed %v)", r.Remaining, refused.Result.Remaining, refused.Allowed)
	}
}

// countedPeek counts the peeks its store answers, each held until release
// is closed.
type countedPeek struct {
	Store
	release chan struct{}
	n       atomic.Int64
}

func (s *countedPeek) Peek(ctx context.Context, b Bucket) (Result, error) {
	s.n.Add(1)
	<-s.release
	return s.Store.Peek(ctx, b)
}

// Budget reads of one caller that miss what the failover knows at once
// share one call of the primary.
func TestFailoverConcurrentPeeksShareOneCall(t *testing.T) {
	cp := &countedPeek{Store: NewMemoryStore(MemoryOptions{}), release: make(chan struct{})}
	f := &Failover{Primary: cp, Mode: FailClosed, Replicas: 1, ProbeInterval: time.Hour, PeekReuse: time.Hour}
	b := Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { mustPeek(t, f, b) })
	}
	for cp.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(cp.release)
	wg.Wait()
	if n := cp.n.Load(); n != 1 || f.FreePeeks() != 49 {
		t.Fatalf("50 reads at once: %d calls of the primary, %d free; want 1 and 49", n, f.FreePeeks())
	}
}

// Budget reads of callers never admitted here (free, and as many as a
// client has addresses) never push out what admissions taught: a caller
// refused before is still refused without a call after 5,000 other
// callers' reads.
func TestFailoverPeeksKeepRefusals(t *testing.T) {
	f, primary := newFailover(FailClosed, 1)
	f.Remember = 1000
	lim := Limit{Rate: 1e-3, Capacity: 10}
	victim := Bucket{Key: "victim", Limit: lim}
	mustAdmit(t, f, Request{Bucket: victim, Cost: 10}).Ticket.Release()
	if a := mustAdmit(t, f, Request{Bucket: victim, Cost: 5}); a.Allowed {
		t.Fatal("want a refusal")
	}
	for i := range 5000 {
		mustPeek(t, f, Bucket{Key: "reader" + strconv.Itoa(i), Limit: lim})
	}
	n := primary.n()
	if a := mustAdmit(t, f, Request{Bucket: victim, Cost: 5}); a.Allowed || primary.n() != n {
		t.Fatalf("the refused caller after 5,000 others' reads: allowed %v, %d calls; want a free refusal", a.Allowed, primary.n()-n)
	}
}

// The reuse counts from the primary's last answer, not from this
// replica's settlements since: a caller whose requests keep settling here
// is read from the primary again after PeekReuse, and sees another
// replica's spend.
func TestFailoverSettlementsDoNotExtendTheReuse(t *testing.T) {
	f, primary := newFailover(FailClosed, 1)
	f.PeekReuse = 100 * time.Millisecond
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	var tickets []*Ticket
	for range 3 {
		tickets = append(tickets, mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket)
	}
	if _, err := primary.Store.Admit(context.Background(), Request{Bucket: b, Cost: 50}); err != nil { // another replica
		t.Fatal(err)
	}
	for _, tk := range tickets {
		time.Sleep(60 * time.Millisecond)
		tk.Settle(1.5)
	}
	n := primary.n()
	r := mustPeek(t, f, b)
	truth := mustPeek(t, primary.Store, b)
	if primary.n() != n+1 || math.Abs(r.Remaining-truth.Remaining) > 1e-2 {
		t.Fatalf("a read 180 ms after the primary's last answer (reuse 100 ms): %.3f tokens after %d calls; the primary holds %.3f", r.Remaining, primary.n()-n, truth.Remaining)
	}
}

// Replica a refused the caller; replica other then refunds a request of
// its own. A read at a, past the reuse, asks the primary, and a read right
// after it says the same: what the refusal taught a (its tokens, for its
// free refusals) does not answer reads the primary answered since.
func TestFailoverReadAfterARefusalIsWhatThePrimarySaid(t *testing.T) {
	shared := NewMemoryStore(MemoryOptions{})
	quiet := slog.New(slog.DiscardHandler)
	a := &Failover{Primary: shared, Mode: FailClosed, Replicas: 2, ProbeInterval: time.Hour, PeekReuse: 50 * time.Millisecond, Logger: quiet}
	other := &Failover{Primary: shared, Mode: FailClosed, Replicas: 2, ProbeInterval: time.Hour, PeekReuse: 50 * time.Millisecond, Logger: quiet}
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}} // refills nothing a pause could see
	held := mustAdmit(t, other, Request{Bucket: b, Cost: 5})
	mustAdmit(t, a, Request{Bucket: b, Cost: 5}).Ticket.Release() // 0 left
	if r := mustAdmit(t, a, Request{Bucket: b, Cost: 1}); r.Allowed {
		t.Fatal("want a refusal at a")
	}
	held.Ticket.Settle(0.001)         // other's request cost next to nothing: about 5 back
	time.Sleep(60 * time.Millisecond) // past the reuse of a's refusal
	first := mustPeek(t, a, b)
	second := mustPeek(t, a, b)
	if first.Remaining < 4.9 || math.Abs(second.Remaining-first.Remaining) > 1e-2 {
		t.Fatalf("reads at a after other's refund of 5: %.3f, then %.3f right after; want about 5 both", first.Remaining, second.Remaining)
	}
}

// With fail_mode local, a read while degraded shows the bucket the
// caller's next admission starts from: seeded from what the primary last
// said, as the admission seeds it, not full.
func TestFailoverDegradedReadShowsTheSeededBucket(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 10}).Ticket.Release() // 0 left
	primary.set(true)
	mustAdmit(t, f, Request{Bucket: Bucket{Key: "other", Limit: b.Limit}, Cost: 1}) // trips the breaker
	if !f.Health().Degraded {
		t.Fatal("want degraded")
	}
	r := mustPeek(t, f, b)
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 5})
	if r.Remaining >= 5 || a.Allowed {
		t.Fatalf("a read while degraded: %.3f tokens; then an admission of 5: allowed %v", r.Remaining, a.Allowed)
	}
}

// A caller this replica only read (its requests went to another replica,
// which emptied the bucket) starts its fail_mode local bucket from that
// read when the primary fails, not full.
func TestFailoverLocalStartsFromTheLastRead(t *testing.T) {
	shared := &flakyStore{Store: NewMemoryStore(MemoryOptions{})}
	f := &Failover{Primary: shared, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 1, ProbeInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	if _, err := shared.Store.Admit(context.Background(), Request{Bucket: b, Cost: 10}); err != nil { // another replica
		t.Fatal(err)
	}
	r := mustPeek(t, f, b)
	shared.set(true)
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); a.Allowed {
		t.Fatalf("Redis down, a local admission of 5 after a read of %.3f: admitted (%.3f left)", r.Remaining, a.Result.Remaining)
	}
}

// A read whose caller hangs up while it waits for the shared call gets
// its error, and is not counted as answered for free.
func TestFailoverAbandonedReadIsNotAFreePeek(t *testing.T) {
	cp := &countedPeek{Store: NewMemoryStore(MemoryOptions{}), release: make(chan struct{})}
	f := &Failover{Primary: cp, Mode: FailClosed, Replicas: 1, ProbeInterval: time.Hour, PeekReuse: time.Hour}
	b := Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}
	var wg sync.WaitGroup
	wg.Go(func() { mustPeek(t, f, b) })
	for cp.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // ends while it waits
	defer cancel()
	_, err := f.Peek(ctx, b)
	close(cp.release)
	wg.Wait()
	if !errors.Is(err, context.DeadlineExceeded) || f.FreePeeks() != 0 {
		t.Fatalf("a read whose caller hung up: %v, %d free peeks; want context.DeadlineExceeded, 0", err, f.FreePeeks())
	}
}

type panickyPeek struct{ Store }

func (panickyPeek) Peek(context.Context, Bucket) (Result, error) { panic("a bug in the store") }

// A panic in the primary's peek is an error of that read, not the end of
// the process (the shared call runs on a goroutine of its own, where no
// HTTP server recovers it).
func TestFailoverReadThatPanicsIsAnError(t *testing.T) {
	f := &Failover{Primary: panickyPeek{NewMemoryStore(MemoryOptions{})}, Mode: FailClosed, ProbeInterval: time.Hour}
	if _, err := f.Peek(context.Background(), Bucket{Key: "k", Limit: Limit{Rate: 1, Capacity: 10}}); err == nil {
		t.Fatal("a read whose store panicked: no error")
	}
}

// A settlement made while a read is on its way (Redis answered the read
// before the settlement reached it) is not undone by the read: later reads
// show it, and so does the fail_mode local bucket seeded after Redis fails.
func TestFailoverReadInFlightKeepsASettlement(t *testing.T) {
	for _, degrade := range []bool{false, true} {
		mem := NewMemoryStore(MemoryOptions{})
		fl := &flakyStore{Store: mem}
		held := &heldPeek{Store: fl}
		f := &Failover{Primary: held, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 1, ProbeInterval: time.Hour,
			PeekReuse: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)}
		b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 2}) // 8 left
		held.read, held.release = make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); mustPeek(t, f, b) }()
		<-held.read
		a.Ticket.Settle(10) // it cost 10: 0 left
		close(held.release)
		<-done
		f.PeekReuse = time.Hour
		if !degrade {
			if r := mustPeek(t, f, b); r.Remaining >= 1 {
				t.Errorf("a read after a debit to 0: %.3f tokens", r.Remaining)
			}
			continue
		}
		fl.set(true)
		if ad := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); ad.Allowed {
			t.Errorf("Redis down, after a debit to 0: a local admission of 5 admitted (%.3f left)", ad.Result.Remaining)
		}
	}
}

// TestFailoverLocalKeepsWhatACallerSpentUntilThePrimaryAnswersForIt: the
// primary answering for another caller (an outage of the one Redis node
// that holds this caller's key) does not hand this caller back what it
// spent from its local bucket: with the primary failing for it again, it
// goes on from that bucket, not from its last answer before the outage.
// Once the primary answers for the caller itself (and is charged what it
// spent locally), the next outage starts it from that answer.
func TestFailoverLocalKeepsWhatACallerSpentUntilThePrimaryAnswersForIt(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	f.ProbeInterval = 10 * time.Millisecond
	y := Bucket{Key: "y", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	z := Bucket{Key: "z", Limit: y.Limit}
	mustAdmit(t, f, Request{Bucket: y, Cost: 1}).Ticket.Release() // the primary: 9 left
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: y, Cost: 8}); !a.Allowed { // locally: 1 left
		t.Fatalf("locally, 8 of 9: %+v", a.Result)
	}
	primary.set(false)
	time.Sleep(2 * f.ProbeInterval)
	mustAdmit(t, f, Request{Bucket: z, Cost: 1}).Ticket.Release() // the probe, for another caller
	if f.Health().Degraded {
		t.Fatal("the probe did not end the outage")
	}
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: y, Cost: 5}); a.Allowed {
		t.Fatalf("y failing again after another caller's probe: 5 admitted from %.3f (its local bucket held 1)", a.Result.Remaining+5)
	}
	primary.set(false)
	time.Sleep(2 * f.ProbeInterval)
	mustAdmit(t, f, Request{Bucket: y, Cost: 1}).Ticket.Release() // the primary, for y: 8 left there, less the 8 spent locally
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: y, Cost: 1}); a.Allowed {
		t.Fatalf("the next outage after the primary answered for y (0 left): 1 admitted (%.3f left), as from its old local bucket", a.Result.Remaining)
	}
}

// TestFailoverLocalAggregateStartsFromWhatThePrimaryReported: in fail_mode
// local, an aggregate bucket (the IPv6 /48) that the primary had just
// drained does not start full on the replica when the primary fails: it
// starts from what the primary's refusal reported of it.
func TestFailoverLocalAggregateStartsFromWhatThePrimaryReported(t *testing.T) {
	f, primary := newFailover(FailLocal, 4)
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 0.01, Capacity: 10}}
	own := Bucket{Key: "{n}:a", Limit: Limit{Rate: 0.01, Capacity: 100}}
	mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 10}).Ticket.Release() // drain the /48 on the primary
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5})
	if a.Allowed || a.Refusal != RefusedAggregate {
		t.Fatalf("primary: want the aggregate to refuse, got %+v", a)
	}
	primary.set(true) // outage -> fail_mode local
	b := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5})
	if b.Allowed {
		t.Fatalf("outage: a /48 Redis had just drained admits 5 tokens locally: %+v", b.Result)
	}
}

// TestFailoverLocalAggregateThatAdmittedIsNotMadeEmpty: an aggregate the
// primary admitted through does not start empty when the primary fails.
// Never refused, it starts full (a replica's share: a quarter of it on
// each of 4). Refused, then refunded by this replica's own settlement, it
// starts from the refusal's tokens with the refund and less what was
// admitted since (a quarter of them). Refused, then refunded by another
// replica (unseen here), an admission shows the refusal's tokens stale:
// it starts full, not from them.
func TestFailoverLocalAggregateThatAdmittedIsNotMadeEmpty(t *testing.T) {
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	own := Bucket{Key: "{n}:a", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	t.Run("never refused", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 4)
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2}).Ticket.Release() // 8 left on the primary
		primary.set(true)
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2.5}); !a.Allowed {
			t.Fatalf("outage: an aggregate the primary admitted through refuses its share of 2.5 locally: refusal=%d %+v", a.Refusal, a.Result)
		}
	})
	t.Run("refunded here", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 4)
		held := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 10}) // the /48 drained
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
			t.Fatalf("primary: want the aggregate to refuse, got %+v", a)
		}
		held.Ticket.Settle(0)                                                           // 10 back
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}).Ticket.Release() // 5 left
		primary.set(true)
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1.25}); !a.Allowed {
			t.Fatalf("outage: an aggregate holding 5 refuses its share of 1.25 locally: refusal=%d %+v", a.Refusal, a.Result)
		}
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1}); a.Allowed || a.Refusal != RefusedAggregate {
			t.Fatalf("outage: the local aggregate started full, not from a share of the 5 the primary held: %+v", a)
		}
	})
	t.Run("refunded elsewhere", func(t *testing.T) {
		f, primary := newFailover(FailLocal, 4)
		other := &Failover{Primary: primary, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 4,
			ProbeInterval: time.Hour, Logger: f.Logger}
		held := mustAdmit(t, other, Request{Bucket: Bucket{Key: "{n}:b", Limit: own.Limit}, Aggregate: agg, Cost: 10})
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
			t.Fatalf("primary: want the aggregate to refuse, got %+v", a)
		}
		held.Ticket.Settle(0) // 10 back, on another replica
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}).Ticket.Release()
		primary.set(true)
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 2.5}); !a.Allowed {
			t.Fatalf("outage: an admission the refusal's tokens could not pay left the local aggregate empty: refusal=%d %+v", a.Refusal, a.Result)
		}
	})
}

// TestFailoverLocalAggregateIsForgottenWhenThePrimaryAnswers: as a
// caller's own fallback bucket, the fallback aggregate is kept through an
// outage and dropped once the primary answers for it: the next outage
// starts it from the primary's latest answer, not from what was left here.
func TestFailoverLocalAggregateIsForgottenWhenThePrimaryAnswers(t *testing.T) {
	f, primary := newFailover(FailLocal, 1)
	f.ProbeInterval = 10 * time.Millisecond
	agg := &Bucket{Key: "{n}", Limit: Limit{Rate: 1e-3, Capacity: 10}}
	own := Bucket{Key: "{n}:a", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	held := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 10})
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
		t.Fatalf("primary: want the aggregate to refuse, got %+v", a)
	}
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); a.Allowed {
		t.Fatalf("outage: a drained aggregate admits 5 locally: %+v", a.Result)
	}
	primary.set(false)
	held.Ticket.Settle(0) // 10 back on the primary
	time.Sleep(2 * f.ProbeInterval)
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); !a.Allowed || f.Health().Degraded { // the probe: 5 left
		t.Fatalf("the probe: allowed=%v refusal=%d %+v, degraded %v", a.Allowed, a.Refusal, a.Result, f.Health().Degraded)
	} else {
		a.Ticket.Release()
	}
	primary.set(true)
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); !a.Allowed {
		t.Fatalf("the next outage kept the drained local aggregate: refusal=%d %+v", a.Refusal, a.Result)
	}
	if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1}); a.Allowed {
		t.Fatalf("the next outage started the aggregate full, not from the 5 the primary held: %+v", a.Result)
	}
}

// TestFailoverRemembersBoundedAggregates: what is known of aggregate
// buckets is bounded by Remember, as what is known of callers is.
func TestFailoverRemembersBoundedAggregates(t *testing.T) {
	f, _ := newFailover(FailLocal, 1)
	f.Remember = 2
	for i := range 5 {
		tag := "{" + strconv.Itoa(i) + "}"
		agg := &Bucket{Key: tag, Limit: Limit{Rate: 1e-3, Capacity: 1}}
		own := Bucket{Key: tag + ":a", Limit: Limit{Rate: 1e-3, Capacity: 10}}
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1}).Ticket.Release()
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1}); a.Refusal != RefusedAggregate {
			t.Fatalf("want the aggregate to refuse, got %+v", a)
		}
	}
	f.known.mu.Lock()
	n := len(f.known.agg)
	f.known.mu.Unlock()
	if n > 2 || n == 0 {
		t.Fatalf("%d aggregates remembered with Remember 2, want 1..2", n)
	}
}

// In fail_mode local, what a caller spent from its local bucket while the
// primary failed is charged to the primary's bucket once the primary
// admits the caller again (with that request's settlement), so an outage
// does not hand each caller a second bucket: before, the primary's bucket,
// which saw none of the local spending, served it in full again. Only
// what the local bucket did not refill counts, on each replica its share;
// a read of the budget first carries nothing and loses nothing, and the
// debt is charged once.
func TestFailoverLocalSpendingIsChargedToThePrimaryAfterwards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		rate     float64
		peek     bool
		want     float64 // the primary's tokens after the first admission back, released
		tol      float64 // the refill while the test reads them
	}{
		{"one replica", 1, 1e-3, false, 9 - 1 - 6, 0.01},
		{"a read first", 1, 1e-3, true, 9 - 1 - 6, 0.01},
		{"one of two replicas", 2, 1e-3, false, 9 - 1 - 3, 0.01},
		// At 100 tokens a second the primary refills to 10 within 10 ms of
		// the admission: anything but the 6 spent locally, charged again.
		{"refilled meanwhile", 1, 100, false, 10 - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, primary := newFailover(FailLocal, tc.replicas)
			f.ProbeInterval = 10 * time.Millisecond
			b := Bucket{Key: "k", Limit: Limit{Rate: tc.rate, Capacity: 10}}
			mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // the primary: 9
			primary.set(true)
			spend := 6 / float64(tc.replicas)
			if a := mustAdmit(t, f, Request{Bucket: b, Cost: spend}); !a.Allowed || !f.Health().Degraded {
				t.Fatalf("locally, %v: allowed %v (%.3f left), degraded %v", spend, a.Allowed, a.Result.Remaining, f.Health().Degraded)
			} else {
				a.Ticket.Release()
			}
			primary.set(false)
			time.Sleep(2 * f.ProbeInterval)
			if tc.name == "refilled meanwhile" {
				time.Sleep(100 * time.Millisecond) // 10 tokens refilled
			}
			if tc.peek {
				if _, err := f.Peek(t.Context(), b); err != nil || f.Health().Degraded {
					t.Fatalf("the read that ends the outage: %v, degraded %v", err, f.Health().Degraded)
				}
			}
			mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
			if f.Health().Degraded {
				t.Fatal("the admission did not end the outage")
			}
			res, err := primary.Store.Peek(t.Context(), b)
			if err != nil {
				t.Fatal(err)
			}
			if res.Remaining < tc.want-tc.tol || res.Remaining > tc.want+tc.tol {
				t.Errorf("the primary holds %.3f after the outage, want %.3f", res.Remaining, tc.want)
			}
			mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
			if again, _ := primary.Store.Peek(t.Context(), b); again.Remaining < res.Remaining-1.01 {
				t.Errorf("the next admission took the primary from %.3f to %.3f: the local spending charged twice", res.Remaining, again.Remaining)
			}
		})
	}
}

// What a caller's answers after an outage report of what it spent locally
// stays within its bucket: a refund still owed (a request admitted
// locally that settled for less after its bucket ended) does not lift
// them above the capacity, as its settlement cannot (they said 149 of
// 100); and a refusal by the IPv6 aggregate reports the aggregate, not it
// less the caller's own debt (-16 for the aggregate's 4).
func TestFailoverOwingStaysWithinTheBucket(t *testing.T) {
	t.Run("refund owed", func(t *testing.T) {
		f, p := newFailover(FailLocal, 1)
		b := Bucket{Key: "k", Limit: Limit{Rate: 1000, Capacity: 100}} // full again within 0.1 s
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
		p.set(true)
		running := mustAdmit(t, f, Request{Bucket: b, Cost: 50}) // locally
		p.set(false)
		f.Recovered(context.Background())
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // carries the 50
		running.Ticket.Settle(0)                                      // a refund of 50, owed
		time.Sleep(150 * time.Millisecond)                            // the primary full
		res := mustPeek(t, f, b)
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 1})
		if res.Remaining > b.Limit.Capacity || a.Result.Remaining > b.Limit.Capacity {
			t.Errorf("read %.3f, admission %.3f: above the capacity %g", res.Remaining, a.Result.Remaining, b.Limit.Capacity)
		}
		a.Ticket.Release()
	})
	t.Run("aggregate refusal", func(t *testing.T) {
		f, p := newFailover(FailLocal, 1)
		own := Bucket{Key: "own", Limit: Limit{Rate: 1e-3, Capacity: 100}}
		other := Bucket{Key: "other", Limit: Limit{Rate: 1e-3, Capacity: 100}}
		agg := &Bucket{Key: "agg", Limit: Limit{Rate: 1e-3, Capacity: 30}}
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 1, Debt: 50}).Ticket.Release() // own 99, agg 29
		p.set(true)
		mustAdmit(t, f, Request{Bucket: own, Cost: 20, Debt: 50}).Ticket.Release() // locally: owes 20
		p.set(false)
		f.Recovered(context.Background())
		mustAdmit(t, p.Store, Request{Bucket: other, Aggregate: agg, Cost: 25}).Ticket.Release() // agg: 4
		a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 10, Debt: 50})
		if a.Allowed || a.Refusal != RefusedAggregate {
			t.Fatalf("%+v, want refused by the aggregate", a)
		}
		if math.Abs(a.Result.Remaining-4) > 0.01 {
			t.Errorf("the aggregate's refusal reports %.3f, want its 4", a.Result.Remaining)
		}
	})
}

// While the first admission after an outage runs, carrying what its caller
// spent locally to the primary, a read says what that admission said (the
// primary, which has not seen the carry yet, said 98 where the caller had
// 38); and a refusal does not count a refund the caller is owed, which
// reaches its bucket only with an admission (it reported 98 tokens to a
// request of 60 it refused).
func TestFailoverAnswersCountWhatIsCarried(t *testing.T) {
	for _, reuse := range []time.Duration{0, -1} {
		f, p := newFailover(FailLocal, 1)
		f.PeekReuse = reuse
		b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 100}}
		spendInAnOutage(t, f, p, b)
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}) // carries the 60
		during := mustPeek(t, f, b).Remaining
		second := mustAdmit(t, f, Request{Bucket: b, Cost: 1})
		second.Ticket.Release()
		a.Ticket.Release()
		after := mustPeek(t, f, b).Remaining
		if math.Abs(a.Result.Remaining-38) > 0.01 || math.Abs(during-38) > 0.01 || math.Abs(second.Result.Remaining-37) > 0.01 || math.Abs(after-37) > 0.01 {
			t.Errorf("PeekReuse %v: the carrying admission said %.3f, a read during it %.3f, an admission beside it %.3f, a read after %.3f; want 38, 38, 37, 37",
				reuse, a.Result.Remaining, during, second.Result.Remaining, after)
		}
	}
	f, p := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // 99
	p.set(true)
	running := mustAdmit(t, f, Request{Bucket: b, Cost: 50}) // locally
	p.set(false)
	f.Recovered(context.Background())
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // carries the 50: 48
	running.Ticket.Settle(0)                                      // a refund of 50 owed
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 60}); a.Allowed || a.Result.Remaining > 48.01 {
		t.Errorf("a request of 60: allowed %v, %.3f left; want refused with the 48 the bucket holds", a.Allowed, a.Result.Remaining)
	}
	if res := mustPeek(t, f, b); res.Remaining > 48.01 {
		t.Errorf("a read says %.3f, want the 48 the bucket holds until an admission carries the refund", res.Remaining)
	}
	if a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}); !a.Allowed || math.Abs(a.Result.Remaining-97) > 0.01 {
		t.Errorf("the admission that carries the refund: allowed %v, %.3f left; want 97", a.Allowed, a.Result.Remaining)
	} else {
		a.Ticket.Release()
	}
}

// A second outage while the first admission after the last one still runs
// starts the caller's local bucket from what that admission said (38),
// less than the primary's bucket, which has not seen its carry yet (98):
// it admitted a request of 50 from a bucket the caller had spent down to
// 38.
func TestFailoverSecondOutageSeedsLessWhatIsCarried(t *testing.T) {
	f, p := newFailover(FailLocal, 1)
	b := Bucket{Key: "k", Limit: Limit{Rate: 1e-3, Capacity: 100}}
	spendInAnOutage(t, f, p, b)
	a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}) // 38, carrying the 60, still running
	p.set(true)
	if l := mustAdmit(t, f, Request{Bucket: b, Cost: 50}); l.Allowed {
		t.Errorf("the second outage admitted 50 tokens (%.3f left) from a bucket of 38", l.Result.Remaining)
	}
	if l := mustAdmit(t, f, Request{Bucket: b, Cost: 30}); !l.Allowed || math.Abs(l.Result.Remaining-8) > 0.01 {
		t.Errorf("the second outage: a request of 30 allowed %v, %.3f left; want admitted, 8 left", l.Allowed, l.Result.Remaining)
	} else {
		l.Ticket.Release()
	}
	a.Ticket.Release()
}

// spendInAnOutage has b's caller spend 1 token on the primary (99 left),
// then 60 locally while it fails (39), and ends the outage: the primary
// still says 99.
func spendInAnOutage(t *testing.T, f *Failover, p *flakyStore, b Bucket) {
	t.Helper()
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release()
	p.set(true)
	for range 6 {
		mustAdmit(t, f, Request{Bucket: b, Cost: 10}).Ticket.Release()
	}
	p.set(false)
	f.Recovered(context.Background())
}
