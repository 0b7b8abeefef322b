package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/signature"
	queries "github.com/geotoll/geotoll/sql"
	"github.com/geotoll/geotoll/tiles"
)

var (
	registryInsertSQL = queries.MustRead("serving_registry_insert.sql")
	registryTouchSQL  = queries.MustRead("serving_registry_touch.sql")
	retireSQL         = queries.MustRead("serving_retire.sql")
	retiredDueSQL     = queries.MustRead("serving_retired_due.sql")
	retiredReadSQL    = queries.MustRead("serving_retired_readable.sql")
	lockSQL           = queries.MustRead("serving_lock.sql")
	sourceSQL         = queries.MustRead("serving_source.sql")
	missingSQL        = queries.MustRead("serving_missing.sql")
)

// Querier is what the registry reads need of a pool or transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// upToDate reports whether the registry rows of a builder are current
// (see current) and every relation they name exists: a row whose
// relation is gone (dropped by hand, lost by a restore) names nothing to
// serve, and the layer is built again.
func upToDate(ctx context.Context, q Querier, rows []tiles.Storage, table string, l *tiles.Layer, targets []Target, sig string) (bool, error) {
	if !current(rows, table, l, targets, sig) {
		return false, nil
	}
	gone, err := missing(ctx, q, rows)
	return len(gone) == 0, err
}

// missing returns the relations of rows that do not exist.
func missing(ctx context.Context, q Querier, rows []tiles.Storage) ([]string, error) {
	rels := make([]string, len(rows))
	for i, r := range rows {
		rels[i] = r.Relation
	}
	return missingOf(ctx, q, rels)
}

// missingOf returns the relations of rels (in tiles.ServingSchema) that
// do not exist.
func missingOf(ctx context.Context, q Querier, rels []string) ([]string, error) {
	if len(rels) == 0 {
		return nil, nil
	}
	gone, err := texts(ctx, q, missingSQL, rels, tiles.ServingSchema)
	if err != nil {
		return nil, fmt.Errorf("serving registry: relations: %w", err)
	}
	return gone, nil
}

// current reports whether the registry rows of a builder are exactly what
// targets would build from the layer's table, table (source.table: its
// schema and name, quoted), whose signature is sig, and its geometry
// column: then there is nothing to do. A source without a signature (a
// view) is never current; nor are rows built from another table (the
// registry's source_table is compared as written, so a row recorded
// without its schema, by an older prepare, is rebuilt once). Signatures
// are compared as written too: a row recorded in an older form of the
// signature (package signature: without the checksum, or without the
// columns' fingerprint) is rebuilt once. Whether the relations exist is
// upToDate's to check.
func current(rows []tiles.Storage, table string, l *tiles.Layer, targets []Target, sig string) bool {
	if sig == "" || len(rows) != len(targets) {
		return false
	}
	for _, r := range rows {
		if r.SourceTable != table || r.SourceGeometryColumn != l.GeometryColumn {
			return false
		}
	}
	for _, t := range targets {
		i := slices.IndexFunc(rows, func(r tiles.Storage) bool { return StableName(r.Relation) == t.Relation })
		if i < 0 {
			return false
		}
		r := rows[i]
		r.Params.OrderBy = l.CanonicalOrderBy(r.Params.OrderBy) // the target's is canonical
		if r.SourceSignature != sig || r.ZoomMin != t.ZoomMin || r.ZoomMax != t.ZoomMax || r.Kind != t.Kind ||
			!slices.Equal(r.Columns, t.Columns) || !sameParams(r.Params, t.Params) {
			return false
		}
	}
	return true
}

