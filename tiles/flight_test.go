package tiles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
)

// blockingLoad counts its calls, reports each start on started, and
// returns "tile" when release closes — or its context's error when that
// ends first.
type blockingLoad struct {
	calls   atomic.Int32
	started chan context.Context
	release chan struct{}
}

func newBlockingLoad() *blockingLoad {
	return &blockingLoad{started: make(chan context.Context, 16), release: make(chan struct{})}
}

func (b *blockingLoad) load(ctx context.Context) (string, error) {
	b.calls.Add(1)
	b.started <- ctx
	select {
	case <-b.release:
		return "tile", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// waitFor polls cond for up to 5 s; it synchronises with goroutines, it
// does not time anything.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *flights[K, V]) waiting(key K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		return len(f.callers)
	}
	return 0
}

func TestFlightsCoalesce(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	b := newBlockingLoad()
	const n = 10
	var wg sync.WaitGroup
	var shared atomic.Int32
	results := make(chan string, n)
	for range n {
		wg.Go(func() {
			v, s, err := g.do(context.Background(), "k", b.load)
			if err != nil {
				t.Errorf("do: %v", err)
			}
			if s {
				shared.Add(1)
			}
			results <- v
		})
	}
	testenv.Receive(t, b.started, "the load to start")
	waitFor(t, "every caller to wait on the one load", func() bool { return g.waiting("k") == n })
	close(b.release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != "tile" {
			t.Errorf("result %q, want tile", v)
		}
	}
	if c := b.calls.Load(); c != 1 {
		t.Errorf("load ran %d times for %d concurrent callers, want 1", c, n)
	}
	if s := shared.Load(); s != n-1 {
		t.Errorf("%d callers report shared, want %d", s, n-1)
	}
	if len(g.m) != 0 {
		t.Errorf("finished flight still registered: %v", g.m)
	}
}

// The first caller hanging up must not cancel the load others wait for.
func TestFlightsFirstCallerLeavesOthersKeepTheLoad(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	b := newBlockingLoad()
	firstCtx, hangUp := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, _, err := g.do(firstCtx, "k", b.load)
		firstErr <- err
	}()
	loadCtx := testenv.Receive(t, b.started, "the load to start")
	secondVal := make(chan string, 1)
	go func() {
		v, shared, err := g.do(context.Background(), "k", b.load)
		if err != nil || !shared {
			t.Errorf("second caller: shared %v, err %v", shared, err)
		}
		secondVal <- v
	}()
	waitFor(t, "the second caller to join", func() bool { return g.waiting("k") == 2 })

	hangUp()
	if err := testenv.Receive(t, firstErr, "the first caller to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v, want context.Canceled", err)
	}
	if err := loadCtx.Err(); err != nil {
		t.Fatalf("the shared load was cancelled when its first caller left: %v", err)
	}
	close(b.release)
	if v := testenv.Receive(t, secondVal, "the second caller's tile"); v != "tile" {
		t.Fatalf("second caller got %q", v)
	}
	if c := b.calls.Load(); c != 1 {
		t.Errorf("load ran %d times, want 1", c)
	}
}

// A lone caller hanging up cancels its load (and so its query).
func TestFlightsLastCallerLeavingCancels(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	b := newBlockingLoad()
	ctx, hangUp := context.WithCancel(context.Background())
	type ctxKey struct{}
	ctx = context.WithValue(ctx, ctxKey{}, "request id")
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.do(ctx, "k", b.load)
		errc <- err
	}()
	loadCtx := testenv.Receive(t, b.started, "the load to start")
	if loadCtx.Value(ctxKey{}) != "request id" {
		t.Error("the load lost its caller's context values")
	}
	hangUp()
	if err := testenv.Receive(t, errc, "do to return after the hang-up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("do: %v, want context.Canceled", err)
	}
	select {
	case <-loadCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the load was not cancelled after its only caller left")
	}
	// A new caller starts a new load rather than joining the cancelled one.
	b2 := newBlockingLoad()
	close(b2.release)
	v, shared, err := g.do(context.Background(), "k", b2.load)
	if err != nil || shared || v != "tile" {
		t.Fatalf("after cancellation: %q shared=%v err=%v, want a fresh load", v, shared, err)
	}
}

