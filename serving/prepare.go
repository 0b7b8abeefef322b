package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// copied columns it may read itself, every row of them (see
	// RowSecurity, ForeignTable, InvokerView, ViewRowSecurity and
	// RoleDependentView).
	ReaderRole string
	// Force rebuilds storage that is current.
	Force bool
	// Builders to run (default Builders()).
	Builders []Builder
	// WorkMem is the build transaction's work_mem (default "256MB"):
	// clustering sorts the whole table once.
	WorkMem string
	// Retain is how long a relation stays after its replacement was
	// recorded (default 10 minutes): serve re-reads the registry every
	// tiles.storage_refresh (30 s), and reads the old relation until then.
	// Each run drops the relations retired longer ago.
	Retain time.Duration
	// LockTimeout bounds the wait to drop a retired relation (default
	// 50ms): one still read (by a server that has not re-read the
	// registry) is left for a later run, and no query queues behind the
	// drop for longer.
	LockTimeout time.Duration
	// Prune, when set, reports whether the storage of a layer Prepare was
	// not given is to be retired: a layer the configuration no longer
	// has (Reason NotConfigured). Nil retires none: a database may serve
	// several configurations, and a run of one layer (prepare -layer)
	// knows nothing of the others.
	Prune  func(layer string) bool
	Logger *slog.Logger
}

// Retired is the Builder of the Result that reports the drop of retired
// relations (of every layer, not one builder's).
const Retired = "retired"

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
	if o.Retain <= 0 {
		o.Retain = 10 * time.Minute
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
	Built     Status = "built"     // built and recorded in place of the old storage
	Unchanged Status = "unchanged" // current: its checked_at renewed
	Removed   Status = "removed"   // no longer configured, or refused (see Reason): retired (or, builder Retired: dropped)
	Skipped   Status = "skipped"   // see Reason: nothing to build, or another run holds (or just built) the layer
	Failed    Status = "failed"    // see Err; what was served before is served still, unless the read role may no longer read the table
)

// Reasons of a Skipped Result.
const (
	NothingToBuild = "nothing to build"
	LayerBusy      = "another run holds the layer" // it builds or removes it; the next run checks again
	BuiltByOther   = "another run built it"        // current once this run held the layer's lock
)

// NotConfigured is the Reason of a Removed Result of Options.Prune: the
// storage of a layer the configuration no longer has, retired.
const NotConfigured = "the layer is not configured"

// Reasons of a Skipped Result, or of a Removed one when the storage built
// before is retired: the layer's table as it is now cannot give that
// storage the features it draws itself, so its tiles keep reading the
// table. Each run checks again.
const (
	NullIDs     = "the id column holds NULL: pieces are joined into features by id, and those rows would merge into one; tiles read the table (give every row an id)"
	RepeatedIDs = "the id column repeats an id: pieces are joined into features by id, and those rows would merge into one; tiles read the table (make the ids unique)"
)

// Reasons of a Skipped or Removed Result of every builder: storage the
// read role may read would show it rows its table hides from it. prepare
// reads the table as the schema owner, whom the table's row-level
// security does not filter as it filters the read role (it reads past
// it, or, forced on the owner, through the owner's policies), and copies
// what it reads into relations the read role reads whole. The storage
// built before is retired and the read role's right to read it taken
// away at once (a server that has not re-read the registry fails those
// tiles until it does, rather than show the rows), and the layer's tiles
// read the table, through its policies. Each run checks again. The check
// is whether row security applies to the read role, not what its
// policies let it see: policies that show it every row refuse the table
// too.
const (
	RowSecurity = "row-level security is enabled on the table and filters the read role: storage would show it every row; tiles read the table (grant the read role BYPASSRLS, or disable row security)"
	InvokerView = "the view, or a view it reads, has security_invoker: the read role reads that view's relations with its own rights and row security, which storage would not apply; tiles read the view"
)

