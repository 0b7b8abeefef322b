package pgcall

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/problem"
)

// AnswerGrace is how long past its statements' timeouts a call may go
// unanswered before the client cuts it. PostgreSQL enforces
// statement_timeout itself, so a call still unanswered by then is a
// statement that does not look at interrupts, or a database that does not
// answer at all (paused, partitioned).
const AnswerGrace = 500 * time.Millisecond

// StopWait is how long a cut call waits for its backend to stop before it
// answers without it, after its cancel request went out (or, when the
// server acknowledged it late, after that). A backend that looks at
// interrupts stops within a few milliseconds of being signalled; one that
// has not stopped by then ignores them.
const StopWait = 250 * time.Millisecond

// AckWait is how long a cancel request may go unacknowledged before its
// connection gives up on the server as one that answers nothing (paused,
// partitioned). A live server whose CPUs are all busy acknowledges late:
// it forks the request's process after its running backends' turns
// (BenchmarkCancelAcknowledgement, 2 cores: a median of 140–150 ms and up
// to 270 ms with 16 CPU-bound backends, 270–460 ms and up to 870 ms with
// 32) — and that is when stuck statements pile up. A call whose cancel
// request is still unanswered StopWait after its cut waits for the answer
// (never past its caller's deadline): acknowledged, its backend then has
// StopWait to stop; not acknowledged within AckWait, the call answers
// unavailable and its connection is closed. A call whose deadline comes
// first answers a statement timeout (the server has not been found
// silent), its connection still waiting for the acknowledgement.
const AckWait = time.Second

// Statement is one statement of a guarded read.
type Statement struct {
	SQL  string
	Args []any
	// Timeout is the statement's statement_timeout. It is shortened to
	// what the statements before it left of the read's time (see Read)
	// and to what is left before the call is cut, and is at least 1 ms.
	Timeout time.Duration
	// Scan reads the statement's rows; nil discards them. It runs on
	// another goroutine and may still be running after Read has returned
	// an error: it must write only what the caller reads after a Read that
	// succeeded.
	Scan func(pgx.Rows) error
}

// Timing is the database time of a call: by the client's clock (DB) and,
// for a read that got that far, by PostgreSQL's (Server).
type Timing struct {
	// DB runs from sending the call to receiving its last answer (for a
	// cancelled call: until the backend answered the cancellation).
	DB time.Duration
	// Server is a Read's time as PostgreSQL saw it, from BEGIN to the end
	// of its last statement (clock_timestamp() − now(), read in the same
	// batch): the database's own time, without the round trip and the
	// scheduling of either side; plus, on a connection's first use of a
	// statement, the round trip that prepares it before BEGIN (where it
	// waits for a table another transaction locks). Zero when the read did
	// not get that far.
	Server time.Duration
	// Statements are a Read's times per statement, in order: each from the
	// previous statement's last result (the first from sending the batch)
	// to its own.
	Statements []time.Duration
}

// Outcomes of a call, as Observer.Call receives them.
const (
	OK               = "ok"
	StatementTimeout = "statement-timeout" // cut by statement_timeout, or not stopping when cancelled
	Cancelled        = "cancelled"         // the caller went away
	Unavailable      = "unavailable"       // no connection, connection lost, or no answer at all
	Busy             = "busy"              // no connection free in time: the pool (or the caller's share of it) in use, the database up
	Failed           = "error"             // any other database error
)

// Observer receives a DB's measurements. Its methods must be cheap and safe
// for concurrent use. Its signature names no type of this package, so that
// the stores can take one in an exported field.
type Observer interface {
	// Call counts one call by outcome (OK, StatementTimeout, …).
	Call(outcome string)
	// Outliving moves, by delta, the number of statements still running
	// after their call answered.
	Outliving(delta int)
}

// DB is a pool with the rules for calling it on a request's behalf. Its
// zero value is not usable: Pool is required.
type DB struct {
	Pool *pgxpool.Pool
	// AcquireTimeout, when positive, bounds the wait for a pooled
	// connection: a database that does not answer, or a pool whose every
	// connection is busy, gives a 503 after this instead of a hang.
	AcquireTimeout time.Duration
	// RetryAfter is the Retry-After (seconds) of a 503 from the database.
	RetryAfter int
	// TimeoutDetail is the problem detail of a statement timeout.
	TimeoutDetail string
	// Calls, if set, counts calls by outcome.
	Calls Observer
	// ReadSettings, when set, is the statement Read sends after BEGIN to
	// set the transaction's settings (SET LOCAL, as set_config(…, true));
	// it must turn jit off itself. Default: jit off.
	ReadSettings string
}

