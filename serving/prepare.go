package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/tiles"
)

// Options configure Prepare. Zero fields take the defaults.
type Options struct {
	// ReaderRole serves the tiles (default DefaultReaderRole): every
	// relation built is granted to it, and built only from a table whose
	// copied columns it may read itself.
	ReaderRole string
	// Force rebuilds storage that is current.
	Force bool
	// Builders to run (default Builders()).
	Builders []Builder
	// WorkMem is the build transaction's work_mem (default "256MB"):
	// clustering sorts the whole table once.
	WorkMem string
	// LockTimeout bounds each attempt to take the locks of a swap
	// (default 50ms): while the swap waits for tile queries reading the
	// old relations to end, new ones queue behind it, so it must stay
	// well below the shortest statement timeout a tile query runs under
	// (the toll's timeout floor, 250 ms by default; the read role's
	// lock_timeout is 1s). SwapAttempts (default 200) attempts are made,
	// with a growing pause between them (at most 1 s): a swap waits for
	// a gap between slow readers rather than stall the fast ones.
	LockTimeout  time.Duration
	SwapAttempts int
	Logger       *slog.Logger
}

// DefaultReaderRole is the read role the migrations create.
const DefaultReaderRole = "geotoll_reader"

func (o Options) withDefaults() Options {
	if o.ReaderRole == "" {
		o.ReaderRole = DefaultReaderRole
	}
	if o.Builders == nil {
		o.Builders = Builders()
	}
	if o.WorkMem == "" {
		o.WorkMem = "256MB"
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 50 * time.Millisecond
	}
	if o.SwapAttempts <= 0 {
		o.SwapAttempts = 200
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Status is what Prepare did for one layer and builder.
type Status string

// Statuses of a Result.
const (
	Built     Status = "built"     // built and swapped in
	Unchanged Status = "unchanged" // current: its checked_at renewed
	Removed   Status = "removed"   // no longer configured: dropped
	Skipped   Status = "skipped"   // nothing to build, or another run holds the layer
	Failed    Status = "failed"    // see Err; what was served before is served still
)

// Result is the outcome for one layer and builder.
type Result struct {
	Layer, Builder string
	Status         Status
	Relations      int   // relations built (or current)
	Rows           int64 // their rows
	SourceRows     int64 // rows of the layer's table
	Repaired       int64 // source rows the build repaired (Job.Repaired); 0 unless built
	Took           time.Duration
	Err            error
}

// Prepare brings the serving storage of every layer up to date through
// pool, which must connect as the owner of schema geotoll_serving (the
// schema owner that runs the migrations). For each layer and builder it
// compares what the builder would build (its Targets) and the source
// table's change detector with the registry: when they match it renews
// checked_at and builds nothing; otherwise it builds every target into a
// new table and swaps them in (see swap). Layers are independent: one
// failing is reported in its Result and the others go on.
func Prepare(ctx context.Context, pool *pgxpool.Pool, layers []*tiles.Layer, o Options) []Result {
	o = o.withDefaults()
	var out []Result
	for _, l := range layers {
		out = append(out, prepareLayer(ctx, pool, l, o)...)
	}
	return out
}

func prepareLayer(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, o Options) []Result {
	fail := func(err error) []Result {
		return []Result{{Layer: l.Name, Status: Failed, Err: err}}
	}
	kind := l.GeometryKind
	if kind == "" {
		var err error
		if kind, err = l.ReadKind(ctx, pool); err != nil {
			return fail(err)
		}
	}
	existing, err := tiles.LoadStorage(ctx, pool)
	if err != nil {
		return fail(err)
	}
	var out []Result
	for _, b := range o.Builders {
		start := time.Now()
		r := Result{Layer: l.Name, Builder: b.Name()}
		var rows []tiles.Storage
		for _, e := range existing {
			if e.Layer == l.Name && e.Builder == b.Name() {
				rows = append(rows, e)
			}
		}
		targets := b.Targets(l, kind)
		switch {
		case len(targets) == 0 && len(rows) == 0:
			r.Status = Skipped
		case len(targets) == 0:
			r.Status, r.Err = Removed, remove(ctx, pool, l, b.Name(), o)
		default:
			r = build(ctx, pool, l, kind, b, targets, rows, o)
		}
		if r.Err != nil {
			r.Status = Failed
		}
		r.Took = time.Since(start)
		o.Logger.LogAttrs(ctx, level(r), "prepare", slog.String("layer", r.Layer), slog.String("builder", r.Builder),
			slog.String("status", string(r.Status)), slog.Int("relations", r.Relations), slog.Int64("rows", r.Rows),
			slog.Int64("source_rows", r.SourceRows), slog.Int64("repaired", r.Repaired), slog.Duration("took", r.Took), slog.Any("err", r.Err))
		out = append(out, r)
	}
	return out
}

func level(r Result) slog.Level {
	if r.Err != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}

// build checks whether the targets are current and, unless they are (or
// Force), builds and swaps them in, in one REPEATABLE READ transaction:
// the change detector recorded is the one of the snapshot the build read.
func build(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, kind tiles.Kind, b Builder, targets []Target, rows []tiles.Storage, o Options) Result {
	r := Result{Layer: l.Name, Builder: b.Name()}
	cols := append(l.Columns(), l.GeometryColumn)
	src, err := inspect(ctx, pool, l, o.ReaderRole, cols)
	if err != nil {
		r.Err = err
		return r
	}
	if !src.readable {
		r.Err = fmt.Errorf("role %s may not read every column of %s that the storage would copy (%s): refusing to expose them",
			o.ReaderRole, l.TableIdent().Sanitize(), strings.Join(cols, ", "))
		return r
	}
	if !o.Force {
		if err := sign(ctx, pool, l, &src); err != nil {
			r.Err = err
			return r
		}
		r.SourceRows = src.rows
		if current(rows, targets, src.signature) {
			_, err := pool.Exec(ctx, registryTouchSQL, l.Name, b.Name())
			r.Status, r.Relations, r.Err = Unchanged, len(targets), err
			return r
		}
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		held, err := lockLayer(ctx, tx, l.Name)
		if err != nil || !held {
			r.Status = Skipped
			return err
		}
		// synchronous_commit off: the commit releases the swap's locks
		// without waiting for its WAL to reach the disk, so tiles queued
		// behind the swap do not wait for an fsync on a busy machine; a
		// crash can lose the last build (never half of it), and the next
		// run builds it again.
		if _, err := tx.Exec(ctx, `SELECT set_config('work_mem', $1, true), set_config('synchronous_commit', 'off', true)`, o.WorkMem); err != nil {
			return err
		}
		if err := sign(ctx, tx, l, &src); err != nil {
			return err
		}
		job := &Job{Tx: tx, Layer: l, Kind: kind, Next: make(map[string]pgx.Identifier, len(targets))}
		built, took := make([]int64, len(targets)), make([]int64, len(targets))
		for i, t := range targets {
			start := time.Now()
			if built[i], err = buildOne(ctx, job, b, t, o.ReaderRole); err != nil {
				return fmt.Errorf("build %s: %w", t.Relation, err)
			}
			took[i] = time.Since(start).Milliseconds()
			r.Rows += built[i]
		}
		err = swap(ctx, tx, l.Name, b.Name(), targets, o, func(sp pgx.Tx) error {
			for i, t := range targets {
				if err := record(ctx, sp, l, b.Name(), t, src, built[i], took[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.Status, r.Relations, r.SourceRows, r.Repaired = Built, len(targets), src.rows, job.Repaired
		return nil
	})
	r.Err = err
	return r
}

// buildOne builds target t into "<relation>_next" (dropping one a failed
// run left behind), grants it to the read role and analyzes it.
func buildOne(ctx context.Context, job *Job, b Builder, t Target, role string) (int64, error) {
	next := pgx.Identifier{tiles.ServingSchema, t.Relation + "_next"}
	if _, err := job.Tx.Exec(ctx, "DROP TABLE IF EXISTS "+next.Sanitize()); err != nil {
		return 0, err
	}
	job.Next[t.Relation] = next
	rows, err := b.Build(ctx, job, t)
	if err != nil {
		return 0, err
	}
	if _, err := job.Tx.Exec(ctx, "GRANT SELECT ON "+next.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize()); err != nil {
		return 0, err
	}
	if _, err := job.Tx.Exec(ctx, "ANALYZE "+next.Sanitize()); err != nil {
		return 0, err
	}
	return rows, nil
}

// lockLayer takes the transaction-scoped advisory lock of a layer's
// builds, so that two runs never build one layer at once; held is false
// when another run has it.
func lockLayer(ctx context.Context, tx pgx.Tx, layer string) (held bool, err error) {
	err = tx.QueryRow(ctx, lockSQL, layer).Scan(&held)
	return held, err
}

// swap replaces a builder's storage of one layer with the tables just
// built ("<relation>_next"), in a savepoint of the build's transaction:
// it locks every relation it drops or replaces at once (under a
// statement_timeout of LockTimeout, so that tile queries queued behind
// the swap wait at most that long), forgets and drops the old relations,
// renames each new table (and its indexes) to its stable name, and calls
// record to write the new registry rows. A swap that cannot get its
// locks in time is rolled back to the savepoint and tried again, up to
// SwapAttempts times. Readers see the old relations or the new ones,
// never a mix: the whole change commits with the build.
func swap(ctx context.Context, tx pgx.Tx, layer, builder string, targets []Target, o Options, record func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return swapOnce(ctx, sp, layer, builder, targets, o, record) })
		if err == nil || !lockBusy(err) || attempt >= o.SwapAttempts {
			return err
		}
		o.Logger.Info("prepare: swap waits for tile queries", "layer", layer, "builder", builder, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(attempt, 10)) * 100 * time.Millisecond):
		}
	}
}

func swapOnce(ctx context.Context, sp pgx.Tx, layer, builder string, targets []Target, o Options, record func(pgx.Tx) error) error {
	var prev string
	if err := sp.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&prev); err != nil {
		return err
	}
	old, err := texts(ctx, sp, registryDeleteSQL, layer, builder)
	if err != nil {
		return err
	}
	names := old
	for _, t := range targets {
		names = append(names, t.Relation)
	}
	existing, err := texts(ctx, sp, existingSQL, names)
	if err != nil {
		return err
	}
	if len(existing) > 0 {
		idents := make([]string, len(existing))
		for i, n := range existing {
			idents[i] = pgx.Identifier{tiles.ServingSchema, n}.Sanitize()
		}
		if _, err := sp.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, fmt.Sprint(o.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "LOCK TABLE "+strings.Join(idents, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, prev); err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "DROP TABLE "+strings.Join(idents, ", ")); err != nil {
			return err
		}
	}
	for _, t := range targets {
		if err := rename(ctx, sp, t.Relation); err != nil {
			return err
		}
	}
	return record(sp)
}

