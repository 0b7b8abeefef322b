package tiles

import (
	"context"
	"fmt"
	"runtime/debug"
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
type flights[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*flight[V]
}

type flight[V any] struct {
	done    chan struct{}
	val     V
	err     error
	waiters int // callers still waiting; guarded by flights.mu
	cancel  context.CancelFunc
}

// do returns the result of load for key, running load at most once for
// concurrent callers. shared reports whether this caller joined a load
// another caller started. When ctx ends first, do returns ctx.Err(); the
// load goes on while other callers wait for it.
func (g *flights[K, V]) do(ctx context.Context, key K, load func(context.Context) (V, error)) (v V, shared bool, err error) {
	g.mu.Lock()
	if f, ok := g.m[key]; ok {
		f.waiters++
		g.mu.Unlock()
		v, err = g.wait(ctx, key, f)
		return v, true, err
	}
	if g.m == nil {
		g.m = make(map[K]*flight[V])
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight[V]{done: make(chan struct{}), waiters: 1, cancel: cancel}
	g.m[key] = f
	g.mu.Unlock()

	go g.run(lctx, key, f, load)
	v, err = g.wait(ctx, key, f)
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
		if g.m[key] == f {
			delete(g.m, key)
		}
		g.mu.Unlock()
		close(f.done)
	}()
	f.val, f.err = load(ctx)
}

// wait returns the load's result, or ctx's error when ctx ends first. The
// last caller to give up cancels the load, and owes the database its time:
// its error then wraps a pgcall.Stopping that ends only once the load has
// returned and every statement behind its result has stopped, so that the
// request — and the in-flight slot it holds — is not over while its shared
// query still runs (see pgcall.Respond). A caller that leaves others
// waiting leaves the work to them.
func (g *flights[K, V]) wait(ctx context.Context, key K, f *flight[V]) (V, error) {
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	f.waiters--
	last := f.waiters == 0
	if last {
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
	stopped := make(chan struct{})
	go func() {
		<-f.done
		pgcall.WaitStopped(f.err)
		close(stopped)
	}()
	return zero, pgcall.Outlast(ctx.Err(), stopped)
}
