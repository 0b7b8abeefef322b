package density

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/signature"
	queries "github.com/geotoll/geotoll/sql"
)

// DB is what a build needs of PostgreSQL: a read-only transaction.
// *pgxpool.Pool and *pgx.Conn satisfy it. Give it the read-only role.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// buildWorkMem lets the build's grouping stay in memory (a hash of up to a
// million cells); the server's default would spill it to disk.
const buildWorkMem = "64MB"

// Build reads a model of rel from db: in one READ ONLY transaction under
// opts.StatementTimeout (jit off), the planner's row estimate (EXPLAIN, which
// runs nothing) and then ONE aggregate query that groups the features into
// cells (sql/density_cells.sql), sampled when the estimate exceeds
// opts.SampleRows. The caller bounds the wait with ctx, a wait for one of
// opts.Slots included; once it holds a slot, Build adds statement timeout +
// pgcall.AnswerGrace.
func Build(ctx context.Context, db DB, rel Relation, opts Options) (*Model, error) {
	if err := rel.Validate(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	q, err := render(rel)
	if err != nil {
		return nil, err
	}
	return q.build(ctx, db, rel, opts)
}

// ApplicationName is the application_name a model's build runs under.
const ApplicationName = "geotoll-density"

// queryText is a relation's rendered build queries: for a relation in
// another SRID (Relation.Transformed), cells transforms each box with
// ST_Transform, which fails the query on a box outside the projection's
// domain, and safeCells with geotoll.density_transform (migration 11),
// which skips such a box at the price of a subtransaction per row (see
// read).
type queryText struct {
	rows, cells, safeCells string
}

// render fills rel's quoted identifiers into the build queries.
func render(rel Relation) (queryText, error) {
	type fields struct {
		Table, Geom                       string
		LonLat, Transform, Safe, Vertices bool
	}
	data := fields{
		Table:     rel.Table.Sanitize(),
		Geom:      pgx.Identifier{rel.GeometryColumn}.Sanitize(),
		LonLat:    rel.SRID != SRIDWebMercator,
		Transform: rel.Transformed(),
		Vertices:  rel.Kind != Point,
	}
	safe := data
	safe.Safe = true
	var out [3]string
	for i, job := range []struct {
		name string
		data fields
	}{{"density_rows.sql", data}, {"density_cells.sql", data}, {"density_cells.sql", safe}} {
		if i == 2 && !data.Transform {
			break
		}
		text, err := queries.Read(job.name)
		if err != nil {
			return queryText{}, fmt.Errorf("density: %w", err)
		}
		t, err := template.New(job.name).Parse(text)
		if err != nil {
			return queryText{}, fmt.Errorf("density: parse %s: %w", job.name, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, job.data); err != nil {
			return queryText{}, fmt.Errorf("density: render %s: %w", job.name, err)
		}
		out[i] = buf.String()
	}
	return queryText{rows: out[0], cells: out[1], safeCells: out[2]}, nil
}

// build runs the queries and assembles the model.
func (q queryText) build(ctx context.Context, db DB, rel Relation, opts Options) (*Model, error) {
	// The wait for a slot is the caller's to bound (see Slots), not the
	// build's deadline: builds queued behind others would time out before
	// they sent anything. The slot is given back after the rollback below.
	release, err := opts.Slots.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("density %s: wait for a build slot: %w", rel, err)
	}
	defer release()
	start := opts.Now()
	// PostgreSQL enforces the statement timeout itself; a database that
	// does not answer at all is given up on shortly after. (The read again
	// that skips boxes outside the projection's domain has a deadline of
	// its own, from parent: see read.)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, opts.StatementTimeout+pgcall.AnswerGrace)
	defer cancel()
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("density %s: begin: %w", rel, err)
	}
	// Read only: nothing to keep. A rollback that fails closes the connection.
	defer func() { _ = tx.Rollback(ctx) }()
	timeout := strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)
	// pg_stat_activity names the build apart from the requests it prices.
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true),
		set_config('jit', 'off', true), set_config('work_mem', $2, true),
		set_config('application_name', $3, true)`, timeout, buildWorkMem, ApplicationName); err != nil {
		return nil, fmt.Errorf("density %s: settings: %w", rel, err)
	}
	var sig string
	if opts.Shelf != nil {
		if sig, err = sign(ctx, tx, rel); err != nil {
			return nil, fmt.Errorf("density %s: change detector: %w", rel, err)
		}
		if sig != "" {
			if m := opts.Shelf.get(shelfKey(rel, opts), sig); m != nil {
				return m, nil
			}
		}
	}
	m, err := q.read(ctx, parent, tx, rel, opts)
	if err != nil {
		return nil, err
	}
	m.summary.BuiltAt = opts.Now()
	m.summary.Took = m.summary.BuiltAt.Sub(start)
	if sig != "" {
		opts.Shelf.put(shelfKey(rel, opts), sig, m)
	}
	return m, nil
}

// sign reads rel's change detector (package signature) in tx: "" for a
// relation without row versions (a view), whose model is never shelved.
func sign(ctx context.Context, tx pgx.Tx, rel Relation) (string, error) {
	sig, err := signature.Of(ctx, tx, rel.Table.Sanitize())
	return sig.String(), err
}

// read estimates rel's rows and reads its cells, sampled when it is large.
// ctx bounds the build; a read again that skips boxes outside the
// projection's domain gets a bound as long of its own, from parent (the
// context ctx was derived from): it comes after a read that may have used
// most of ctx's.
func (q queryText) read(ctx, parent context.Context, tx pgx.Tx, rel Relation, opts Options) (*Model, error) {
	planned, err := plannedRows(ctx, tx, q.rows)
	if err != nil {
		return nil, fmt.Errorf("density %s: row estimate: %w", rel, err)
	}
	fraction := 1.0
	if planned > float64(opts.SampleRows) {
		fraction = float64(opts.SampleRows) / planned
	}
	args := []any{opts.MaxLevel, float64(uint64(1) << opts.MaxLevel), fraction, opts.HeavyBytes, giantLevel}
	if !rel.Transformed() {
		rows, t, err := cellRows(ctx, tx, q.cells, args, opts.MaxLevel)
		if err != nil {
			return nil, fmt.Errorf("density %s: cells: %w", rel, err)
		}
		return newModel(rel, rows, t, fraction, opts), nil
	}
	north, south := poles(ctx, tx, rel.SRID)
	args = append(args, north[0], north[1], south[0], south[1])
	// The fast query fails on the first box outside the projection's
	// domain (PostGIS has no transform that returns NULL instead); such a
	// relation is read again with the helper that skips those boxes, one
	// subtransaction a row — slower, but a model, where a failed build
	// would be retried, and fail, every RetryInterval for ever.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("density %s: savepoint: %w", rel, err)
	}
	rows, t, err := cellRows(ctx, sp, q.cells, args, opts.MaxLevel)
	if err == nil {
		err = sp.Commit(ctx) // releases the savepoint
	}
	if err != nil {
		if !untransformable(err) {
			return nil, fmt.Errorf("density %s: cells: %w", rel, err)
		}
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, fmt.Errorf("density %s: cells: %w (rollback: %w)", rel, err, rerr)
		}
		sctx, scancel := context.WithTimeout(parent, opts.StatementTimeout+pgcall.AnswerGrace)
		defer scancel()
		if rows, t, err = cellRows(sctx, tx, q.safeCells, args, opts.MaxLevel); err != nil {
			return nil, fmt.Errorf("density %s: cells, skipping boxes outside the projection's domain: %w", rel, err)
		}
	}
	return newModel(rel, rows, t, fraction, opts), nil
}

// untransformable reports whether err is PostGIS failing to transform a
// box (a point outside the projection's domain), which the safe query
// skips — not an unknown SRID, or anything else, which fail the build.
func untransformable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "XX000" && len(pg.Message) > 10 && pg.Message[:10] == "transform:"
}

// poles finds where the north and south poles lie in srid, read once a
// build: a box that holds one holds every longitude up to that latitude,
// though its transformed outline may pass nowhere near it (a square around
// the South Pole in EPSG:3031 reaches only -64°). A pole that is not a
// single point there (a cylindrical or conic projection draws it as a line
// or an arc: the box's outline then follows it), or outside the
// projection's domain, is NULL. Each is read in a savepoint, so that a
// transform PostGIS refuses leaves the transaction usable.
func poles(ctx context.Context, tx pgx.Tx, srid int) (north, south [2]*float64) {
	at := func(lat float64) (out [2]*float64) {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return out
		}
		defer func() { _ = sp.Rollback(ctx) }()
		var x0, y0, x1, y1 float64
		if err := sp.QueryRow(ctx, `SELECT ST_X(a), ST_Y(a), ST_X(b), ST_Y(b)
			FROM ST_Transform(ST_SetSRID(ST_MakePoint(0, $2::float8), 4326), $1::int) AS a,
			     ST_Transform(ST_SetSRID(ST_MakePoint(90, $2::float8), 4326), $1::int) AS b`, srid, lat).Scan(&x0, &y0, &x1, &y1); err != nil {
			return out
		}
		for _, v := range []float64{x0, y0, x1, y1} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return out
			}
		}
		tol := 1e-3 + 1e-9*max(math.Abs(x0), math.Abs(y0))
		if math.Abs(x0-x1) > tol || math.Abs(y0-y1) > tol {
			return out
		}
		return [2]*float64{&x0, &y0}
	}
	return at(90), at(-90)
}

// tallies counts the build query's rows that are no feature's box: the
// boxes that could not be transformed, and the second parts of boxes cut
// at the antimeridian (weighted as the features are).
type tallies struct{ skipped, halves float64 }

// The fit levels the build query gives its tallies.
const (
	tallySkipped = -1
	tallyHalves  = -2
)

// newModel assembles a model from the build query's rows.
func newModel(rel Relation, rows []cellRow, t tallies, fraction float64, opts Options) *Model {
	m := &Model{rel: rel}
	m.giants, rows = takeGiants(rows)
	m.level, m.parts = assemble(rows, opts.MaxLevel, opts.MaxCells, rel.Kind != Point)
	m.summary = Summary{Relation: rel.String(), Sampled: fraction, Level: m.level, Skipped: t.skipped}
	m.summary.Rows = -t.halves
	for i := range rows {
		m.summary.Rows += rows[i].n
	}
	for i := range m.giants {
		m.summary.Rows += m.giants[i].n
	}
	m.summary.Cells += len(m.giants)
	m.summary.Bytes += 48 * len(m.giants)
	for i := range m.parts {
		m.summary.Cells += m.parts[i].cells()
		m.summary.Bytes += m.parts[i].bytes()
	}
	return m
}

// plannedRows is the planner's estimate of the relation's rows.
func plannedRows(ctx context.Context, tx pgx.Tx, query string) (float64, error) {
	var plan []byte
	if err := tx.QueryRow(ctx, query).Scan(&plan); err != nil {
		return 0, err
	}
	var out []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &out); err != nil || len(out) != 1 {
		return 0, fmt.Errorf("unexpected EXPLAIN output %.200q", plan)
	}
	return out[0].Plan.Rows, nil
}

// cellRows runs the aggregate query and keys each cell by its Morton code at
// maxLevel; the tally rows are summed apart.
func cellRows(ctx context.Context, tx pgx.Tx, query string, args []any, maxLevel int) ([]cellRow, tallies, error) {
	var t tallies
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, t, err
	}
	defer rows.Close()
	var gathered rowChunks
	var c cellRow
	var i, j, giant int64
	dest := []any{&c.heavy, &c.f, &i, &j, &c.n, &c.v, &c.sdx, &c.sdy, &c.x0, &c.x1, &c.y0, &c.y1, &c.sx, &c.sy, &giant}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil { // one set of targets for every row: no allocation per row
			return nil, t, err
		}
		switch c.f {
		case tallySkipped:
			t.skipped += c.n
			continue
		case tallyHalves:
			t.halves += c.n
			continue
		}
		if c.f < 0 || c.f > maxLevel || i < 0 || j < 0 || i >= 1<<c.f || j >= 1<<c.f || !(c.n > 0) {
			return nil, t, fmt.Errorf("cell (%d, %d, %d) with %g features is out of range", c.f, i, j, c.n)
		}
		shift := uint(maxLevel - c.f)
		c.key = morton(uint32(i)<<shift, uint32(j)<<shift)
		c.x0, c.x1, c.y0, c.y1, c.sx, c.sy = c.x0/2, c.x1/2, c.y0/2, c.y1/2, c.sx/2, c.sy/2
		c.giant = giant >= 0
		gathered.add(c)
	}
	if err := rows.Err(); err != nil {
		return nil, t, err
	}
	return gathered.rows(), t, nil
}

// rowChunks gathers cell rows in chunks and copies them once, at the end,
// into one slice: appending to one slice copied every row several times
// as it grew, and left the heap it outgrew behind — on the demo's places,
// 92 MB allocated for a 6 MB model (60 MB now), and 40 % of the CPU of a
// server's start-up builds in growslice. Chunks double from 64 rows (a
// small relation's build stays small) up to rowChunk.
type rowChunks struct {
	full [][]cellRow
	last []cellRow
}

func (g *rowChunks) add(c cellRow) {
	if len(g.last) == cap(g.last) {
		if g.last != nil {
			g.full = append(g.full, g.last)
		}
		g.last = make([]cellRow, 0, min(max(2*cap(g.last), 64), rowChunk))
	}
	g.last = append(g.last, c)
}

// rows is every row added, in order.
func (g *rowChunks) rows() []cellRow { return slices.Concat(append(g.full, g.last)...) }

// rowChunk is how many cell rows a chunk of rowChunks holds at most (104
// bytes each).
const rowChunk = 4096
