package apikeys

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/pgcall"
)

// Channel is the PostgreSQL notification channel on which every change to
// geotoll.api_keys is announced (a trigger, migration 00005), once per
// committed statement, with an empty payload.
const Channel = "geotoll_api_keys"

// Connect opens a connection of its own — not one of the pool's — with the
// pool's settings, for Ring.Connect: a LISTEN holds its connection for as
// long as it listens.
func (s *Store) Connect(ctx context.Context) (*pgx.Conn, error) {
	cc := s.pool.Config().ConnConfig.Copy()
	// A LISTEN waits on the server with no statement running: a cancelled
	// wait must close the socket, not send a cancel request and wait on.
	pgcall.CloseOnCancel(cc)
	return pgx.ConnectConfig(ctx, cc)
}

// Backoff bounds of the listener's reconnects.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 10 * time.Second
	// listenHeartbeat is the longest the listener waits for a notification
	// before it pings its connection: a database that vanished without a
	// word (paused, partitioned) is noticed within it.
	listenHeartbeat = 30 * time.Second
)

// listen keeps a LISTEN on Channel open through Connect until ctx ends,
// sending on changed (without blocking: one pending reload covers any
// number of changes) after every notification and after every (re)connect,
// which may have missed some. A lost connection is retried with backoff;
// meanwhile Run's periodic reload is the fallback.
func (r *Ring) listen(ctx context.Context, changed chan<- struct{}) {
	retry := listenRetryMin
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, changed, func() { retry = listenRetryMin })
		r.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		r.logger().Warn("API key change notifications lost; reconnecting (keys still reload every interval)",
			"err", err, "retry_in", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, listenRetryMax)
	}
}

// listenOnce connects, listens and forwards notifications until the
// connection fails. listening runs once the LISTEN is in place.
func (r *Ring) listenOnce(ctx context.Context, changed chan<- struct{}, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	conn, err := r.Connect(cctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	r.listening.Store(true)
	signal(changed) // changes made while nobody listened
	for {
		wctx, cancel := context.WithTimeout(ctx, min(r.Interval, listenHeartbeat))
		_, err := conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			signal(changed)
		case ctx.Err() != nil:
			return ctx.Err()
		case timedOut: // quiet: is the connection still there?
			pctx, cancel := context.WithTimeout(ctx, r.timeout())
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("heartbeat: %w", err)
			}
		default:
			return fmt.Errorf("wait: %w", err)
		}
	}
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