const (
	settingsSQL = `SELECT set_config('statement_timeout', $1, true), set_config('jit', 'off', true)`
	// timeoutSQL sets the next statement's statement_timeout to the least
	// of its own ($1, ms) and what is left of the read's ($2, ms, counted
	// from the transaction's start: now(); NULL when the statements' own
	// timeouts are the read's), at least 1 ms (0 would turn the timeout
	// off). PostgreSQL evaluates it as the statement is about to run, so
	// each statement gets what the ones before it left.
	timeoutSQL = `SELECT set_config('statement_timeout',
		greatest(1, least($1::bigint, $2::bigint - (extract(epoch FROM clock_timestamp() - now()) * 1000)::bigint))::text, true)`
	jitOffSQL    = `SELECT set_config('jit', 'off', true)`
	serverSQL    = `SELECT (extract(epoch FROM clock_timestamp() - now()) * 1e6)::bigint`
	canceledCode = "57014" // SQLSTATE of statement_timeout and cancel requests alike
	lockCode     = "55P03" // lock_not_available: lock_timeout ran out
)

// Read runs stmts in one READ ONLY transaction with jit off, sent as one
// batch: one round trip. The read as a whole may take the sum of its
// statements' timeouts, or the context's Budget if that is less; each
// statement runs under a SET LOCAL statement_timeout of its own Timeout or
// what the statements before it left of the read's, whichever is less.
// If a statement fails, PostgreSQL skips the rest of the batch; the
// connection, left in a failed transaction, is rolled back and reused
// (release), or closed when that fails or a cancel request of it may
// still arrive.
func (db *DB) Read(ctx context.Context, stmts ...Statement) (Timing, error) {
	if len(stmts) == 0 {
		return Timing{}, problem.Wrap(errors.New("pgcall: a read without statements"))
	}
	var sum time.Duration
	for _, s := range stmts {
		sum += s.Timeout
	}
	budget := capped(ctx, sum) // the whole read runs under at most what was paid for
	return db.call(ctx, budget, func(ctx context.Context, conn *pgx.Conn, cut time.Time, t *Timing) error {
		limits := readLimits{each: make([]time.Duration, len(stmts))}
		var read any // what the whole read may take, when less than its statements' timeouts
		if r := clip(budget, cut); r < sum {
			read, limits.read = r.Milliseconds(), r.Truncate(time.Millisecond)
		}
		settings := jitOffSQL
		if db.ReadSettings != "" {
			settings = db.ReadSettings
		}
		batch := &pgx.Batch{}
		batch.Queue(`BEGIN READ ONLY`)
		batch.Queue(settings)
		for i, s := range stmts {
			limits.each[i] = clip(s.Timeout, cut).Truncate(time.Millisecond)
			batch.Queue(timeoutSQL, limits.each[i].Milliseconds(), read)
			batch.Queue(s.SQL, s.Args...)
		}
		batch.Queue(serverSQL)
		batch.Queue(`COMMIT`)
		return readBatch(ctx, conn, batch, stmts, limits, t)
	})
}

// readLimits are the time limits a read's batch sets, as timeoutSQL
// computes them: each statement's own, and the whole read's (0: none but
// theirs).
type readLimits struct {
	each []time.Duration
	read time.Duration
}

// errTimeLimit marks the error of a statement that ended once its
// statement_timeout had run out. PostGIS reports a GEOS call that the
// timeout interrupts as an exception GEOS threw (internal_error, "GEOS
// isvaliddetail() threw an exception!"), not as a cancel (57014): only
// the time tells the two apart.
var errTimeLimit = errors.New("ended at its statement_timeout")

