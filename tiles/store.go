package tiles

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// Store renders MVT tiles in PostGIS.
type Store struct {
	pool *pgxpool.Pool
	// RetryAfter is the Retry-After (seconds) sent with a 503 when the
	// database timed out or could not be reached.
	RetryAfter int
	// AcquireTimeout, when positive, bounds the wait for a pooled
	// connection: a database that does not answer, or a pool whose every
	// connection is busy, gives a 503 after this instead of a hang.
	AcquireTimeout time.Duration
	// Observer, if set, times each layer's query.
	Observer Observer
}

// NewStore returns a Store reading through pool. The pool should connect as
// the read-only role that the migrations create.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, RetryAfter: 2} }

// Tile renders one tile with one MVT layer per entry of layers, in order,
// inside one read-only transaction with jit off, each layer's query under
// its own SET LOCAL statement_timeout (so a composite cannot lend a tight
// layer the slack of a loose one). The result may be empty (no
// features). ctx is the request's: a client that hangs up cancels the query.
//
// A statement timeout is a problem.Timeout (503 with Retry-After); an
// unreachable database is problem.Unavailable.
func (s *Store) Tile(ctx context.Context, layers []*Layer, t maptile.Tile) ([]byte, error) {
	if len(layers) == 0 {
		return nil, problem.Malformed("layer", "no layer")
	}
	timeout := time.Duration(0) // the whole transaction's: the layers run one after another
	for _, l := range layers {
		timeout += l.StatementTimeout
	}
	env := Envelope(t)
	var tile []byte
	conn, err := pgcall.Acquire(ctx, s.pool, s.AcquireTimeout)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	defer conn.Release()
	request := ctx
	// PostgreSQL enforces the statement timeout itself; one that does not
	// answer at all (paused, partitioned) is given up on shortly after.
	ctx, cancel := pgcall.AnswerDeadline(ctx, timeout)
	defer cancel()
	// The whole transaction is ONE batch, so one round trip: BEGIN READ
	// ONLY, jit off, then per layer SET LOCAL statement_timeout (as
	// set_config(…, true), with a bound value) and its query, then COMMIT.
	// If a statement fails, PostgreSQL skips the rest of the batch and the
	// connection is left in a failed transaction, which the pool discards
	// on Release rather than reuse.
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN READ ONLY`)
	batch.Queue(`SELECT set_config('jit', 'off', true)`)
	for _, l := range layers {
		batch.Queue(`SELECT set_config('statement_timeout', $1, true)`,
			strconv.FormatInt(l.StatementTimeout.Milliseconds(), 10))
		width := env.Max[0] - env.Min[0]
		bufferM := width * float64(l.Buffer) / float64(l.Extent)
		batch.Queue(l.sql, env.Min[0], env.Min[1], env.Max[0], env.Max[1],
			l.Extent, l.Buffer, bufferM, l.MaxFeatures, l.Name)
	}
	batch.Queue(`COMMIT`)
	err = func() error {
		br := conn.SendBatch(ctx, batch)
		defer br.Close()
		for range 2 { // BEGIN, jit
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		// PostgreSQL runs the batch's queries one after another, so the
		// time between two results is (close to) the later query's time.
		last := time.Now()
		for _, l := range layers {
			if _, err := br.Exec(); err != nil { // this layer's statement_timeout
				return err
			}
			var part []byte
			if err := br.QueryRow().Scan(&part); err != nil {
				return err
			}
			if s.Observer != nil {
				now := time.Now()
				s.Observer.TileQuery(l.Name, t.Z, now.Sub(last))
				last = now
			}
			// An MVT tile is a protobuf message whose only field is the
			// repeated layer, so concatenated layers are one valid tile.
			tile = append(tile, part...)
		}
		if _, err := br.Exec(); err != nil { // COMMIT
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return nil, s.classify(request, err)
	}
	return tile, nil
}

// Query-cancel SQLSTATE: statement_timeout and cancel requests alike.
const sqlstateQueryCanceled = "57014"

// classify turns a database error into a problem.
func (s *Store) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		// The client went away (or the server's write deadline passed): the
		// query was cancelled on purpose. Nobody reads this response.
		return &problem.Error{Code: problem.Unavailable, Detail: "request cancelled", Err: ctx.Err()}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateQueryCanceled {
		return &problem.Error{
			Code:       problem.Timeout,
			Detail:     "the tile query exceeded its time limit; try again later or at a higher zoom",
			RetryAfter: s.RetryAfter,
			Err:        err,
		}
	}
	if pgErr != nil {
		return problem.Wrap(fmt.Errorf("tile query: %w", err))
	}
	// No PgError: the connection could not be had or was lost.
	return &problem.Error{
		Code:       problem.Unavailable,
		Detail:     "the database is unavailable",
		RetryAfter: s.RetryAfter,
		Err:        err,
	}
}
