// Package pgcall bounds how long a request waits on PostgreSQL, for the
// tiles and geofence stores alike: a database that is down, paused or out of
// connections gives an error (and so a 503) quickly, never a hang.
package pgcall

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// AnswerGrace is how long past its statement timeout a query may go
// unanswered before the client gives up on the database (PostgreSQL enforces
// the timeout itself; one that does not answer at all is paused or cut off).
const AnswerGrace = time.Second

// Acquire waits at most timeout (when positive) for a pooled connection.
func Acquire(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) (*pgxpool.Conn, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("no database connection within %s: %w", timeout, err)
	}
	return conn, nil
}

// AnswerDeadline bounds a transaction whose statements run under
// statementTimeout by that timeout plus AnswerGrace.
func AnswerDeadline(ctx context.Context, statementTimeout time.Duration) (context.Context, context.CancelFunc) {
	if statementTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, statementTimeout+AnswerGrace)
}