// ViewRowSecurity is the Reason of a Skipped or Removed Result of every
// builder on a view (without security_invoker) that reads a table with
// row-level security enabled, directly or through other views. The read
// role reads the view with the view owner's rights, but the table's
// policies still apply, and current_user in them is the role that reads
// the view: prepare, reading it as the schema owner, may see rows the
// read role does not. The rule is conservative: any row security
// refuses the view, whatever its policies and whoever the read role is
// (BYPASSRLS of the read role does not lift policies applied under the
// view owner's rights). The storage built before is withdrawn as for
// RowSecurity, and the layer's tiles read the view.
const ViewRowSecurity = "the view reads a table with row-level security enabled: its policies apply to whoever reads the view, and may filter by that role (current_user), which storage would not do; tiles read the view (disable row security on the tables it reads, or build the layer from a materialized view)"

// ForeignTable is the Reason of a Skipped or Removed Result of every
// builder on a foreign table, or on a partitioned or inheritance parent
// with one among its descendants: the read role reads it through its own user
// mapping, which may reach other rows on the remote server, or none;
// prepare reads it through the schema owner's. A view over it is built:
// it is read through the view owner's mapping whoever reads it. The
// storage built before is withdrawn as for RowSecurity, and the layer's
// tiles read the table.
const ForeignTable = "a foreign table is read through the reading role's own user mapping, which storage built as the schema owner would not apply; tiles read the table (build the layer from a view over it, read through the view owner's mapping, or a materialized view)"

// RoleDependentView is the Reason of a Skipped or Removed Result of every
// builder on a view that may show each reader other rows without row
// security: the view, or a view it reads, names CURRENT_USER,
// SESSION_USER, CURRENT_ROLE or USER, checks a privilege or a role
// membership, reads a setting, or calls a function or operator that is
// neither built in nor an extension's (which might do any of these).
// prepare reads the view as the schema owner, and storage would show the
// read role the owner's rows. The storage built before is withdrawn as
// for RowSecurity, and the layer's tiles read the view.
const RoleDependentView = "the view, or a view it reads, may depend on who reads it (CURRENT_USER, SESSION_USER, a privilege or role check, a setting, or a function from outside an extension): storage built as the schema owner would show the read role the owner's rows; tiles read the view (build the layer from a table or a materialized view)"

// Result is the outcome for one layer and builder.
type Result struct {
	Layer, Builder string
	Status         Status
	Relations      int   // relations built (or current)
	Rows           int64 // their rows
	SourceRows     int64 // rows of the layer's table
	Repaired       int64 // source rows the build repaired (Job.Repaired); 0 unless built
	Took           time.Duration
	Reason         string // why it was Skipped: NothingToBuild, LayerBusy, BuiltByOther, NullIDs, RepeatedIDs, RowSecurity, ForeignTable, InvokerView, ViewRowSecurity or RoleDependentView; why it was Removed: one of the last seven, or NotConfigured
	Err            error
}

// Prepare brings the serving storage of every layer up to date through
// pool, which must connect as the owner of schema geotoll_serving (the
// schema owner that runs the migrations). For each layer and builder it
// compares what the builder would build (its Targets) and the source
// table's change detector with the registry: when they match it renews
// checked_at and builds nothing; otherwise it builds every target into a
// new table and records them in place of the old ones, which it retires.
// Layers are independent: one failing is reported in its Result and the
// others go on. With o.Prune, it then retires the storage of the layers
// it was not given that o.Prune names. Last, it drops the relations retired longer ago than
// o.Retain (of every layer), reported as one more Result (layer "",
// builder Retired) when it dropped any or failed.
func Prepare(ctx context.Context, pool *pgxpool.Pool, layers []*tiles.Layer, o Options) []Result {
	o = o.withDefaults()
	var out []Result
	for _, l := range layers {
		out = append(out, prepareLayer(ctx, pool, l, o)...)
	}
	if o.Prune != nil {
		out = append(out, prune(ctx, pool, layers, o)...)
	}
	start := time.Now()
	n, err := dropRetired(ctx, pool, o)
	if n > 0 || err != nil {
		r := Result{Builder: Retired, Status: Removed, Relations: n, Err: err, Took: time.Since(start)}
		if err != nil {
			r.Status = Failed
		}
		o.Logger.LogAttrs(ctx, level(r), "prepare: dropped retired relations", slog.Int("relations", n), slog.Any("err", err))
		out = append(out, r)
	}
	return out
}

