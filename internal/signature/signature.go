// Package signature reads a relation's change detector: its row count, the
// newest transaction id that wrote one of its rows, a checksum of the ids
// that wrote its rows, and a fingerprint of its columns' definitions (see
// sql/table_signature.sql). `geotoll prepare` records it with the storage
// it builds and rebuilds that storage when it changes, the geofence layers
// stop reading pieces cut before a write to their table, and the price
// models of an unchanged relation are reused. One reading, one format, so
// that what one package records another can compare.
package signature

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	queries "github.com/geotoll/geotoll/sql"
)

var detector = template.Must(template.New("table_signature.sql").Parse(queries.MustRead("table_signature.sql")))

// Querier is what Read needs of a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Signature is one reading of a relation's change detector.
type Signature struct {
	Rows   int64 // rows counted
	Newest int64 // the newest xmin of a row (0 unless Versioned)
	// Writers is the sum of the hashes of the rows' xmins (0 unless
	// Versioned): it moves when an UPDATE by a transaction older than the
	// newest writer commits, which neither Rows nor Newest show.
	Writers int64
	// Columns is a fingerprint of the definitions of the relation's
	// columns ("" unless Versioned): each one's number, name, type,
	// modifier, collation and generation — not the value a column added
	// with a default holds for older rows (attmissingval), which prints
	// by the session's settings and which VACUUM FULL clears; a column
	// added takes a new number anyway. It moves with the schema changes
	// that change what a row holds without writing it, which neither the
	// count nor the xmins show: a column renamed (two swapped), dropped
	// and added again under its name, a column added with a default.
	Columns   string
	Versioned bool // the relation has row versions: Newest was read
}

// String is the recorded form, "rows:newest:writers:columns", or "" for a
// relation without row versions (a view or a foreign table), whose
// changes the count alone cannot tell: such a relation has no signature
// to compare.
func (s Signature) String() string {
	if !s.Versioned {
		return ""
	}
	return strconv.FormatInt(s.Rows, 10) + ":" + strconv.FormatInt(s.Newest, 10) + ":" + strconv.FormatInt(s.Writers, 10) + ":" + s.Columns
}

// Same reports whether the detector recorded when storage was built
// names the relation whose detector reads current now. A detector
// recorded in an older form — "rows:newest" (before the checksum),
// "rows:newest:writers" (before the columns' fingerprint),
// "rows:newest:writers:<hex>" (the fingerprint's first form, which read
// the columns' missing values by the session's settings; the current one
// is "v2-<hex>") — names it while the parts it has match, the first
// form's fingerprint aside: as much as that form could tell, so that
// servers keep reading what was built until `geotoll prepare` records the
// full form (prepare compares the forms as they are, and rebuilds storage
// recorded in an older one once). A relation without a detector ("")
// matches nothing.
func Same(recorded, current string) bool {
	if current == "" {
		return false
	}
	if recorded == current {
		return true
	}
	parts := strings.Split(recorded, ":")
	if len(parts) < 2 || len(parts) > 4 || slices.Contains(parts[:min(len(parts), 3)], "") {
		return false
	}
	if len(parts) == 4 {
		if parts[3] == "" || strings.HasPrefix(parts[3], columnsForm) {
			return false // the current form, and not current
		}
		// The first form of the fingerprint (it printed columns' missing
		// values by the session's settings): the rest as an older form.
		recorded = strings.Join(parts[:3], ":")
	}
	return strings.HasPrefix(current, recorded+":")
}

// columnsForm begins the columns' fingerprint in its current form; a
// fingerprint without it was read by an earlier form of the detector.
const columnsForm = "v2-"

// Versioned reports whether a relation of kind relkind (pg_class.relkind)
// has row versions: tables, partitioned tables and materialized views.
func Versioned(relkind string) bool {
	return relkind == "r" || relkind == "p" || relkind == "m"
}

// Read reads the detector of table, an identifier quoted with
// pgx.Identifier (it is placed in the query text as it is); versioned says
// whether the relation has row versions to read (see Versioned).
func Read(ctx context.Context, q Querier, table string, versioned bool) (Signature, error) {
	var text strings.Builder
	if err := detector.Execute(&text, struct {
		Table string
		XMin  bool
	}{table, versioned}); err != nil {
		return Signature{}, err
	}
	var args []any
	if versioned {
		args = append(args, table) // the columns' fingerprint finds it by name
	}
	rows, err := q.Query(ctx, text.String(), args...)
	if err != nil {
		return Signature{}, fmt.Errorf("signature of %s: %w", table, err)
	}
	s := Signature{Versioned: versioned}
	if _, err := pgx.ForEachRow(rows, []any{&s.Rows, &s.Newest, &s.Writers, &s.Columns}, func() error { return nil }); err != nil {
		return Signature{}, fmt.Errorf("signature of %s: %w", table, err)
	}
	if s.Columns != "" {
		s.Columns = columnsForm + s.Columns
	}
	return s, nil
}

// Of reads the detector of table (quoted as for Read), finding first
// whether it has row versions. A relation without them is not counted (a
// count through a view may be a whole query's work): its Signature is
// empty, as it has none to compare.
func Of(ctx context.Context, q Querier, table string) (Signature, error) {
	rows, err := q.Query(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`, table)
	if err != nil {
		return Signature{}, fmt.Errorf("signature of %s: %w", table, err)
	}
	kind, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if err != nil {
		return Signature{}, fmt.Errorf("signature of %s: %w", table, err)
	}
	if !Versioned(kind) {
		return Signature{}, nil
	}
	return Read(ctx, q, table, true)
}
