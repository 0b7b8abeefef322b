package tiles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	queries "github.com/geotoll/geotoll/sql"
)

// Discovery finds layers in the database itself, as pg_tileserv and martin
// do: every table or view with a geometry column, in the given schemas,
// that the connected role may read. It is opt-in; configured layers are
// the default.
type Discovery struct {
	Schemas []string
	// MaxProperties caps a discovered layer's properties (0:
	// DefaultMaxProperties), and MaxTextLength the declared length of a
	// text column offered as one (0: DefaultMaxTextLength).
	MaxProperties, MaxTextLength int
	// Template gives every discovered layer its zoom range, extent,
	// buffer, feature cap, statement timeout and max age; zero fields take
	// the package defaults.
	Template Layer
}

// Validate checks d's settings as every layer it discovers would have
// them (the Template's zero fields taking the layer defaults), so that a
// setting no layer could have is refused before any table is found, not
// once one is. Its errors name the settings (minzoom, max_features…), not
// a layer.
func (d Discovery) Validate() error {
	var errs []error
	if d.MaxProperties < 0 || d.MaxTextLength < 0 {
		errs = append(errs, fmt.Errorf("max_properties %d and max_text_length %d must not be negative", d.MaxProperties, d.MaxTextLength))
	}
	l := d.Template
	l.withDefaults()
	return errors.Join(append(errs, l.validateSettings()...)...)
}

// Defaults of Discovery's bounds on properties.
const (
	DefaultMaxProperties = 16
	DefaultMaxTextLength = 256
)

// Querier is what Discover needs of a pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Discover returns a layer for each geometry column that d finds, except
// those that existing layers already serve (same table and geometry
// column). Names come from the database and are only ever quoted with
// pgx.Identifier (a table named `we"ird; drop` is a table like any other);
// a layer's own name is derived from them: the table name (with the column
// when a table has several geometry columns), made URL-safe
// ([A-Za-z0-9_-], at most 64 bytes), prefixed with its schema or numbered
// when it would collide with another layer.
//
// The feature id is the table's single-column integer primary key; without
// one the layer is served WithoutID. The properties are the readable
// columns of a type MVT carries whose values are bounded in size — numbers,
// booleans, and text declared with a length up to MaxTextLength — at most
// MaxProperties of them, in column order. Free text (text, varchar without
// a length) is never discovered: a tile carries every row's value, and one
// value may be megabytes; name such a column in a configured layer to
// serve it.
func Discover(ctx context.Context, q Querier, d Discovery, existing []Layer) ([]Layer, error) {
	if len(d.Schemas) == 0 {
		return nil, nil
	}
	maxProps, maxText := d.MaxProperties, d.MaxTextLength
	if maxProps <= 0 {
		maxProps = DefaultMaxProperties
	}
	if maxText <= 0 {
		maxText = DefaultMaxTextLength
	}
	rows, err := q.Query(ctx, discoverSQL, d.Schemas, maxText)
	if err != nil {
		return nil, fmt.Errorf("discover layers: %w", err)
	}
	type found struct {
		schema, table, geom string
		srid                int
		id                  *string
		columns             []string
	}
	var all []found
	var f found
	_, err = pgx.ForEachRow(rows, []any{&f.schema, &f.table, &f.geom, &f.srid, &f.id, &f.columns}, func() error {
		all = append(all, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("discover layers: %w", err)
	}

	type table struct{ schema, name string }
	geoms := make(map[table]int) // geometry columns per table
	for _, f := range all {
		geoms[table{f.schema, f.table}]++
	}
	served := make(map[[3]string]bool)
	taken := make(map[string]bool)
	for _, l := range existing {
		schema, name := l.Schema, l.Table
		if schema == "" {
			parts := strings.Split(l.Table, ".")
			schema, name = "public", parts[len(parts)-1]
			if len(parts) == 2 {
				schema = parts[0]
			}
		}
		served[[3]string{schema, name, l.GeometryColumn}] = true
		taken[l.Name] = true
	}

	var out []Layer
	for _, f := range all {
		if served[[3]string{f.schema, f.table, f.geom}] {
			continue
		}
		base := f.table
		if geoms[table{f.schema, f.table}] > 1 {
			base += "_" + f.geom
		}
		l := d.Template
		l.Name = uniqueName(taken, safeName(base), safeName(f.schema+"_"+base))
		taken[l.Name] = true
		l.Schema, l.Table, l.GeometryColumn, l.SRID = f.schema, f.table, f.geom, f.srid
		l.IDColumn, l.WithoutID = "", f.id == nil
		if f.id != nil {
			l.IDColumn = *f.id
		}
		l.Properties = properties(f.columns, l, maxProps)
		out = append(out, l)
	}
	return out, nil
}

// properties picks a discovered layer's properties from its columns: at
// most max, never a name a property cannot have (reservedNames, which
// would make the whole catalog fail), nor "id" when features carry ids.
func properties(columns []string, l Layer, max int) []string {
	var out []string
	for _, c := range columns {
		if slices.Contains(reservedNames, c) ||
			(!l.WithoutID && (c == "id" || c == l.IDColumn)) {
			continue
		}
		if len(out) == max {
			break
		}
		out = append(out, c)
	}
	return out
}

var discoverSQL = queries.MustRead("discover.sql")

// safeName maps a database name to a layer name: bytes outside
// [A-Za-z0-9_-] become '_', and it is cut to 64 bytes.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "layer"
	}
	return string(b)
}

// uniqueName returns the first candidate not taken, else the last one
// numbered -2, -3, ….
func uniqueName(taken map[string]bool, candidates ...string) string {
	for _, c := range candidates {
		if !taken[c] {
			return c
		}
	}
	last := candidates[len(candidates)-1]
	for n := 2; ; n++ {
		suffix := "-" + strconv.Itoa(n)
		c := last[:min(len(last), 64-len(suffix))] + suffix
		if !taken[c] {
			return c
		}
	}
}
