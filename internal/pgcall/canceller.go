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
// A connection whose cancel request went out and was never acknowledged
// may still be cancelled by it, late: the pool hands it out no more
// (cfg.PrepareConn destroys it on the next Acquire), and a call closes it
// as it ends (release) — within a transaction held across contexts it
// could still cancel one more statement. Each connection also runs its
// calls on a goroutine of its own, ended by cfg.BeforeClose. Both hooks
// are chained after those cfg has: set them before Configure, not after.
func Configure(cfg *pgxpool.Config, wait time.Duration) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		h := &canceller{conn: pc, wait: wait, race: raceDelay}
		pc.CustomData()[cancellerKey] = h
		return h
	}
	chainBeforeClose(cfg)
	chainPrepareConn(cfg)
}

// chainPrepareConn makes cfg's pool hand out no connection whose cancel
// request went out unacknowledged (a ping's on Acquire, or a call's whose
// connection went back to the pool): it is destroyed, and the pool tries
// another. (geotoll sets no other PrepareConn, nor the deprecated
// BeforeAcquire, which pgxpool ignores once PrepareConn is set.)
func chainPrepareConn(cfg *pgxpool.Config) {
	prev := cfg.PrepareConn
	cfg.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if !usable(c) {
			return false, nil
		}
		if prev != nil {
			return prev(ctx, c)
		}
		return true, nil
	}
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

// hangUpDelay is how long a statement whose caller went away may still
// finish on its own before it is cancelled. A cancel request costs the
// server a new connection (and, before PostgreSQL 18, the fork of a
// process), while most tile and geofence statements end within a few
// milliseconds; a longer one keeps running at most this much longer. A
// call cut by its deadline is cancelled at once: its time is up.
const hangUpDelay = 50 * time.Millisecond

// raceDelay is how long a connection whose statement ended as its cancel
// request went out waits before it is used again: the request may still be
// on its way to the backend and would cancel the next statement (pgconn's
// CancelRequestContextWatcherHandler does the same). Read as a connection
// is made; a variable for tests alone.
var raceDelay = 100 * time.Millisecond

// canceller is the ctxwatch.Handler of a Configure'd connection. pgconn
// calls HandleCancel when the context of a running operation ends and
// HandleUnwatchAfterCancel when the operation returns (the backend
// answered, or the socket deadline set here passed).
type canceller struct {
	conn *pgconn.PgConn
	wait time.Duration
	race time.Duration // raceDelay

	// answered is when the backend answered the call's last cancelled
	// operation (zero: none since the call began). The connection is held
	// race longer, and that wait is no database time.
	answered time.Time

	// cur is the call's last cancellation (nil: none since the call
	// began, reset).
	cur atomic.Pointer[cancellation]
	// stale: a cancel request went out that the server never acknowledged.
	// It may still reach the backend, late, and cancel whatever runs then:
	// the connection is not used again (Configure's PrepareConn, release).
	stale    atomic.Bool
	stop     context.CancelFunc
	finished chan struct{}
}

// cancellation is one cancellation of a connection's operation: its state
// and, once the server acknowledged its request, when.
type cancellation struct {
	state    atomic.Int32
	ackAt    time.Time     // written before state becomes cancelAcked
	answered chan struct{} // closed once state leaves cancelPending
}

// States of a cancellation.
const (
	cancelNone    int32 = iota // no cancellation (a call's, while none came)
	cancelPending              // its request is out (or about to go), unanswered
	cancelAcked                // the server acknowledged it: a live server
	cancelSilent               // not acknowledged within AckWait: the connection is given up
	cancelDropped              // not sent, or abandoned: the statement ended first (for a caller gone, and AckWait passed)
)

func (cn *cancellation) status() int32 { return cn.state.Load() }

func (cn *cancellation) settle(state int32) { // once
	cn.state.Store(state)
	close(cn.answered)
}

func cancellerOf(conn *pgx.Conn) *canceller {
	h, _ := conn.PgConn().CustomData()[cancellerKey].(*canceller)
	return h
}

func (h *canceller) HandleCancel(ctx context.Context) {
	deadline := time.Now().Add(h.wait)
	_ = h.conn.Conn().SetDeadline(deadline) // the last resort
	delay, gone := hangUpDelay, true
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		delay, gone = 0, false
	}
	// Not the operation's context (it has ended): the cancellation's own,
	// ended by HandleUnwatchAfterCancel or the deadline.
	sctx, stop := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	h.stop, h.finished = stop, make(chan struct{})
	cn := &cancellation{answered: make(chan struct{})}
	cn.state.Store(cancelPending)
	h.cur.Store(cn)
	go func() {
		defer close(h.finished)
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-sctx.Done(): // the statement ended first
			cn.settle(cancelDropped)
			return
		case <-t.C:
		}
		// A caller cut by its deadline may still be waiting for the
		// statement's answer, which no acknowledgement may delay: its
		// request is abandoned when the statement ends (below). Nobody
		// waits for the answer of a caller that went away: its request,
		// once sent, is waited for to its acknowledgement even when the
		// statement ends meanwhile — as the request itself most often makes
		// it end: the server signals the backend and then closes the
		// request's connection, and the backend's answer can come first.
		// Acknowledged, it has reached the backend, which ignores it once
		// idle, and the connection serves on: a map panning off its tiles
		// closed a connection (and the pool opened a backend and loaded
		// PostGIS) for most tiles it abandoned.
		parent, ackBy := sctx, time.Now().Add(AckWait)
		if gone {
			parent = context.WithoutCancel(sctx)
			if deadline.Before(ackBy) {
				ackBy = deadline
			}
		}
		actx, cancel := context.WithDeadline(parent, ackBy)
		err := h.conn.CancelRequest(actx)
		ran := actx.Err() // before cancel
		cancel()
		// The server closes the request's connection once it has signalled
		// the backend; a request still unanswered after AckWait reached no
		// live server: give up on the connection now. One abandoned because
		// the statement ended (HandleUnwatchAfterCancel) tells nothing of
		// the server — but may still reach it.
		state := cancelSilent
		switch {
		case err == nil && ran == nil:
			state = cancelAcked
			cn.ackAt = time.Now()
		case errors.Is(sctx.Err(), context.Canceled):
			state = cancelDropped
		}
		cn.settle(state)
		if state != cancelAcked {
			h.stale.Store(true)
			_ = h.conn.Conn().SetDeadline(time.Now())
			return
		}
		time.Sleep(h.race)
	}()
}

func (h *canceller) HandleUnwatchAfterCancel() {
	h.answered = time.Now()
	h.stop()
	<-h.finished
	_ = h.conn.Conn().SetDeadline(time.Time{})
}

// reset forgets the cancellations of the connection's earlier calls, as a
// call begins (each earlier one's goroutine is over:
// HandleUnwatchAfterCancel waited for it).
func (h *canceller) reset() {
	h.cur.Store(nil)
	h.answered = time.Time{}
}

// answeredAt is when the backend answered the call's last cancelled
// operation, zero when none was cancelled. Read on the connection's
// goroutine, after the operation returned.
func (h *canceller) answeredAt() time.Time { return h.answered }

// current is the call's last cancellation, nil when there was none.
func (h *canceller) current() *cancellation { return h.cur.Load() }

// usable reports whether conn may run another statement: not when a
// cancel request of it went out unacknowledged.
func usable(conn *pgx.Conn) bool {
	h := cancellerOf(conn)
	return h == nil || !h.stale.Load()
}
