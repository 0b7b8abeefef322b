// Package layercheck checks configured layers against the database they
// are served from, as the role that serves them: each layer's table
// exists, the role may use its schema and SELECT from it, its geometry
// column is a PostGIS geometry of the SRID the layer expects, and its id,
// property and order_by columns exist (the id an integer) and may be
// read.
//
// The server runs the check at start-up — a layer that does not match
// refuses the start, with a message naming the layer and what is wrong —
// and then in the background, so that a table dropped later shows in
// /readyz. The check reads the catalog only (pg_class, pg_attribute,
// pg_constraint and the privilege functions), never a row of a layer: a
// layer that is a slow view, or a table locked by a long migration, costs
// it nothing. One check runs at a time per Checker, in a read-only
// transaction under a statement timeout. Nothing here ever comes from a request: names come from the
// configuration (or from the database itself, for discovered layers) and
// are bound as values, or quoted with pgx.Identifier.
package layercheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// Spec is what one layer needs of its table.
type Spec struct {
	// Layer names the layer in messages, e.g. `tile layer "places"`.
	Layer string
	// Table is the table's identifier: [schema,] name. Without a schema
	// it is looked up on the role's search path.
	Table pgx.Identifier
	// Geometry is the geometry column; SRID, when positive, the SRID it
	// must have.
	Geometry string
	SRID     int
	// ID is the feature id column ("" for none): an integer column.
	ID string
	// Properties are the columns a feature carries as its attributes.
	Properties []string
	// Order are the columns the layer's features are ordered by (a tile
	// layer's order_by).
	Order []string
	// Verdict, when set, receives each check's word on the layer (see
	// Verdict).
	Verdict *Verdict
}

// Verdict is the last word of a check that reached the database on one
// layer: why it does not match its table, or "" while it does (its zero
// value). A check that could not ask the database leaves it as it was.
// The layer's requests read it: storage `geotoll prepare` built from a
// table (overviews, pieces) does not fail when the table is dropped or
// its grant revoked, and must not go on showing the read role what the
// table now hides.
type Verdict struct{ reason atomic.Pointer[string] }

// Misfit returns why the layer does not match its table, "" when it does
// (or v is nil: a layer never checked).
func (v *Verdict) Misfit() string {
	if v == nil {
		return ""
	}
	if r := v.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// RetryAfter is the Retry-After of a layer that does not match its
// table: the layer checks run again with the readiness checks.
const RetryAfter = 5

// Err is the answer to a request of the layer, named subject (`layer
// "places"`), while it does not match its table — a 503 with the reason —
// or nil while it does.
func (v *Verdict) Err(subject string) error {
	reason := v.Misfit()
	if reason == "" {
		return nil
	}
	return &problem.Error{Code: problem.Unavailable, RetryAfter: RetryAfter,
		Detail: subject + " does not match the database: " + reason}
}

func (v *Verdict) set(reason string) {
	if reason == "" {
		v.reason.Store(nil)
		return
	}
	v.reason.Store(&reason)
}

// Querier is what a check needs of a connection or pool: a transaction
// (*pgx.Conn and *pgxpool.Pool both fit).
type Querier interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Mismatch is one layer that does not match its table.
type Mismatch struct {
	Layer   string
	Reasons []string
}

func (m Mismatch) Error() string { return m.Layer + ": " + strings.Join(m.Reasons, "; ") }

// Mismatches is the error of a check that found layers that do not match
// the database. Any other error of Check means the database could not be
// asked.
type Mismatches []Mismatch

func (ms Mismatches) Error() string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Error()
	}
	return strings.Join(parts, "\n")
}

// DefaultTimeout is the statement timeout of a check when Checker.Timeout
// is zero.
const DefaultTimeout = 2 * time.Second

// Checker checks a fixed set of layers, from the catalog only: the SRID of
// a geometry column is the one its type or a CHECK constraint declares, and
// a column that declares none is not checked for it (its rows are never
// read).
type Checker struct {
	// Timeout is the statement timeout of the check's queries (0:
	// DefaultTimeout).
	Timeout time.Duration

	specs []Spec

	mu       sync.Mutex
	inflight *flight
}

// flight is a check under way, which callers that come while it runs
// wait for instead of starting their own.
type flight struct {
	done chan struct{}
	err  error
}

// New returns a Checker of specs.
func New(specs ...Spec) *Checker {
	return &Checker{specs: specs}
}

// Len is the number of layers checked.
func (c *Checker) Len() int { return len(c.specs) }

var checkSQL = queries.MustRead("layer_check.sql")