func prepareLayer(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, o Options) []Result {
	fail := func(err error) []Result { // of every builder: logged as the others are
		r := Result{Layer: l.Name, Status: Failed, Err: migrateHint(ctx, pool, err)}
		logResult(ctx, o, r)
		return []Result{r}
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
			r.Status, r.Reason = Skipped, NothingToBuild
		case len(targets) == 0:
			held, err := remove(ctx, pool, l.Name, b.Name())
			r.Status, r.Err = Removed, err
			if err == nil && !held { // nothing retired: a later run removes it
				r.Status, r.Reason = Skipped, LayerBusy
			}
		default:
			r = build(ctx, pool, l, kind, b, targets, rows, o)
		}
		if r.Err != nil {
			r.Status = Failed
		}
		r.Took = time.Since(start)
		logResult(ctx, o, r)
		out = append(out, r)
	}
	return out
}

// logResult logs the Result of a layer (and builder: "" when the layer
// failed before any builder ran).
func logResult(ctx context.Context, o Options, r Result) {
	o.Logger.LogAttrs(ctx, level(r), "prepare", slog.String("layer", r.Layer), slog.String("builder", r.Builder),
		slog.String("status", string(r.Status)), slog.String("reason", r.Reason), slog.Int("relations", r.Relations), slog.Int64("rows", r.Rows),
		slog.Int64("source_rows", r.SourceRows), slog.Int64("repaired", r.Repaired), slog.Duration("took", r.Took), slog.Any("err", r.Err))
}

// migrateFirst ends the error of a run that failed on a database without
// the serving registry: one the migrations have not set up.
const migrateFirst = "the serving registry (geotoll_serving.storage) does not exist: run `geotoll migrate` first"

// migrateHint returns err, saying so (migrateFirst) when the database
// has no serving registry. A database that cannot say returns err as it
// is.
func migrateHint(ctx context.Context, q Querier, err error) error {
	if err == nil {
		return nil
	}
	rows, qerr := q.Query(ctx, `SELECT to_regclass('geotoll_serving.storage') IS NULL`)
	if qerr != nil {
		return err
	}
	absent, qerr := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if qerr != nil || !absent {
		return err
	}
	return fmt.Errorf("%w (%s)", err, migrateFirst)
}

func level(r Result) slog.Level {
	if r.Err != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}

// build checks whether the targets are current and, unless they are (or
// Force), builds them and records them in place of the old storage, in
// one REPEATABLE READ transaction:
// the change detector recorded is the one of the snapshot the build read.
// rows are the builder's registry rows read before the layer's lock was
// taken; the transaction, whose snapshot is taken once the lock is held,
// checks again and skips a layer another run built meanwhile.
func build(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, kind tiles.Kind, b Builder, targets []Target, rows []tiles.Storage, o Options) Result {
	r := Result{Layer: l.Name, Builder: b.Name()}
	cols := append(l.Columns(), l.GeometryColumn)
	src, err := inspect(ctx, pool, l, o.ReaderRole, cols)
	if err != nil {
		r.Err = err
		return r
	}
	// Checked before the storage is found current: a table whose rights
	// or row security changed keeps its signature.
	if reason, err := src.refusal(l, o.ReaderRole, cols); reason != "" || err != nil {
		return refuse(ctx, pool, l, b.Name(), len(rows) > 0, reason, err, o)
	}
	if !o.Force {
		if err := sign(ctx, pool, l, &src); err != nil {
			r.Err = err
			return r
		}
		r.SourceRows = src.rows
		ok, err := upToDate(ctx, pool, rows, src.table, l, targets, src.signature)
		if err != nil {
			r.Err = err
			return r
		}
		if ok {
			_, err := pool.Exec(ctx, registryTouchSQL, l.Name, b.Name())
			if err == nil {
				err = revokeDefault(ctx, pool, rows, o.ReaderRole)
			}
			r.Status, r.Relations, r.Err = Unchanged, len(targets), err
			return r
		}
	}
	err = withLayerLock(ctx, pool, l.Name, func(conn *pgxpool.Conn) error {
		return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			return buildTx(ctx, tx, l, kind, b, targets, &src, cols, o, &r)
		})
	})
	if errors.Is(err, errLayerBusy) {
		r.Status, r.Reason, err = Skipped, LayerBusy, nil
	}
	if err != nil {
		r.Err = err
	}
	return r
}

