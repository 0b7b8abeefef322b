package pgcall

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// work is what a call does with its connection: ctx is cut at cut.
type work func(ctx context.Context, conn *pgx.Conn, cut time.Time, t *Timing) error

// call is one guarded use of a pooled connection. Its work runs on a
// goroutine other than its caller's — the connection's own (see worker) —
// that holds the connection until the backend has answered, so that the
// caller can answer by its deadline whatever the backend does.
type call struct {
	db     *DB
	ctx    context.Context // the caller's
	conn   *pgxpool.Conn
	share  *Share     // the slot it holds, if any
	cancel *canceller // nil on a pool that Configure did not set up
	cut    time.Time
	// answerBy is the caller's deadline (zero: none): a cut call waits for
	// its backend StopWait (and for a late acknowledgement of its cancel
	// request, up to AckWait), and never past it.
	answerBy time.Time
	done     chan struct{} // closed once the connection is back in the pool, or out of it
	state    atomic.Int32

	// Written by run before done is closed.
	timing Timing
	err    error
	lost   bool
}

// States of a call: its work runs; it finished; its caller answered
// without it (it outlives its answer).
const (
	running int32 = iota
	finished
	outliving
)

var errNoAnswer = errors.New("the database did not answer its cancel request")

// call acquires a connection and runs w on it, cut budget + AnswerGrace
// from now or shortly before ctx's deadline — StopWait before it, or a
// quarter of the time left if that is less — whichever is first.
func (db *DB) call(ctx context.Context, budget time.Duration, w work) (Timing, error) {
	budget = capped(ctx, budget)
	share := ShareOf(ctx)
	conn, err := db.acquire(ctx, share)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return Timing{}, db.cancelled(err)
		}
		if busy(err) {
			MarkBusy(ctx) // charged its estimate (Meter.Busy); an outage costs the base
		}
		return Timing{}, db.unavailable(err)
	}
	c := &call{db: db, ctx: ctx, conn: conn, share: share, cancel: cancellerOf(conn.Conn()),
		cut: time.Now().Add(budget + AnswerGrace), done: make(chan struct{})}
	if c.cancel != nil {
		c.cancel.reset()
	}
	if dl, ok := ctx.Deadline(); ok {
		c.answerBy = dl
		if cut := dl.Add(-min(StopWait, time.Until(dl)/4)); cut.Before(c.cut) {
			c.cut = cut
		}
	}
	if m := meterOf(ctx); m != nil {
		m.used.Store(true)
	}
	wctx, cancel := context.WithDeadline(ctx, c.cut)
	goOn(conn.Conn(), func() { c.run(wctx, cancel, w) })
	return c.await(wctx)
}

func (c *call) run(ctx context.Context, cancel context.CancelFunc, w work) {
	defer close(c.done)
	start := time.Now()
	whole, err := guard(func() error { return w(ctx, c.conn.Conn(), c.cut, &c.timing) })
	end := time.Now()
	if c.cancel != nil { // a cancelled call's database time ends with the backend's answer
		if at := c.cancel.answeredAt(); at.After(start) {
			end = at
		}
	}
	c.timing.DB = end.Sub(start)
	cancel()
	c.err, c.lost = err, c.conn.Conn().IsClosed() // a panic is the program's fault, not the database's
	release(c.db.Pool, c.conn, whole)             // after a panic, what the connection holds is unknown
	if c.share != nil {
		c.share.give()
	}
	if m := meterOf(c.ctx); m != nil {
		m.add(c.timing.metered())
	}
	if !c.state.CompareAndSwap(running, finished) && c.db.Calls != nil {
		c.db.Calls.Outliving(-1)
	}
}