// atLimit marks err with errTimeLimit when statement i ran for its limit:
// when at least that long passed since began, what the client knows of
// its start (the batch's sending for the first, the result before it for
// the others) — a statement the server cut at its limit has run at least
// that long since then, while one that failed within it may look longer
// only by the round trip. sent is when the batch was sent (its prepare
// done), from which the whole read's limit counts.
func (l readLimits) atLimit(err error, i int, sent, began time.Time) error {
	limit := l.each[i]
	if l.read > 0 {
		limit = min(limit, l.read-began.Sub(sent))
	}
	if time.Since(began) < limit {
		return err
	}
	return fmt.Errorf("%w (%w)", err, errTimeLimit)
}

func readBatch(ctx context.Context, conn *pgx.Conn, batch *pgx.Batch, stmts []Statement, limits readLimits, t *Timing) error {
	t.Statements = make([]time.Duration, len(stmts))
	start := time.Now()
	last := start
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	// SendBatch returns once the batch is written, after preparing first
	// the statements the connection has not prepared yet: a round trip of
	// the database's, before the transaction (and now()) began, that
	// waits for the statements' tables as they would. No statement_timeout
	// runs during it: the statements' limits count from sent.
	sent := time.Now()
	prepared, began := sent.Sub(start), sent
	for range 2 { // BEGIN, jit
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	for i, s := range stmts {
		if _, err := br.Exec(); err != nil { // its statement_timeout
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return limits.atLimit(err, i, sent, began)
		}
		if s.Scan != nil {
			err = s.Scan(rows)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return limits.atLimit(err, i, sent, began)
		}
		// PostgreSQL runs the batch's statements one after another, so the
		// time between two results is (close to) the later one's.
		now := time.Now()
		t.Statements[i], last, began = now.Sub(last), now, now
	}
	var us int64
	if err := br.QueryRow().Scan(&us); err != nil { // serverSQL
		return err
	}
	// The batch's transaction may have begun before SendBatch returned:
	// never more than the client saw pass.
	t.Server = min(time.Duration(max(us, 1))*time.Microsecond+prepared, time.Since(start))
	if _, err := br.Exec(); err != nil { // COMMIT
		return err
	}
	return br.Close()
}

// Write runs fn in a read-write transaction whose first statement sets
// statement_timeout (timeout) and jit off locally. fn runs at most n
// statements: the call is cut n × timeout + AnswerGrace after it starts.
// fn runs on another goroutine, like Statement.Scan. An error fn returns
// that is a *problem.Error (a 404, a 422) passes through unchanged.
func (db *DB) Write(ctx context.Context, timeout time.Duration, n int, fn func(context.Context, pgx.Tx) error) error {
	_, err := db.call(ctx, time.Duration(n)*timeout, func(ctx context.Context, conn *pgx.Conn, cut time.Time, _ *Timing) error {
		return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, settingsSQL, millis(clip(timeout, cut))); err != nil {
				return err
			}
			return fn(ctx, tx)
		})
	})
	return err
}

// One returns a Scan that reads the first row into dest; no row at all is
// pgx.ErrNoRows, which Read returns unchanged.
func One(dest ...any) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return pgx.ErrNoRows
		}
		return rows.Scan(dest...)
	}
}

// cutMargin is how much earlier than the client PostgreSQL cuts a
// statement whose timeout was shortened to fit the call's deadline: time
// for the answer to travel.
const cutMargin = 50 * time.Millisecond

// clip shortens a statement timeout so that PostgreSQL cuts the statement
// before the client would: cutMargin before, or a quarter of the time left
// if that is less.
func clip(d time.Duration, cut time.Time) time.Duration {
	left := time.Until(cut)
	return max(min(d, left-min(cutMargin, left/4)), time.Millisecond)
}

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func (db *DB) acquire(ctx context.Context, share *Share) (*pgxpool.Conn, error) {
	if db.AcquireTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, db.AcquireTimeout)
		defer cancel()
	}
	if share != nil {
		if err := share.take(ctx); err != nil {
			return nil, fmt.Errorf("no database connection within %s: %w (all %d in use)", db.AcquireTimeout, err, share.Size())
		}
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		if share != nil {
			share.give()
		}
		if s := db.Pool.Stat(); s.AcquiredConns() >= s.MaxConns() {
			// A live database whose every connection works (or waits for
			// a statement that ignores cancellation): no outage.
			return nil, fmt.Errorf("no database connection within %s: %w (all %d in use): %w", db.AcquireTimeout, errBusy, s.MaxConns(), err)
		}
		return nil, fmt.Errorf("no database connection within %s: %w", db.AcquireTimeout, err)
	}
	return conn, nil
}