// refuse is build's Result for a table whose storage the read role must
// not read (source.refusal's reason, or err): the builder's storage of
// the layer is withdrawn, holding the layer's lock, the storage the
// registry had (stored) and the layer's storage retired before alike.
// When another run holds the lock, nothing is withdrawn, for a later
// run, and the layer is Skipped (LayerBusy if the registry had storage,
// else the reason; or Failed with err).
func refuse(ctx context.Context, pool *pgxpool.Pool, l *tiles.Layer, builder string, stored bool, reason string, err error, o Options) Result {
	r := Result{Layer: l.Name, Builder: builder, Status: Skipped, Reason: reason, Err: err}
	var n int
	held, werr := inLayerTx(ctx, pool, l.Name, func(tx pgx.Tx) (err error) {
		n, err = withdraw(ctx, tx, l.Name, builder, o.ReaderRole)
		return err
	})
	switch {
	case werr != nil:
		r.Err = errors.Join(err, werr)
	case !held && stored && err == nil:
		r.Reason = LayerBusy
	case n > 0 && err == nil:
		r.Status = Removed
	}
	return r
}

// withdraw retires a builder's storage of a layer in tx (see retireSQL)
// and revokes the read role's right to read its relations (and
// DefaultReaderRole's, which storage built before migration 00012 has), which may
// hold what the role must not see: the retired relations stay for
// Options.Retain so that a server reading them is not disturbed, but a
// server must not show these. So are revoked the layer's relations
// retired before (by a rebuild, or by a builder no longer configured)
// that the read role may still read, whichever builder built them: they
// were built from the same table. It returns how many relations it
// retired from the registry.
func withdraw(ctx context.Context, tx pgx.Tx, layer, builder, role string) (int, error) {
	rels, err := texts(ctx, tx, retireSQL, layer, builder)
	if err != nil {
		return 0, err
	}
	// Storage built before migration 00012 is readable by the default
	// read role too, whichever role it was built for.
	roles := []string{role}
	if role != DefaultReaderRole {
		roles = append(roles, DefaultReaderRole)
	}
	before, err := texts(ctx, tx, retiredReadSQL, layer, roles)
	if err != nil {
		return 0, err
	}
	revoke := slices.Clone(rels)
	for _, rel := range before {
		if !slices.Contains(revoke, rel) {
			revoke = append(revoke, rel)
		}
	}
	// A relation the registry named that is gone has no grant to take.
	gone, err := missingOf(ctx, tx, revoke)
	if err != nil {
		return 0, err
	}
	revoke = slices.DeleteFunc(revoke, func(rel string) bool { return slices.Contains(gone, rel) })
	if err := revokeSelect(ctx, tx, revoke, roles...); err != nil {
		return 0, err
	}
	return len(rels), nil
}

// revokeSelect takes SELECT on rels, relations of tiles.ServingSchema,
// from roles.
func revokeSelect(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, rels []string, roles ...string) error {
	from := make([]string, len(roles))
	for i, r := range roles {
		from[i] = pgx.Identifier{r}.Sanitize()
	}
	for _, rel := range rels {
		if _, err := q.Exec(ctx, "REVOKE SELECT ON "+pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()+" FROM "+strings.Join(from, ", ")); err != nil {
			return fmt.Errorf("revoke %s: %w", rel, err)
		}
	}
	return nil
}

// revokeDefault takes DefaultReaderRole's SELECT away from the relations
// of rows when storage is built for another read role: before migration
// 00012 every relation built was readable by it by default, and storage
// that stays current is never withdrawn.
func revokeDefault(ctx context.Context, pool *pgxpool.Pool, rows []tiles.Storage, role string) error {
	if role == DefaultReaderRole {
		return nil
	}
	rels := make([]string, len(rows))
	for i, s := range rows {
		rels[i] = s.Relation
	}
	return revokeSelect(ctx, pool, rels, DefaultReaderRole)
}

