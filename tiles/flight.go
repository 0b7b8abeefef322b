package tiles

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/geotoll/geotoll/internal/pgcall"
)

// flights coalesces concurrent loads of one key: the first caller starts
// the load, later callers wait for its result instead of starting their own.
//
// Cancellation is reference counted, which is why this is not
// golang.org/x/sync/singleflight: there, the shared function runs with
// whatever context its first caller gave it, so either the first caller
// hanging up cancels the query for everyone still waiting, or (with a
// detached context) nobody hanging up ever cancels it. Here the load runs
// under a context detached from every caller (context.WithoutCancel of the
// first caller's, keeping its values) and is cancelled only when the last
// caller waiting for it has given up. A lone client that hangs up still
// cancels its query in PostgreSQL; a client that hangs up while others wait
// for the same tile does not take their tile away. The load's own bound is
// the caller's business (the handler adds the layers' statement timeout).
// Whoever leaves last waits, after answering, for the cancelled load to
// end (see wait).
//
// The load's database time (a pgcall.Meter of its own) is added, once its
// statements have stopped, to the meter of the caller that pays for it
// (see bill): the one that started it if it waited for the result, else
// the caller waiting longest, else the last to give up — the request that
// held an in-flight slot until the work was over.
type flights[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*flight[V]
}

type flight[V any] struct {
	done   chan struct{} // closed under flights.mu
	val    V
	err    error
	cancel context.CancelFunc
	meter  *pgcall.Meter // the load's database time
	// Guarded by flights.mu: the callers still waiting, in the order they
	// came, and the last one that gave up.
	callers []*caller
	left    *caller
}

// caller is one call of do: its context carries its request's meter.
type caller struct{ ctx context.Context }

// do returns the result of load for key, running load at most once for
// concurrent callers. shared reports whether this caller joined a load
// another caller started. When ctx ends first, do returns ctx.Err(); the
// load goes on while other callers wait for it.
func (g *flights[K, V]) do(ctx context.Context, key K, load func(context.Context) (V, error)) (v V, shared bool, err error) {
	g.mu.Lock()
	c := &caller{ctx: ctx}
	if f, ok := g.m[key]; ok {
		f.callers = append(f.callers, c)
		g.mu.Unlock()
		v, err = g.wait(c, key, f)
		return v, true, err
	}
	if g.m == nil {
		g.m = make(map[K]*flight[V])
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) //nolint:gosec // G118: the flight keeps cancel and calls it when its last caller leaves or its load ends
	lctx, meter := pgcall.WithMeter(lctx)
	f := &flight[V]{done: make(chan struct{}), cancel: cancel, meter: meter, callers: []*caller{c}}
	g.m[key] = f
	g.mu.Unlock()

	go g.run(lctx, key, f, load)
	v, err = g.wait(c, key, f)
	return v, false, err
}

func (g *flights[K, V]) run(ctx context.Context, key K, f *flight[V], load func(context.Context) (V, error)) {
	defer f.cancel()
	defer func() {
		if p := recover(); p != nil {
			// Nobody up the stack of this goroutine could recover it: turn
			// it into every waiter's error instead of crashing the server.
			f.err = fmt.Errorf("tile load panicked: %v\n%s", p, debug.Stack())
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.m[key] == f {
			delete(g.m, key)
		}
		f.err = f.bill(f.err)
		close(f.done)
	}()
	f.val, f.err = load(ctx)
}

// bill adds the load's database time to the meter of the caller that pays
// for it: the first still waiting (the one that started the load, unless it
// left), or else the last that gave up, whose wait lasts until the load's
// statements have stopped. A load whose statements still run (err wraps a
// pgcall.Stopping) is billed once they have stopped: the error returned
// then ends (WaitStopped) only after that. A load that made no call bills
// nobody, but for one that found the database busy. Called under
// flights.mu, as the load ends.
func (f *flight[V]) bill(err error) error {
	payer := f.left
	if len(f.callers) > 0 {
		payer = f.callers[0]
	}
	var s *pgcall.Stopping
	if !errors.As(err, &s) {
		// A load that made no call bills nobody; one that found every
		// connection busy is a busy 503 to each request it answers, each
		// charged as one (pgcall.Meter.Busy).
		if f.meter.Used() {
			pgcall.AddTo(payer.ctx, f.meter.DB())
		}
		if f.meter.Busy() {
			for _, c := range f.callers {
				pgcall.MarkBusy(c.ctx)
			}
			if f.left != nil {
				pgcall.MarkBusy(f.left.ctx)
			}
		}
		return err
	}
	// Owed from now: the answer its request sends before the statements
	// stop shows what it pays for, not the base of a request that ran
	// nothing (toll's settlement).
	pgcall.AddTo(payer.ctx, 0)
	paid := make(chan struct{})
	go func() {
		pgcall.WaitStopped(err)
		pgcall.AddTo(payer.ctx, f.meter.DB())
		close(paid)
	}()
	return pgcall.Outlast(err, paid)
}

// wait returns the load's result, or ctx's error when ctx ends first. The
// last caller to give up cancels the load, and owes the database its time:
// its error then wraps a pgcall.Stopping that ends only once the load has
// returned and every statement behind its result has stopped, so that the
// request — and the in-flight slot it holds — is not over while its shared
// query still runs (see pgcall.Respond). A caller that leaves others
// waiting leaves the work to them.
func (g *flights[K, V]) wait(c *caller, key K, f *flight[V]) (V, error) {
	ctx := c.ctx
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-f.done: // ended meanwhile, perhaps billing this caller
		g.mu.Unlock()
		return f.val, f.err
	default:
	}
	f.callers = slices.DeleteFunc(f.callers, func(w *caller) bool { return w == c })
	last := len(f.callers) == 0
	if last {
		f.left = c
		f.cancel()
		// A caller arriving now must start afresh, not join a load that is
		// being cancelled.
		if g.m[key] == f {
			delete(g.m, key)
		}
	}
	g.mu.Unlock()
	var zero V
	if !last {
		return zero, ctx.Err()
	}
	if f.meter.Used() {
		pgcall.AddTo(ctx, 0) // it owes the load's calls (bill), from now
	}
	stopped := make(chan struct{})
	go func() {
		<-f.done
		pgcall.WaitStopped(f.err)
		close(stopped)
	}()
	return zero, pgcall.Outlast(ctx.Err(), stopped)
}