func TestFlightsErrorsAndPanicsReachEveryWaiter(t *testing.T) {
	t.Parallel()
	var g flights[int, string]
	boom := errors.New("boom")
	if _, _, err := g.do(context.Background(), 1, func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("error: %v, want boom", err)
	}
	_, _, err := g.do(context.Background(), 2, func(context.Context) (string, error) { panic("kaput") })
	if err == nil || !strings.Contains(err.Error(), "kaput") {
		t.Errorf("panic: %v, want an error naming it", err)
	}
	// Failed loads are forgotten: the next call loads again.
	v, _, err := g.do(context.Background(), 1, func(context.Context) (string, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Errorf("after a failure: %q %v", v, err)
	}
}

// Loads of different keys run side by side: one key neither waits for nor
// joins another's load.
func TestFlightsKeysAreIndependent(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	loads := map[string]*blockingLoad{"a": newBlockingLoad(), "b": newBlockingLoad()}
	type result struct {
		key, v string
		shared bool
		err    error
	}
	done := make(chan result, len(loads))
	for key, l := range loads {
		go func() {
			v, shared, err := g.do(context.Background(), key, l.load)
			done <- result{key, v, shared, err}
		}()
	}
	for key, l := range loads { // both run before either is released
		testenv.Receive(t, l.started, "the load of key "+key+" to start while the other runs")
	}
	for _, l := range loads {
		close(l.release)
	}
	for range loads {
		if r := testenv.Receive(t, done, "a result"); r.err != nil || r.shared || r.v != "tile" {
			t.Errorf("key %s: %q shared=%v err=%v, want its own load's tile", r.key, r.v, r.shared, r.err)
		}
	}
	for key, l := range loads {
		if c := l.calls.Load(); c != 1 {
			t.Errorf("load of key %s ran %d times, want 1", key, c)
		}
	}
}

// The last caller to leave owes the database the load's time: its error
// says a statement is still running, and waiting on it (as the handler does
// after answering, so that the request's in-flight slot stays held) ends
// only once the load has returned and the statement behind its result has
// stopped. A caller that leaves while others wait leaves the work to them.
func TestFlightsLastCallerWaitsForTheLoadToStop(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	started := make(chan struct{})
	returned := make(chan struct{}) // the load returns (cancelled, its statement still running)
	stopped := make(chan struct{})  // the statement stops
	load := func(ctx context.Context) (string, error) {
		close(started)
		<-ctx.Done()
		<-returned
		return "", pgcall.Outlast(ctx.Err(), stopped)
	}
	first, leaveFirst := context.WithCancel(context.Background())
	second, leaveSecond := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, _, err := g.do(first, "k", load); errs <- err }()
	testenv.Receive(t, started, "the load to start")
	go func() { _, _, err := g.do(second, "k", load); errs <- err }()
	waitFor(t, "two callers waiting", func() bool { return g.waiting("k") == 2 })

	leaveFirst()
	err := testenv.Receive(t, errs, "the first caller to leave")
	var s *pgcall.Stopping
	if !errors.Is(err, context.Canceled) || errors.As(err, &s) {
		t.Fatalf("a caller leaving while another waits: %v, want context.Canceled with nothing to wait for", err)
	}
	leaveSecond()
	err = testenv.Receive(t, errs, "the last caller to leave")
	if !errors.Is(err, context.Canceled) || !errors.As(err, &s) {
		t.Fatalf("the last caller leaving: %v, want context.Canceled with the load to wait for", err)
	}
	waited := make(chan struct{})
	go func() { pgcall.WaitStopped(err); close(waited) }()
	for _, step := range []chan struct{}{returned, stopped} {
		select {
		case <-waited:
			t.Fatal("the wait ended before the load returned and its statement stopped")
		case <-time.After(50 * time.Millisecond):
		}
		close(step)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end once the statement stopped")
	}
}

// A load's database time goes to the meter of the caller that pays for
// it: its starter while it waits; once the starter has left (its request
// settled without the load's time), the caller that waited longest.
func TestFlightsBillTheCallerThatStayed(t *testing.T) {
	t.Parallel()
	for _, starterLeaves := range []bool{false, true} {
		t.Run(fmt.Sprintf("starter leaves %v", starterLeaves), func(t *testing.T) {
			t.Parallel()
			var g flights[string, string]
			started, release := make(chan struct{}), make(chan struct{})
			load := func(ctx context.Context) (string, error) {
				close(started)
				<-release
				pgcall.AddTo(ctx, 80*time.Millisecond) // as a call records its time
				return "tile", nil
			}
			first, leaveFirst := context.WithCancel(context.Background())
			defer leaveFirst()
			first, firstMeter := pgcall.WithMeter(first)
			second, secondMeter := pgcall.WithMeter(context.Background())
			errs := startTwo(t, &g, first, second, started, load)
			if starterLeaves {
				leaveFirst()
				if err := <-errs; !errors.Is(err, context.Canceled) {
					t.Fatalf("the starter leaving: %v", err)
				}
			}
			close(release)
			for range 2 - btoi(starterLeaves) {
				if err := <-errs; err != nil {
					t.Fatalf("a caller that waited: %v", err)
				}
			}
			want := [2]time.Duration{80 * time.Millisecond, 0}
			if starterLeaves {
				want = [2]time.Duration{0, 80 * time.Millisecond}
			}
			if got := [2]time.Duration{firstMeter.DB(), secondMeter.DB()}; got != want {
				t.Errorf("metered (starter, joiner) %v, want %v", got, want)
			}
		})
	}
}