// buildTx is build's transaction, run holding the layer's lock: unless
// the storage is current in its snapshot (and not Force), it builds the
// targets and records them in place of the old storage, filling r.
func buildTx(ctx context.Context, tx pgx.Tx, l *tiles.Layer, kind tiles.Kind, b Builder, targets []Target, src *source, cols []string, o Options, r *Result) error {
	if refused, err := recheck(ctx, tx, l, b, src, cols, o, r); refused || err != nil {
		return err
	}
	if err := sign(ctx, tx, l, src); err != nil {
		return err
	}
	if !o.Force {
		// Another run may have built the layer between the check before
		// the lock and the lock (overlapping runs): this snapshot, taken
		// once the lock is held, sees what it recorded.
		all, err := tiles.LoadStorage(ctx, tx)
		if err != nil {
			return err
		}
		rows := slices.DeleteFunc(all, func(e tiles.Storage) bool { return e.Layer != l.Name || e.Builder != b.Name() })
		ok, err := upToDate(ctx, tx, rows, src.table, l, targets, src.signature)
		if err != nil {
			return err
		}
		if ok {
			r.Status, r.Reason, r.Relations, r.SourceRows = Skipped, BuiltByOther, len(targets), src.rows
			return nil
		}
	}
	job := &Job{Tx: tx, Layer: l, Kind: kind, Next: make(map[string]pgx.Identifier, len(targets))}
	if rf, ok := b.(refuser); ok {
		// Checked in the build's snapshot, so that the storage recorded
		// with this signature never holds what the check refuses; the
		// storage built before goes too, being of another snapshot.
		reason, err := rf.refuse(ctx, job)
		if err != nil {
			return err
		}
		if reason != "" {
			tag, err := tx.Exec(ctx, retireSQL, l.Name, b.Name())
			if err != nil {
				return err
			}
			r.Status, r.Reason, r.SourceRows = Skipped, reason, src.rows
			if tag.RowsAffected() > 0 {
				r.Status = Removed
			}
			return nil
		}
	}
	var txid int64
	if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
		return err
	}
	gen := generation(txid)
	built, took := make([]int64, len(targets)), make([]int64, len(targets))
	for i, t := range targets {
		start := time.Now()
		var err error
		if built[i], err = buildOne(ctx, job, b, t, gen, o.ReaderRole); err != nil {
			return fmt.Errorf("build %s: %w", t.Relation, err)
		}
		took[i] = time.Since(start).Milliseconds()
		r.Rows += built[i]
	}
	// The switch: the registry names the new tables instead of the
	// old ones, which are retired (see dropRetired). No served
	// relation is locked, so no tile query waits for a build.
	if _, err := tx.Exec(ctx, retireSQL, l.Name, b.Name()); err != nil {
		return err
	}
	for i, t := range targets {
		if err := record(ctx, tx, l, b.Name(), t, job.Next[t.Relation][1], *src, built[i], took[i]); err != nil {
			return err
		}
	}
	r.Status, r.Relations, r.SourceRows, r.Repaired = Built, len(targets), src.rows, job.Repaired
	return nil
}

// lockSource takes ACCESS SHARE on the layer's table (see recheck). LOCK
// asks for table privileges where a read is content with column grants,
// and on a view for the view owner's on every table it reads: a view
// whose owner may read a table by column grants only, which prepare could
// always read, cannot be locked. It is then built unlocked, as it was
// before the lock (in a savepoint, so that the refused LOCK leaves the
// transaction usable): a row security switched on at that moment may go
// unseen until the next run.
func lockSource(ctx context.Context, tx pgx.Tx, l *tiles.Layer, relkind string) error {
	lock := "LOCK TABLE ONLY " + l.TableIdent().Sanitize() + " IN ACCESS SHARE MODE"
	if relkind != "v" {
		_, err := tx.Exec(ctx, lock)
		return err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, lock); err != nil {
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "42501" { // insufficient_privilege
			return err
		}
		return sp.Rollback(ctx)
	}
	return sp.Commit(ctx)
}