// Check checks every layer through q. It returns nil when all match,
// Mismatches naming each layer that does not (and why), or the error that
// kept it from asking. A Check called while another runs starts no query
// of its own: it waits for that one's verdict (or for ctx to end).
func (c *Checker) Check(ctx context.Context, q Querier) error {
	c.mu.Lock()
	if f := c.inflight; f != nil {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	c.inflight = f
	c.mu.Unlock()
	f.err = c.checkAll(ctx, q)
	c.record(f.err)
	c.mu.Lock()
	c.inflight = nil
	c.mu.Unlock()
	close(f.done)
	return f.err
}

// record gives each spec's Verdict the word of a check that reached the
// database (err nil or Mismatches); any other error leaves them.
func (c *Checker) record(err error) {
	var ms Mismatches
	if err != nil && !errors.As(err, &ms) {
		return
	}
	reasons := make(map[string]string, len(ms))
	for _, m := range ms {
		reasons[m.Layer] = strings.Join(m.Reasons, "; ")
	}
	for _, s := range c.specs {
		if s.Verdict != nil {
			s.Verdict.set(reasons[s.Layer])
		}
	}
}

// checkAll checks every layer in one read-only transaction whose
// statements may run for the timeout at most.
func (c *Checker) checkAll(ctx context.Context, q Querier) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tx, err := q.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ms := fmt.Sprint(timeout.Milliseconds())
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)", ms); err != nil {
		return err
	}
	var bad Mismatches
	for _, s := range c.specs {
		reasons, err := check(ctx, tx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Layer, err)
		}
		if len(reasons) > 0 {
			bad = append(bad, Mismatch{Layer: s.Layer, Reasons: reasons})
		}
	}
	if len(bad) > 0 {
		return bad
	}
	return nil
}

// column is one row of layer_check.sql.
type column struct {
	role                    string
	tableFound              bool
	schema                  string
	schemaUsable, tableRead bool
	found                   bool
	typ                     string
	geometry                bool
	srid                    int
	integer, read           bool
}

// check returns what is wrong with s.
func check(ctx context.Context, tx pgx.Tx, s Spec) ([]string, error) {
	cols := []string{s.Geometry}
	if s.ID != "" {
		cols = append(cols, s.ID)
	}
	cols = append(cols, s.Properties...)
	ordered := len(cols) // cols[ordered:] are s.Order
	cols = append(cols, s.Order...)
	schema, name := split(s.Table)
	rows, err := tx.Query(ctx, checkSQL, schema, name, cols)
	if err != nil {
		return nil, err
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (column, error) {
		var k column
		err := row.Scan(&k.role, &k.tableFound, &k.schema, &k.schemaUsable, &k.tableRead,
			&k.found, &k.typ, &k.geometry, &k.srid, &k.integer, &k.read)
		return k, err
	})
	if err != nil {
		return nil, err
	}
	if len(found) != len(cols) {
		return nil, fmt.Errorf("layer check: %d rows for %d columns", len(found), len(cols))
	}
	t, table := found[0], s.Table.Sanitize()
	role := pgx.Identifier{t.role}.Sanitize()
	switch {
	case !t.tableFound && schema == "":
		return []string{fmt.Sprintf("table %s does not exist (or is not on the search path of role %s)", table, role)}, nil
	case !t.tableFound:
		return []string{fmt.Sprintf("table %s does not exist", table)}, nil
	case !t.schemaUsable:
		ns := pgx.Identifier{t.schema}.Sanitize()
		return []string{fmt.Sprintf("role %s may not use schema %s (GRANT USAGE ON SCHEMA %s TO %s)", role, ns, ns, role)}, nil
	case !t.tableRead && !anyRead(found):
		return []string{fmt.Sprintf("role %s may not SELECT from %s (GRANT SELECT ON %s TO %s)", role, table, table, role)}, nil
	}
	var reasons []string
	for j, k := range found {
		what := "properties: column " + quote(cols[j])
		switch {
		case j == 0:
			what = "geometry_column " + quote(cols[j])
		case j == 1 && s.ID != "":
			what = "id_column " + quote(cols[j])
		case j >= ordered:
			what = "order_by: column " + quote(cols[j])
		}
		switch {
		case !k.found:
			reasons = append(reasons, fmt.Sprintf("%s: no such column in %s", what, table))
		case !k.read:
			reasons = append(reasons, fmt.Sprintf("%s: role %s may not SELECT it", what, role))
		case j == 0 && !k.geometry:
			reasons = append(reasons, fmt.Sprintf("%s is of type %s, not geometry", what, k.typ))
		case j == 0 && s.SRID > 0 && k.srid > 0 && k.srid != s.SRID:
			reasons = append(reasons, fmt.Sprintf("%s has SRID %d, not %d", what, k.srid, s.SRID))
		case j == 1 && s.ID != "" && !k.integer:
			reasons = append(reasons, fmt.Sprintf("%s is of type %s; a feature id must be a smallint, integer or bigint", what, k.typ))
		}
	}
	return reasons, nil
}

// anyRead reports whether the role may read any of the columns (column
// privileges without the table's).
func anyRead(cols []column) bool {
	for _, k := range cols {
		if k.read {
			return true
		}
	}
	return false
}

// split returns an identifier's schema ("" when unqualified) and name.
func split(id pgx.Identifier) (schema, name string) {
	switch len(id) {
	case 0:
		return "", ""
	case 1:
		return "", id[0]
	}
	return id[len(id)-2], id[len(id)-1]
}

func quote(name string) string { return fmt.Sprintf("%q", name) }

// IsMismatch reports whether err says that layers do not match the
// database (rather than that the database could not be asked).
func IsMismatch(err error) bool {
	var ms Mismatches
	return errors.As(err, &ms)
}
