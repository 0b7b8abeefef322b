package pgcall

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Configure makes the connections of cfg answer a cancelled context with a
// PostgreSQL cancel request while they keep waiting for the backend's
// answer, instead of pgx's default of closing the socket — which frees the
// pool slot at once while the backend runs on. A connection gives up on
// its backend (closes the socket) after wait at most, and at once when the
// server does not acknowledge the cancel request within AckWait: a
// database that does not answer at all (paused, partitioned) stops nothing
// by being waited for, and a ping or a pool's Acquire must not hang on it.
// Each connection also runs its calls on a goroutine of its own, ended by
// cfg.BeforeClose (chained after the hook cfg has): set that hook before
// Configure, not after.
func Configure(cfg *pgxpool.Config, wait time.Duration) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		h := &canceller{conn: pc, wait: wait}
		pc.CustomData()[cancellerKey] = h
		return h
	}
	chainBeforeClose(cfg)
}

const cancellerKey = "geotoll/pgcall.canceller"

// CloseOnCancel gives cc pgx's default reaction to a cancelled context —
// close the socket at once — for a connection of its own that waits on the
// server with no statement running (a LISTEN, a readiness ping), where a
// cancel request would stop nothing and the wait would last until the
// server next speaks.
func CloseOnCancel(cc *pgx.ConnConfig) {
	cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
}

// Delays of a cancellation.
const (
	// hangUpDelay is how long a statement whose caller went away may still
	// finish on its own before it is cancelled. A cancel request costs the
	// server a new connection (and, before PostgreSQL 18, the fork of a
	// process), while most tile and geofence statements end within a few
	// milliseconds; a longer one keeps running at most this much longer. A
	// call cut by its deadline is cancelled at once: its time is up.
	hangUpDelay = 50 * time.Millisecond
	// raceDelay is how long a connection whose statement ended as its
	// cancel request went out waits before it is used again: the request
	// may still be on its way to the backend and would cancel the next
	// statement (pgconn's CancelRequestContextWatcherHandler does the same).
	raceDelay = 100 * time.Millisecond
)

// canceller is the ctxwatch.Handler of a Configure'd connection. pgconn
// calls HandleCancel when the context of a running operation ends and
// HandleUnwatchAfterCancel when the operation returns (the backend
// answered, or the socket deadline set here passed).
type canceller struct {
	conn *pgconn.PgConn
	wait time.Duration

	// state is the last cancellation's since the connection's call began
	// (reset); answered is closed once it leaves cancelPending.
	state    atomic.Int32
	answered atomic.Pointer[chan struct{}]
	stop     context.CancelFunc
	finished chan struct{}
}

// States of a connection's last cancellation, as its call reads them.
const (
	cancelNone    int32 = iota // none since the call began
	cancelPending              // its request is out (or about to go), unanswered
	cancelAcked                // the server acknowledged it: a live server
	cancelSilent               // not acknowledged within AckWait: the connection is given up
	cancelDropped              // not sent, or abandoned: the statement ended first
)

func cancellerOf(conn *pgx.Conn) *canceller {
	h, _ := conn.PgConn().CustomData()[cancellerKey].(*canceller)
	return h
}

func (h *canceller) HandleCancel(ctx context.Context) {
	deadline := time.Now().Add(h.wait)
	_ = h.conn.Conn().SetDeadline(deadline) // the last resort
	delay := hangUpDelay
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		delay = 0
	}
	// Not the operation's context (it has ended): the cancellation's own,
	// ended by HandleUnwatchAfterCancel or the deadline.
	sctx, stop := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	h.stop, h.finished = stop, make(chan struct{})
	answered := make(chan struct{})
	h.state.Store(cancelPending)
	h.answered.Store(&answered)
	settle := func(state int32) { // once
		h.state.Store(state)
		close(answered)
	}
	go func() {
		defer close(h.finished)
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-sctx.Done(): // the statement ended first
			settle(cancelDropped)
			return
		case <-t.C:
		}
		actx, cancel := context.WithTimeout(sctx, AckWait)
		err := h.conn.CancelRequest(actx)
		ran := actx.Err() // before cancel
		cancel()
		// The server closes the request's connection once it has signalled
		// the backend; a request still unanswered after AckWait reached no
		// live server: give up on the connection now. One abandoned because
		// the statement ended (HandleUnwatchAfterCancel) tells nothing.
		switch {
		case err == nil && ran == nil:
			settle(cancelAcked)
		case errors.Is(sctx.Err(), context.Canceled):
			settle(cancelDropped)
		default:
			settle(cancelSilent)
		}
		if h.state.Load() != cancelAcked {
			_ = h.conn.Conn().SetDeadline(time.Now())
			return
		}
		time.Sleep(raceDelay)
	}()
}

func (h *canceller) HandleUnwatchAfterCancel() {
	h.stop()
	<-h.finished
	_ = h.conn.Conn().SetDeadline(time.Time{})
}

// reset forgets the cancellations of the connection's earlier calls: a
// call's own begin with its work (each earlier one's goroutine is over,
// HandleUnwatchAfterCancel waited for it).
func (h *canceller) reset() {
	h.state.Store(cancelNone)
	h.answered.Store(nil)
}

// status is the state of the call's last cancellation.
func (h *canceller) status() int32 { return h.state.Load() }

// requestAnswered is closed once the call's last cancellation leaves
// cancelPending (closed already when there was none).
func (h *canceller) requestAnswered() <-chan struct{} {
	if p := h.answered.Load(); p != nil {
		return *p
	}
	return closed
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