var errBusy = errors.New("every connection of the pool is busy")

// busy reports whether an acquire failed for want of a free connection of
// a live database: the pool's, or a share's.
func busy(err error) bool {
	return errors.Is(err, errBusy) || errors.Is(err, errShareBusy) || errors.Is(err, errOwnShareBusy)
}

func (db *DB) observe(o string) {
	if db.Calls != nil {
		db.Calls.Call(o)
	}
}

// classify turns the error of a finished call into a problem. lost reports
// that the connection was closed (unreachable, or given up on).
func (db *DB) classify(ctx context.Context, err error, lost bool) error {
	var (
		p     *problem.Error
		pgErr *pgconn.PgError
	)
	switch {
	case errors.As(err, &p), errors.Is(err, pgx.ErrNoRows):
		// The caller's own answer (a 404, a 422, no row): the database did
		// its part.
		db.observe(OK)
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		return db.cancelled(err)
	case errors.As(err, &pgErr) && pgErr.Code == canceledCode:
		return db.timeout(err)
	case pgErr != nil && pgErr.Code == lockCode:
		// Another transaction holds what this one writes (lock_timeout):
		// the same request succeeds once that one ends.
		db.observe(Failed)
		return &problem.Error{Code: problem.Unavailable, Detail: "another write holds the same data; try again",
			RetryAfter: db.RetryAfter, Err: err}
	case pgErr != nil && misfits(pgErr):
		db.observe(Failed)
		return &problem.Error{Code: problem.Unavailable, Detail: "the database does not match the configuration: " + pgErr.Message,
			RetryAfter: db.RetryAfter, Err: err}
	case pgErr != nil && pgErr.Code == "XX000" && strings.Contains(pgErr.Message, "GEOS") && errors.Is(err, errTimeLimit):
		// GEOS threw when the statement's time limit interrupted it.
		return db.timeout(err)
	case pgErr != nil && pgErr.Code == "XX000" && strings.Contains(pgErr.Message, "GEOS"):
		// PostGIS's geometry engine failed on a row (a TopologyException
		// on an invalid geometry), or threw when interrupted by a limit
		// the call could not see (a write's): the data's, not geotoll's.
		db.observe(Failed)
		return &problem.Error{Code: problem.Unavailable, Detail: "the database's geometry engine (GEOS) failed on this data, or was stopped at the time limit: " + pgErr.Message,
			RetryAfter: db.RetryAfter, Err: err}
	case pgErr != nil:
		db.observe(Failed)
		return problem.Wrap(fmt.Errorf("database: %w", err))
	case lost:
		return db.unavailable(err)
	case errors.Is(err, context.DeadlineExceeded):
		return db.timeout(err)
	}
	db.observe(Failed)
	return problem.Wrap(fmt.Errorf("database: %w", err))
}

// cancelled is the problem of a call whose caller went away: nobody reads
// it, so it is neither a timeout nor an outage.
func (db *DB) cancelled(err error) *problem.Error {
	db.observe(Cancelled)
	return &problem.Error{Code: problem.Unavailable, Detail: "request cancelled", Err: err}
}

func (db *DB) timeout(err error) *problem.Error {
	db.observe(StatementTimeout)
	detail := db.TimeoutDetail
	if detail == "" {
		detail = "the query exceeded its time limit; try again later"
	}
	return &problem.Error{Code: problem.Timeout, Detail: detail, RetryAfter: db.RetryAfter, Err: err}
}

func (db *DB) unavailable(err error) *problem.Error {
	outcome, detail := Unavailable, "the database is unavailable"
	switch {
	case errors.Is(err, errShareBusy):
		outcome, detail = Busy, "the database connections shared by callers without an API key are all busy; try again later, or use an API key"
	case errors.Is(err, errOwnShareBusy):
		outcome, detail = Busy, "this API key's statements already use every database connection it may hold at once (database.key_max_conns); try again later"
	case errors.Is(err, errBusy):
		outcome, detail = Busy, "every database connection is busy; try again later"
	}
	db.observe(outcome)
	return &problem.Error{Code: problem.Unavailable, Detail: detail, RetryAfter: db.RetryAfter, Err: err}
}
