package opendata

import (
	"bytes"
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	// q quotes the concatenation of its arguments as one identifier.
	"q": func(parts ...string) string { return pgx.Identifier{strings.Join(parts, "")}.Sanitize() },
}).ParseFS(sqlFiles, "sql/*.sql"))

// Options configure a Loader; zero fields take the defaults.
type Options struct {
	Schema string // target schema, default "opendata"
	Reader string // role granted USAGE and SELECT, default "geotoll_reader"
	Points int    // points generated, default 1,000,000
	Seed   uint64 // same seed, same points; default 1
	// Simplify is the tolerance in degrees of countries_simple (default
	// 0.01, about 1 km); negative builds no simplified copy.
	Simplify float64
	// Force reloads tables whose source and parameters have not changed.
	Force bool
}

// Defaults of Options.
const (
	DefaultSchema   = "opendata"
	DefaultReader   = "geotoll_reader"
	DefaultPoints   = 1_000_000
	DefaultSimplify = 0.01
	maxPoints       = 100_000_000
)

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Reader == "" {
		o.Reader = DefaultReader
	}
	if o.Points == 0 {
		o.Points = DefaultPoints
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Simplify == 0 {
		o.Simplify = DefaultSimplify
	}
	var errs []error
	if !identifier.MatchString(o.Schema) || !identifier.MatchString(o.Reader) {
		errs = append(errs, fmt.Errorf("schema %q and reader %q must match %s", o.Schema, o.Reader, identifier))
	}
	if o.Points < 1 || o.Points > maxPoints {
		errs = append(errs, fmt.Errorf("points %d must be within 1..%d", o.Points, maxPoints))
	}
	if math.IsNaN(o.Simplify) || math.IsInf(o.Simplify, 0) {
		errs = append(errs, fmt.Errorf("simplify %v must be finite", o.Simplify))
	}
	return o, errors.Join(errs...)
}

// TableReport is what loading one table did.
type TableReport struct {
	Table       string // schema-qualified
	Source      string // package@version, or what it was derived from
	Rows        int64
	Invalid     int64 // polygons that are not ST_IsValid (kept as they are)
	Vertices    int64 // all polygons' vertices
	MaxVertices int64 // the largest polygon's
	Skipped     bool  // already loaded from the same source and parameters
	Took        time.Duration
}

// Loader loads the open data into one schema through a pool that connects
// as the schema owner (the role `geotoll migrate` uses).
type Loader struct {
	pool *pgxpool.Pool
	opts Options
}

// NewLoader checks opts and returns a Loader.
func NewLoader(pool *pgxpool.Pool, opts Options) (*Loader, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("opendata: %w", err)
	}
	return &Loader{pool: pool, opts: o}, nil
}

// render fills a query template for one table.
func (l *Loader) render(name, table string) (string, error) {
	var b bytes.Buffer
	err := templates.ExecuteTemplate(&b, name, struct{ Schema, Table, Reader string }{l.opts.Schema, table, l.opts.Reader})
	return b.String(), err
}

// exec runs a multi-statement template (no parameters) in tx.
func (l *Loader) exec(ctx context.Context, tx pgx.Tx, name, table string) error {
	q, err := l.render(name, table)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Prepare creates the schema and its bookkeeping table (idempotent) and
// checks that the read role exists.
func (l *Loader) Prepare(ctx context.Context) error {
	var reader bool
	if err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, l.opts.Reader).Scan(&reader); err != nil {
		return fmt.Errorf("opendata: %w", err)
	}
	if !reader {
		return fmt.Errorf("opendata: role %q does not exist: run `geotoll migrate` first", l.opts.Reader)
	}
	q, err := l.render("schema.sql", "")
	if err != nil {
		return err
	}
	if _, err := l.pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("opendata: create schema %s: %w", l.opts.Schema, err)
	}
	return nil
}