// release gives conn back to its pool — after a ROLLBACK when a failed
// statement (cut by its statement_timeout, or cancelled) left its
// transaction open — or, when it cannot be reused: not reuse (its work
// panicked), the database closed it, the ROLLBACK failed, or a cancel
// request of it went out unacknowledged and may still arrive, closes it,
// after the pool's BeforeClose hook, and takes it out of the pool, before
// it returns: the pool's slot is free for the next call at once, and never
// while the connection is still open, so the pool holds at most MaxConns
// connections. (pgxpool's own Release of such a connection does the same
// on a goroutine of its own, so the slot comes free some time after the
// call has returned.) Closing sends Terminate and closes the socket; it
// waits for nothing from the server. A pool with MinConns opens the
// replacement at its next health check.
func release(pool *pgxpool.Pool, conn *pgxpool.Conn, reuse bool) {
	raw := conn.Conn()
	pc := raw.PgConn()
	if reuse && !pc.IsClosed() && !pc.IsBusy() && usable(raw) && (pc.TxStatus() == 'I' || rolledBack(raw)) {
		conn.Release()
		return
	}
	if beforeClose := pool.Config().BeforeClose; beforeClose != nil {
		beforeClose(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	_ = raw.Close(ctx)
	cancel()
	conn.Hijack()
}

// rolledBack ends the transaction a failed statement left open on conn
// (one round trip, the simple protocol's) and reports whether conn is
// idle and usable again. A pool that closed such connections instead
// opened a backend, and loaded PostGIS in it, for every statement cut at
// its time.
func rolledBack(conn *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackWait)
	defer cancel()
	pc := conn.PgConn()
	_, err := pc.Exec(ctx, "ROLLBACK").ReadAll()
	return err == nil && !pc.IsClosed() && !pc.IsBusy() && pc.TxStatus() == 'I' && usable(conn)
}

// guard runs work and returns its error, or — when it panics (a Scan
// function's fault) — whole false and an error saying so: the call fails
// and its connection is closed, rather than the process ending, which a
// panic on the connection's goroutine would do.
func guard(work func() error) (whole bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			whole, err = false, fmt.Errorf("pgcall: a statement's work panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return true, work()
}

// closeWait bounds the close of a connection taken out of its pool, as
// pgxpool bounds its own; rollbackWait the ROLLBACK of a failed
// statement's transaction, past which the connection is closed instead.
const (
	closeWait    = 15 * time.Second
	rollbackWait = time.Second
)

// await returns the call's result once its work is done, or — when the
// call was cut (or its caller went away) and the backend has not stopped
// StopWait later — a Stopping error while the work goes on. A cancel
// request still unanswered by then is waited for (up to AckWait, never
// past the caller's deadline): a busy server acknowledges late, and its
// backend then has StopWait to stop, as after an acknowledgement in time.
func (c *call) await(ctx context.Context) (Timing, error) {
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
	}
	wait := StopWait
	if !c.answerBy.IsZero() {
		wait = max(min(wait, time.Until(c.answerBy)), 0)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.done:
		return c.result()
	case <-t.C:
	}
	// The cancellation waited on, as the wait left it, names the answer.
	cancelled := cancelNone
	if c.cancel != nil && !errors.Is(c.ctx.Err(), context.Canceled) {
		if cn := c.cancel.current(); cn != nil {
			if c.awaitCancel(cn, t) {
				return c.result()
			}
			cancelled = cn.status()
		}
	}
	if c.db.Calls != nil {
		c.db.Calls.Outliving(1)
	}
	if !c.state.CompareAndSwap(running, outliving) { // it finished just now
		if c.db.Calls != nil {
			c.db.Calls.Outliving(-1)
		}
		<-c.done
		return c.result()
	}
	return Timing{}, &Stopping{Err: c.stoppingErr(cancelled), done: c.done}
}

func (c *call) result() (Timing, error) {
	if c.err != nil {
		return c.timing, c.db.classify(c.ctx, c.err, c.lost)
	}
	c.db.observe(OK)
	return c.timing, nil
}

// awaitCancel waits, StopWait after the cut, for what the call's
// cancellation still owes: a cancel request's acknowledgement that has
// not come (a busy server's is late); StopWait after the acknowledgement
// for the backend it signalled; the result of a statement that ended as
// its request was dropped. Never past the caller's deadline (for which t,
// fired, is reused), nor once the caller has gone. It reports whether
// the work ended meanwhile.
func (c *call) awaitCancel(cn *cancellation, t *time.Timer) (ended bool) {
	var by <-chan time.Time
	if !c.answerBy.IsZero() {
		t.Reset(max(time.Until(c.answerBy), 0))
		by = t.C
	}
	gone := c.ctx.Done() // its deadline is answerBy; before it, the caller went
	if cn.status() == cancelPending {
		select {
		case <-c.done:
			return true
		case <-cn.answered:
		case <-by:
			return false
		case <-gone:
			return false
		}
	}
	var wait time.Duration
	switch cn.status() {
	case cancelAcked: // the backend has StopWait from when it was signalled
		wait = time.Until(cn.ackAt.Add(StopWait))
	case cancelDropped: // the statement ended: its result is on its way
		wait = StopWait
	}
	if wait <= 0 {
		return false
	}
	g := time.NewTimer(wait)
	defer g.Stop()
	select {
	case <-c.done:
		return true
	case <-g.C:
	case <-by:
	case <-gone:
	}
	return false
}

// stoppingErr names why a call answered before its backend stopped. A
// cancel request the server acknowledged means a live database whose
// backend ignores interrupts: a statement timeout; so does one not yet
// acknowledged when the caller's deadline came (a busy server's
// acknowledgement is late). Only a request not acknowledged within
// AckWait means a database that does not answer at all.
func (c *call) stoppingErr(cancelled int32) error {
	if errors.Is(c.ctx.Err(), context.Canceled) {
		return c.db.cancelled(context.Canceled)
	}
	if c.cancel == nil {
		return c.db.unavailable(errNoAnswer)
	}
	switch cancelled {
	case cancelNone:
		return c.db.timeout(errors.New("statement timeout: the call's time ran out before its statement was cancelled"))
	case cancelAcked:
		return c.db.timeout(errors.New("statement timeout: the backend did not stop when it was cancelled"))
	case cancelPending:
		return c.db.timeout(errors.New("statement timeout: the call's deadline came before the server acknowledged its cancel request"))
	case cancelDropped:
		return c.db.timeout(errors.New("statement timeout: the statement ended after the call's time to answer"))
	}
	return c.db.unavailable(errNoAnswer)
}