// buildSettingsSQL sets a build transaction's own settings, $1 its work_mem.
const buildSettingsSQL = `SELECT set_config('work_mem', $1, true), set_config('jit', 'off', true)`

// recheck begins build's transaction: it locks the layer's table (a
// view's, its tables) before the snapshot is taken and checks again, in
// the snapshot, what Prepare checked before the lock. A layer refused now
// has its storage withdrawn and r filled: refused is true.
func recheck(ctx context.Context, tx pgx.Tx, l *tiles.Layer, b Builder, src *source, cols []string, o Options, r *Result) (refused bool, err error) {
	if src.relkind == "r" || src.relkind == "p" || src.relkind == "v" {
		// Locked before the snapshot is taken (LOCK takes none): the
		// snapshot sees row security enabled before the lock, and none
		// is enabled (ALTER TABLE takes ACCESS EXCLUSIVE) until the
		// build commits, so the check below holds for what it copies.
		// A view's lock takes its tables' and views', recursively.
		if err := lockSource(ctx, tx, l, src.relkind); err != nil {
			return false, err
		}
	}
	// The build's settings, once the lock is held: a SELECT takes the
	// snapshot. JIT compiles each statement the planner prices high — a
	// build's are, whatever the table's size — for about a second, and
	// buys nothing here: the work is in PostGIS's functions, which it
	// does not compile (a layer of a few rows took 7–18 s to build with
	// it).
	if _, err := tx.Exec(ctx, buildSettingsSQL, o.WorkMem); err != nil {
		return false, err
	}
	// The check before the lock, again, in the build's snapshot: the
	// table may have changed since.
	now, err := inspect(ctx, tx, l, o.ReaderRole, cols)
	if err != nil {
		return false, err
	}
	if now.table != src.table {
		return false, fmt.Errorf("table %s changed (%s, then %s) during the run", l.TableIdent().Sanitize(), src.table, now.table)
	}
	if reason, err := now.refusal(l, o.ReaderRole, cols); reason != "" || err != nil {
		n, werr := withdraw(ctx, tx, l.Name, b.Name(), o.ReaderRole)
		if werr != nil {
			return false, werr
		}
		r.Status, r.Reason, r.Err = Skipped, reason, err
		if n > 0 && err == nil {
			r.Status = Removed
		}
		return true, nil
	}
	return false, nil
}

// buildOne builds target t into a table of its own generation, grants
// it to the read role and analyzes it.
func buildOne(ctx context.Context, job *Job, b Builder, t Target, gen, role string) (int64, error) {
	next := pgx.Identifier{tiles.ServingSchema, t.Relation + gen}
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

// The session-scoped forms of lockSQL, on its key: a lock of either scope
// excludes one of the other taken by another session.
var (
	sessionLockSQL   = strings.Replace(lockSQL, "pg_try_advisory_xact_lock(", "pg_try_advisory_lock(", 1)
	sessionUnlockSQL = strings.Replace(lockSQL, "pg_try_advisory_xact_lock(", "pg_advisory_unlock(", 1)
)

func init() {
	if sessionLockSQL == lockSQL || sessionUnlockSQL == lockSQL {
		panic("serving: serving_lock.sql no longer calls pg_try_advisory_xact_lock(")
	}
}

// errLayerBusy is withLayerLock's error when another run holds the lock.
var errLayerBusy = errors.New(LayerBusy)

// withLayerLock runs fn on a connection holding the layer's lock, taken
// (session-scoped) before fn begins its transaction, whose snapshot then
// sees all the previous holder committed: a transaction-scoped lock would
// be taken by a statement whose snapshot precedes it. It returns
// errLayerBusy, without calling fn, when another run holds the lock. A
// connection whose lock cannot be released is closed, which releases it.
func withLayerLock(ctx context.Context, pool *pgxpool.Pool, layer string, fn func(*pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var held bool
	if err := conn.QueryRow(ctx, sessionLockSQL, layer).Scan(&held); err != nil {
		// The lock may have been taken before the statement failed (a
		// cancel that came late): a session lock outlives the error, so
		// the connection goes, and the server drops the lock with it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = conn.Conn().Close(cctx)
		return err
	}
	if !held {
		return errLayerBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released bool
		if err := conn.QueryRow(uctx, sessionUnlockSQL, layer).Scan(&released); err != nil || !released {
			_ = conn.Conn().Close(uctx) // the pool drops it, the server the lock
		}
	}()
	return fn(conn)
}

// remove stops serving a builder's storage of a layer that no longer
// needs it: its relations are retired, and dropped by a later run. held
// is false, and nothing is retired, when another run holds the layer.
func remove(ctx context.Context, pool *pgxpool.Pool, layer, builder string) (held bool, err error) {
	return inLayerTx(ctx, pool, layer, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, retireSQL, layer, builder)
		return err
	})
}

