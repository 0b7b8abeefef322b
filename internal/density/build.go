package density

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"text/template"

	"github.com/jackc/pgx/v5"

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

// queryText is a relation's rendered build queries.
type queryText struct{ rows, cells string }

// render fills rel's quoted identifiers into the build queries.
func render(rel Relation) (queryText, error) {
	data := struct {
		Table, Geom                 string
		LonLat, Transform, Vertices bool
	}{
		Table:     rel.Table.Sanitize(),
		Geom:      pgx.Identifier{rel.GeometryColumn}.Sanitize(),
		LonLat:    rel.SRID != SRIDWebMercator,
		Transform: rel.Transformed(),
		Vertices:  rel.Kind != Point,
	}
	var out [2]string
	for i, name := range []string{"density_rows.sql", "density_cells.sql"} {
		text, err := queries.Read(name)
		if err != nil {
			return queryText{}, fmt.Errorf("density: %w", err)
		}
		t, err := template.New(name).Parse(text)
		if err != nil {
			return queryText{}, fmt.Errorf("density: parse %s: %w", name, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return queryText{}, fmt.Errorf("density: render %s: %w", name, err)
		}
		out[i] = buf.String()
	}
	return queryText{rows: out[0], cells: out[1]}, nil
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
	// does not answer at all is given up on shortly after.
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
	m, err := q.read(ctx, tx, rel, opts)
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
func (q queryText) read(ctx context.Context, tx pgx.Tx, rel Relation, opts Options) (*Model, error) {
	planned, err := plannedRows(ctx, tx, q.rows)
	if err != nil {
		return nil, fmt.Errorf("density %s: row estimate: %w", rel, err)
	}
	fraction := 1.0
	if planned > float64(opts.SampleRows) {
		fraction = float64(opts.SampleRows) / planned
	}
	rows, err := q.cellRows(ctx, tx, opts.MaxLevel, fraction, opts.HeavyBytes)
	if err != nil {
		return nil, fmt.Errorf("density %s: cells: %w", rel, err)
	}
	return newModel(rel, rows, fraction, opts), nil
}

// newModel assembles a model from the build query's rows.
func newModel(rel Relation, rows []cellRow, fraction float64, opts Options) *Model {
	m := &Model{rel: rel}
	m.giants, rows = takeGiants(rows)
	m.level, m.parts = assemble(rows, opts.MaxLevel, opts.MaxCells, rel.Kind != Point)
	m.summary = Summary{Relation: rel.String(), Sampled: fraction, Level: m.level}
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
// maxLevel.
func (q queryText) cellRows(ctx context.Context, tx pgx.Tx, maxLevel int, fraction float64, heavy int) ([]cellRow, error) {
	rows, err := tx.Query(ctx, q.cells, maxLevel, float64(uint64(1)<<maxLevel), fraction, heavy, giantLevel)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gathered rowChunks
	var c cellRow
	var i, j, giant int64
	dest := []any{&c.heavy, &c.f, &i, &j, &c.n, &c.v, &c.sdx, &c.sdy, &c.x0, &c.x1, &c.y0, &c.y1, &c.sx, &c.sy, &giant}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil { // one set of targets for every row: no allocation per row
			return nil, err
		}
		if c.f < 0 || c.f > maxLevel || i < 0 || j < 0 || i >= 1<<c.f || j >= 1<<c.f || !(c.n > 0) {
			return nil, fmt.Errorf("cell (%d, %d, %d) with %g features is out of range", c.f, i, j, c.n)
		}
		shift := uint(maxLevel - c.f)
		c.key = morton(uint32(i)<<shift, uint32(j)<<shift)
		c.x0, c.x1, c.y0, c.y1, c.sx, c.sy = c.x0/2, c.x1/2, c.y0/2, c.y1/2, c.sx/2, c.sy/2
		c.giant = giant >= 0
		gathered.add(c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return gathered.rows(), nil
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