// sameParams compares params as the registry stores them (JSON), so a
// float that round-trips compares equal.
func sameParams(a, b tiles.StorageParams) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// source is what the runner knows of a layer's table.
type source struct {
	relkind string // pg_class.relkind
	// table is the relation the layer's table names, as this run
	// resolves it (under the schema owner's search_path), with its
	// schema, quoted: the registry's source_table, which serve compares
	// with the table it reads under its own.
	table string
	// readable: the read role may use the table's schema and read every
	// column copied.
	readable bool
	// rowSecurity: row-level security filters what the read role reads
	// of the table, and not (or not as) what the build reads.
	rowSecurity bool
	// invoker: a view the read role reads with its own rights and row
	// security (security_invoker), or a view that reads one, directly
	// or through other views.
	invoker bool
	// viewRowSecurity: a view that reads a table with row-level security
	// enabled, directly or through other views.
	viewRowSecurity bool
	// roleDependent: a view that, or a view it reads that, may filter by
	// who reads it without row security (sql/serving_source.sql).
	roleDependent bool
	// foreign: a foreign table, or a parent (partitioned or by
	// inheritance) with one among its descendants.
	foreign   bool
	signature string // package signature's form; "" for a relation without xmin
	rows      int64
}

// inspect reads what source reports: kind of relation, the table
// resolved, and what role may read of it (cols, the columns copied). A
// table that does not exist is an error.
func inspect(ctx context.Context, q Querier, l *tiles.Layer, role string, cols []string) (source, error) {
	var s source
	rows, err := q.Query(ctx, sourceSQL, l.TableIdent().Sanitize(), role, cols)
	if err != nil {
		return s, fmt.Errorf("inspect %s: %w", l.TableIdent().Sanitize(), err)
	}
	found := false
	var schema, name string
	_, err = pgx.ForEachRow(rows, []any{&s.relkind, &schema, &name, &s.readable, &s.rowSecurity, &s.invoker, &s.viewRowSecurity, &s.roleDependent, &s.foreign},
		func() error { found = true; return nil })
	if err != nil {
		return s, fmt.Errorf("inspect %s: %w", l.TableIdent().Sanitize(), err)
	}
	if !found {
		return s, fmt.Errorf("table %s does not exist", l.TableIdent().Sanitize())
	}
	s.table = pgx.Identifier{schema, name}.Sanitize()
	return s, nil
}

// refusal returns why storage readable by role must not be built from
// the table s describes (cols are the columns it would copy): an error
// when role may not read them (a configuration to fix), else RowSecurity,
// ForeignTable, InvokerView, ViewRowSecurity or RoleDependentView, or ""
// when it may be built.
func (s source) refusal(l *tiles.Layer, role string, cols []string) (string, error) {
	switch {
	case !s.readable:
		return "", fmt.Errorf("role %s may not read every column of %s that the storage would copy (%s), or may not use its schema: refusing to expose them",
			role, l.TableIdent().Sanitize(), strings.Join(cols, ", "))
	case s.foreign:
		return ForeignTable, nil
	case s.rowSecurity:
		return RowSecurity, nil
	case s.invoker:
		return InvokerView, nil
	case s.viewRowSecurity:
		return ViewRowSecurity, nil
	case s.roleDependent:
		return RoleDependentView, nil
	}
	return "", nil
}

// sign fills s.signature and s.rows (package signature): the count,
// newest xmin, checksum of the xmins and fingerprint of the columns of
// tables, partitioned tables and materialized views; the count alone, and
// no signature, for views and foreign tables.
func sign(ctx context.Context, q Querier, l *tiles.Layer, s *source) error {
	sig, err := signature.Read(ctx, q, l.TableIdent().Sanitize(), signature.Versioned(s.relkind))
	if err != nil {
		return err
	}
	s.rows, s.signature = sig.Rows, sig.String()
	return nil
}

// record inserts the registry row of target t, built as relation.
func record(ctx context.Context, tx pgx.Tx, l *tiles.Layer, builder string, t Target, relation string, src source, rows, ms int64) error {
	params, err := json.Marshal(t.Params)
	if err != nil {
		return err
	}
	var zmin, zmax *int
	if t.ZoomMin >= 0 {
		zmin, zmax = &t.ZoomMin, &t.ZoomMax
	}
	_, err = tx.Exec(ctx, registryInsertSQL, l.Name, builder, relation, zmin, zmax, t.GeometryColumn, t.SRID,
		string(t.Kind), t.Columns, string(params), src.table, l.GeometryColumn,
		src.rows, src.signature, rows, ms)
	if err != nil {
		return fmt.Errorf("record %s: %w", relation, err)
	}
	return nil
}