// A load that found every connection busy is a busy 503 to each caller it
// answers: each caller's meter is marked busy (each is charged its
// estimate), none is billed database time. The joiners were charged
// their base: one of N retries of a tile into a full share paid.
func TestFlightsMarkEveryCallerOfABusyLoad(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	started, release := make(chan struct{}), make(chan struct{})
	errBusy := errors.New("busy")
	load := func(ctx context.Context) (string, error) {
		close(started)
		<-release
		pgcall.MarkBusy(ctx) // as a call of a busy pool does
		return "", errBusy
	}
	first, firstMeter := pgcall.WithMeter(context.Background())
	second, secondMeter := pgcall.WithMeter(context.Background())
	errs := startTwo(t, &g, first, second, started, load)
	close(release)
	for range 2 {
		if err := <-errs; !errors.Is(err, errBusy) {
			t.Fatalf("a caller: %v, want the load's error", err)
		}
	}
	for name, m := range map[string]*pgcall.Meter{"starter": firstMeter, "joiner": secondMeter} {
		if !m.Busy() || m.Used() || m.DB() != 0 {
			t.Errorf("the %s's meter: busy %v, used %v, %s; want busy, unused, none", name, m.Busy(), m.Used(), m.DB())
		}
	}
}

// startTwo starts load of "k" for first and, once it runs (started),
// joins it with second; errs gets each caller's error.
func startTwo(t *testing.T, g *flights[string, string], first, second context.Context, started <-chan struct{},
	load func(context.Context) (string, error)) (errs chan error) {
	t.Helper()
	errs = make(chan error, 2)
	go func() { _, _, err := g.do(first, "k", load); errs <- err }()
	<-started
	go func() { _, _, err := g.do(second, "k", load); errs <- err }()
	waitFor(t, "two callers waiting", func() bool { return g.waiting("k") == 2 })
	return errs
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A load everybody gave up on, whose statement still runs, is billed to
// the last caller to leave — once the statement has stopped, and before
// that caller's wait (which holds its request's in-flight slot) ends.
func TestFlightsBillTheLastToLeaveOnceStopped(t *testing.T) {
	t.Parallel()
	var g flights[string, string]
	loadCtx := make(chan context.Context, 1)
	stopped := make(chan struct{})
	load := func(ctx context.Context) (string, error) {
		loadCtx <- ctx
		<-ctx.Done()
		return "", pgcall.Outlast(ctx.Err(), stopped)
	}
	first, leaveFirst := context.WithCancel(context.Background())
	first, firstMeter := pgcall.WithMeter(first)
	second, leaveSecond := context.WithCancel(context.Background())
	second, secondMeter := pgcall.WithMeter(second)
	errs := make(chan error, 2)
	go func() { _, _, err := g.do(first, "k", load); errs <- err }()
	lctx := <-loadCtx
	go func() { _, _, err := g.do(second, "k", load); errs <- err }()
	waitFor(t, "two callers waiting", func() bool { return g.waiting("k") == 2 })
	leaveFirst()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the starter leaving: %v", err)
	}
	leaveSecond()
	err := <-errs
	waited := make(chan struct{})
	go func() { pgcall.WaitStopped(err); close(waited) }()
	select {
	case <-waited:
		t.Fatal("the last caller's wait ended while the statement still ran")
	case <-time.After(50 * time.Millisecond):
	}
	pgcall.AddTo(lctx, 80*time.Millisecond) // the statement's call records its time, then stops
	close(stopped)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end once the statement stopped")
	}
	if f, s := firstMeter.DB(), secondMeter.DB(); f != 0 || s != 80*time.Millisecond {
		t.Errorf("metered starter %v, last to leave %v; want 0 and 80ms", f, s)
	}
}