// upToDate reports whether table exists and was loaded from source with params.
func (l *Loader) upToDate(ctx context.Context, table, source, params string) (bool, error) {
	if l.opts.Force {
		return false, nil
	}
	var ok bool
	err := l.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND EXISTS (
  SELECT FROM `+pgx.Identifier{l.opts.Schema, "sources"}.Sanitize()+` WHERE tbl = $2 AND source = $3 AND params = $4)`,
		pgx.Identifier{l.opts.Schema, table}.Sanitize(), table, source, params).Scan(&ok)
	return ok, err
}

// build loads one table: unless it is up to date, fill runs in one
// transaction with the loading table created, then the indexes, the swap
// and the bookkeeping row follow in the same transaction.
func (l *Loader) build(ctx context.Context, table, create, source, params string, fill func(pgx.Tx) error) (TableReport, error) {
	start := time.Now()
	rep := TableReport{Table: l.opts.Schema + "." + table, Source: source}
	ok, err := l.upToDate(ctx, table, source, params)
	if err != nil {
		return rep, fmt.Errorf("opendata: %s: %w", table, err)
	}
	rep.Skipped = ok
	if !ok {
		err = pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL client_min_messages = warning`); err != nil {
				return err
			}
			if err := l.exec(ctx, tx, create, table); err != nil {
				return err
			}
			if err := fill(tx); err != nil {
				return err
			}
			for _, q := range []string{"index.sql", "swap.sql"} {
				if err := l.exec(ctx, tx, q, table); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{l.opts.Schema, "sources"}.Sanitize()+` AS s (tbl, source, params, rows)
SELECT $1, $2, $3, count(*) FROM `+pgx.Identifier{l.opts.Schema, table}.Sanitize()+`
ON CONFLICT (tbl) DO UPDATE SET source = excluded.source, params = excluded.params, rows = excluded.rows, loaded_at = now()`,
				table, source, params)
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("opendata: load %s: %w", table, err)
		}
		if _, err := l.pool.Exec(ctx, `ANALYZE `+pgx.Identifier{l.opts.Schema, table}.Sanitize()); err != nil {
			return rep, fmt.Errorf("opendata: analyze %s: %w", table, err)
		}
	}
	if err := l.stats(ctx, table, &rep); err != nil {
		return rep, err
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// stats fills the row and, for polygon tables, the vertex counts.
func (l *Loader) stats(ctx context.Context, table string, rep *TableReport) error {
	t := pgx.Identifier{l.opts.Schema, table}.Sanitize()
	q := `SELECT count(*), 0::bigint, 0::bigint, 0::bigint FROM ` + t
	if table != "points" {
		q = `SELECT count(*), count(*) FILTER (WHERE NOT valid), coalesce(sum(vertices), 0)::bigint, coalesce(max(vertices), 0)::bigint FROM ` + t
	}
	if err := l.pool.QueryRow(ctx, q).Scan(&rep.Rows, &rep.Invalid, &rep.Vertices, &rep.MaxVertices); err != nil {
		return fmt.Errorf("opendata: count %s: %w", table, err)
	}
	return nil
}

// LoadPoints generates the points around cities (the source names them in
// the report and the bookkeeping) and loads them as the points table.
func (l *Loader) LoadPoints(ctx context.Context, cities []City, source string) (TableReport, error) {
	params := fmt.Sprintf("n=%d seed=%d cities=%d", l.opts.Points, l.opts.Seed, len(cities))
	return l.build(ctx, "points", "points.sql", source, params, func(tx pgx.Tx) error {
		rows := &pointRows{gen: NewPoints(cities, l.opts.Points, l.opts.Seed)}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{l.opts.Schema, "points_load"},
			[]string{"id", "name", "kind", "city", "country", "rank", "population", "geom"}, rows)
		if err != nil {
			return fmt.Errorf("copy points: %w", err)
		}
		if n != int64(l.opts.Points) {
			return fmt.Errorf("copy points: %d rows, want %d", n, l.opts.Points)
		}
		return nil
	})
}

// pointRows feeds generated points to COPY, the geometry as EWKB.
type pointRows struct {
	gen  *Points
	ewkb [25]byte
}

func (r *pointRows) Next() bool { return r.gen.Next() }
func (r *pointRows) Err() error { return nil }
func (r *pointRows) Values() ([]any, error) {
	p := r.gen.Point()
	return []any{p.ID, p.Name, p.Kind, p.City, p.Country, int32(p.Rank), int32(p.Population), pointEWKB(r.ewkb[:0], p.Lon, p.Lat)}, nil //nolint:gosec // G115: ranks and populations of the generated points fit int32 (the column's type)
}

// pointEWKB appends a little-endian EWKB Point with SRID 4326 to b.
func pointEWKB(b []byte, lon, lat float64) []byte {
	const (
		wkbPoint = 1
		hasSRID  = 0x20000000
	)
	b = append(b, 1) // little endian
	b = binary.LittleEndian.AppendUint32(b, wkbPoint|hasSRID)
	b = binary.LittleEndian.AppendUint32(b, 4326)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(lon))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(lat))
}

// LoadCountries loads the features of a countries FeatureCollection (at
// most limit of them when limit > 0) as the countries table.
func (l *Loader) LoadCountries(ctx context.Context, r io.Reader, source string, limit int) (TableReport, error) {
	params := fmt.Sprintf("limit=%d", limit)
	return l.build(ctx, "countries", "polygons.sql", source, params, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE countries_geojson (id int, a3 text, geojson text) ON COMMIT DROP`); err != nil {
			return err
		}
		var rows [][]any
		errEnough := errors.New("enough countries")
		err := ReadCountries(r, func(c Country) error {
			if limit > 0 && len(rows) == limit {
				return errEnough
			}
			rows = append(rows, []any{int32(len(rows) + 1), c.A3, string(c.Geometry)}) //nolint:gosec // G115: a few hundred countries
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"countries_geojson"}, []string{"id", "a3", "geojson"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy countries: %w", err)
		}
		return l.exec(ctx, tx, "countries_insert.sql", "countries")
	})
}

// LoadSimplified builds countries_simple from the loaded countries.
func (l *Loader) LoadSimplified(ctx context.Context) (TableReport, error) {
	var src, params string
	err := l.pool.QueryRow(ctx, `SELECT source, params FROM `+pgx.Identifier{l.opts.Schema, "sources"}.Sanitize()+` WHERE tbl = 'countries'`).Scan(&src, &params)
	if err != nil {
		return TableReport{}, fmt.Errorf("opendata: countries_simple needs the countries loaded first: %w", err)
	}
	source := l.opts.Schema + ".countries"
	p := fmt.Sprintf("st_simplify=%g from=%s %s", l.opts.Simplify, src, params)
	return l.build(ctx, "countries_simple", "polygons.sql", source, p, func(tx pgx.Tx) error {
		q, err := l.render("simple_insert.sql", "countries_simple")
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q, l.opts.Simplify)
		return err
	})
}