// rename gives the table "<relation>_next" and its indexes
// ("<relation>_next_<suffix>", as builders name them) their stable names.
func rename(ctx context.Context, sp pgx.Tx, relation string) error {
	next := relation + "_next"
	indexes, err := texts(ctx, sp, indexesSQL, next)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, "ALTER TABLE "+pgx.Identifier{tiles.ServingSchema, next}.Sanitize()+
		" RENAME TO "+pgx.Identifier{relation}.Sanitize()); err != nil {
		return err
	}
	for _, ix := range indexes {
		stable, ok := strings.CutPrefix(ix, next+"_")
		if !ok {
			continue
		}
		if _, err := sp.Exec(ctx, "ALTER INDEX "+pgx.Identifier{tiles.ServingSchema, ix}.Sanitize()+
			" RENAME TO "+pgx.Identifier{relation + "_" + stable}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// remove drops a builder's storage of a layer that no longer needs it.
func remove(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, builder string, o Options) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		held, err := lockLayer(ctx, tx, l.Name)
		if err != nil || !held {
			return err
		}
		return swap(ctx, tx, l.Name, builder, nil, o, func(pgx.Tx) error { return nil })
	})
}

// lockBusy reports a swap that gave up waiting for its locks.
func lockBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "57014")
}

// texts returns the one text column of a query's rows.
func texts(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