// inLayerTx runs fn in a transaction holding the layer's lock (lockLayer).
// held is false, and fn is not run, when another run holds the layer.
func inLayerTx(ctx context.Context, pool *pgxpool.Pool, layer string, fn func(pgx.Tx) error) (held bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if held, err = lockLayer(ctx, tx, layer); err != nil || !held {
			return err
		}
		return fn(tx)
	})
	return held, err
}

// prune retires the storage in the registry of every layer that is not
// among layers and that o.Prune names, one Result per layer and builder:
// Removed (NotConfigured), Skipped when another run holds the layer, or
// Failed.
func prune(ctx context.Context, pool *pgxpool.Pool, layers []*tiles.Layer, o Options) []Result {
	existing, err := tiles.LoadStorage(ctx, pool)
	if err != nil {
		r := Result{Builder: Retired, Status: Failed, Err: migrateHint(ctx, pool, fmt.Errorf("prune: %w", err))}
		logResult(ctx, o, r)
		return []Result{r}
	}
	type pair struct{ layer, builder string }
	var seen []pair
	for _, e := range existing {
		p := pair{e.Layer, e.Builder}
		if slices.Contains(seen, p) || slices.ContainsFunc(layers, func(l *tiles.Layer) bool { return l.Name == e.Layer }) || !o.Prune(e.Layer) {
			continue
		}
		seen = append(seen, p)
	}
	var out []Result
	for _, p := range seen {
		start := time.Now()
		r := Result{Layer: p.layer, Builder: p.builder, Status: Removed, Reason: NotConfigured}
		held, err := remove(ctx, pool, p.layer, p.builder)
		switch {
		case err != nil:
			r.Status, r.Reason, r.Err = Failed, "", err
		case !held:
			r.Status, r.Reason = Skipped, LayerBusy
		}
		r.Took = time.Since(start)
		o.Logger.LogAttrs(ctx, level(r), "prepare", slog.String("layer", r.Layer), slog.String("builder", r.Builder),
			slog.String("status", string(r.Status)), slog.String("reason", r.Reason), slog.Duration("took", r.Took), slog.Any("err", r.Err))
		out = append(out, r)
	}
	return out
}

// dropRetired drops the relations retired longer ago than o.Retain, each
// in its own transaction that waits at most o.LockTimeout for its lock: a
// relation some query still reads is left for a later run. A relation
// that cannot be dropped does not stop the others: the errors are joined.
// It returns how many it dropped.
func dropRetired(ctx context.Context, pool *pgxpool.Pool, o Options) (int, error) {
	due, err := texts(ctx, pool, retiredDueSQL, o.Retain.Seconds())
	if err != nil {
		return 0, migrateHint(ctx, pool, fmt.Errorf("retired relations: %w", err))
	}
	wait := fmt.Sprint(max(o.LockTimeout.Milliseconds(), 1)) // 0 would wait for ever
	dropped := 0
	var errs []error
	for _, rel := range due {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, wait); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DELETE FROM geotoll_serving.retired WHERE relation = $1`, rel)
			return err
		})
		switch {
		case lockBusy(err):
			o.Logger.Info("prepare: a retired relation is still read; a later run drops it", "relation", rel)
		case err != nil:
			errs = append(errs, fmt.Errorf("drop %s: %w", rel, err))
		default:
			dropped++
		}
	}
	return dropped, errors.Join(errs...)
}

// lockBusy reports a statement that gave up waiting for its locks.
func lockBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// texts returns the one text column of a query's rows.
func texts(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
