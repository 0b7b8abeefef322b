package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	queries "github.com/geotoll/geotoll/sql"
	"github.com/geotoll/geotoll/tiles"
)

// Overview builds a layer's overviews: one table per zoom of its overview
// band (tiles.Layer.OverviewZooms), holding what a tile of that zoom
// draws, so that a low-zoom tile reads thousands of rows instead of the
// whole table.
//
//   - Points: one row per cluster cell of the zoom (the grid
//     tiles.Generalize.At defines), the cell's first point in the layer's
//     order_by with point_count, the number of points in the cell, and
//     the cell indices cx, cy. The deepest zoom is clustered from the
//     layer's table; each zoom above merges four cells of the one below
//     (cells halve exactly), so the build reads the table once.
//   - Lines, polygons (and mixed): every feature at least the zoom's
//     smallest size (min_size_px) and, of the smaller ones, the first in
//     order_by of each cluster cell (so a tile with data is never empty,
//     but where a feature's only part on it is one its simplification
//     drops: an island under a pixel beside a larger mainland),
//     simplified to the zoom's tolerance (tolerance_px) with ST_Simplify
//     (not repaired: tiles are drawn through ST_AsMVTGeom, which returns
//     valid polygons); each zoom above is simplified from the one below.
//     Unless the layer's subdivide is off, each zoom's features are then
//     stored in pieces of at most subdivide.max_vertices vertices (see
//     sql/serving_overview_pieces.sql: cut ring by ring), each with
//     its feature's columns, its number in the overview
//     (tiles.PiecesKey: the pieces of a feature share it, whatever the
//     layer's ids) and its whole box (tiles.PiecesBox), with a btree on
//     the number: a tile reads the pieces near it and joins them back
//     per feature (tiles.Storage.InPieces). Whole, a detailed border
//     keeps most of its vertices at z5–z7 (Natural Earth's 10 m Russia:
//     950,963 at z7), and every tile its box meets reads and clips all
//     of them: a border that crosses the antimeridian meets every tile
//     of its latitudes. A feature the cut leaves nothing of is stored
//     whole, as one piece. The whole features are kept in a table of the
//     build's own (unlogged, in geotoll_serving, dropped before the build
//     commits: never seen outside it) for the zoom above to be simplified
//     from.
//
// Every overview is in EPSG:3857 and two dimensions (geometry column
// "geom", a GiST index; a table's Z and M are dropped, as tiles drop them)
// and carries the layer's columns (id, properties, order_by) under names
// of its own, c0, c1… in the order of tiles.Layer.Columns (the names the
// tile queries carry them under, tiles.Layer.CarriedColumns): beside the
// columns the overview names itself (geom; cx, cy and point_count), a
// layer's column by one of those names would be a second column by that
// name, and which names a table's columns have is not the builder's to
// choose. Its registry row lists those names in columns, the names the
// relation holds, and the layer's columns they hold in
// params.source_columns (tiles.StorageParams.SourceColumns), in the same
// order: a server that predates source_columns reads a layer's columns by
// their own names from storage whose columns list them all, so it finds
// them missing from these and reads the layer's table instead of failing
// on a column the overview does not have.
type Overview struct{}

// overviewVersion is recorded in each overview's params: a change to what
// the builder writes bumps it, and every overview is rebuilt. Version 4
// stores line and polygon overviews in pieces (version 3 stored their
// features whole; it stored the layer's columns under names of its own
// and listed those in the registry's columns, where version 1 stored
// them by theirs, and failed on a column called cx, cy, point_count or
// geom, and version 2 listed the layer's names in columns, which a server
// reading them by those names took for columns the overview has), so the
// next run rebuilds every overview once. A server that predates pieces
// finds an overview's params (max_vertices) not its layer's and reads the
// layer's table at that zoom: not wrong, but slow on a large table, whose
// low-zoom tiles may then pass their statement timeout.
const overviewVersion = 4

// Name is tiles.BuilderOverview.
func (Overview) Name() string { return tiles.BuilderOverview }

// Targets returns one overview per zoom of l's band, deepest first.
func (Overview) Targets(l *tiles.Layer, kind tiles.Kind) []Target {
	lo, hi, ok := l.OverviewZooms(kind)
	if !ok || !kind.Valid() {
		return nil
	}
	var out []Target
	for z := hi; z >= lo; z-- {
		// What the layer reads an overview for (the server compares them
		// too), and the builder's version.
		p := l.OverviewParams(kind, z)
		p.Version, p.SourceColumns = overviewVersion, l.Columns()
		out = append(out, Target{
			Relation: RelationName(l.Name, "ov_z"+strconv.Itoa(z)),
			ZoomMin:  z, ZoomMax: z,
			GeometryColumn: "geom", SRID: 3857, Kind: kind,
			Columns: l.CarriedColumns(), Params: p,
		})
	}
	return out
}

var (
	createTemplate = parse("serving_overview_create.sql")
	pointsTemplate = parse("serving_overview_points.sql")
	linesTemplate  = parse("serving_overview_lines.sql")
	piecesTemplate = parse("serving_overview_pieces.sql")
)

func parse(name string) *template.Template {
	return template.Must(template.New(name).Parse(queries.MustRead(name)))
}

// overviewData fills the overview templates (see their headers).
type overviewData struct {
	Next, Source, From, Geom, GeomExpr, Order string
	Cols                                      []overviewColumn
	Points, FromSource, Pieces, Scratch       bool
}

// fillFrom runs the fill template fill with d and args. When safe is
// set (d.GeomExpr transforms a table in another SRID than 3857), it runs
// in a savepoint: should ST_Transform fail on a row (a vertex past a
// pole), it runs again with safe as the geometry, through
// tiles.TransformSafe, which keeps the part of such a row Web Mercator
// shows or leaves the row out, as the tiles above the overviews draw it —
// at a subtransaction per row, so only then.
func fillFrom(ctx context.Context, tx pgx.Tx, fill *template.Template, d overviewData, safe string, args []any) (pgconn.CommandTag, error) {
	sql, err := render(fill, d)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if safe == "" {
		return tx.Exec(ctx, sql, args...)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := sp.Exec(ctx, sql, args...)
	if err == nil {
		return tag, sp.Commit(ctx)
	}
	if !pgcall.TransformFailed(err) {
		return tag, err
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return tag, errors.Join(err, rerr)
	}
	d.GeomExpr = safe
	if sql, err = render(fill, d); err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

// sourceGeometry is the expression of the geometry column geom (quoted,
// over alias t) of a layer's table in srid as an overview stores it: two
// dimensions, in EPSG:3857 (a geographic SRID's parts past ±180° moved
// first: wrapped) — and, for a table in another SRID than 3857, the same
// through tiles.TransformSafe (safe), else "".
func sourceGeometry(ctx context.Context, tx pgx.Tx, geom string, srid int) (expr, safe string, err error) {
	expr = "ST_Force2D(t." + geom + ")"
	if srid == 3857 {
		return expr, "", nil
	}
	geographic, err := isGeographic(ctx, tx, srid)
	if err != nil {
		return "", "", err
	}
	if geographic {
		expr = wrapped(geom)
	}
	return "ST_Transform(" + expr + ", 3857)", tiles.TransformSafe + "(" + expr + ", 3857)", nil
}

// isGeographic reports whether srid is a geographic SRID (longitude and
// latitude: EPSG:4326, 4269, 4258…), as PostGIS's spatial_ref_sys says.
func isGeographic(ctx context.Context, tx pgx.Tx, srid int) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM spatial_ref_sys WHERE srid = $1 AND proj4text LIKE '%+proj=longlat%')`, srid).Scan(&ok)
	return ok, err
}

// wrapped is the two-dimensional geometry of geom (a quoted column over
// alias t) in a geographic SRID, its parts past ±180° of longitude moved
// by 360°: transformed as it is, PROJ wraps 181° to -179°, and a polygon
// from 179° to 181° became a band round the world, drawn on every tile of
// its latitudes. Only a row whose box goes past ±180° is cut, by
// rectangle clipping (ST_WrapX cuts with GEOS, which throws on an invalid
// row and so failed the whole build).
func wrapped(geom string) string {
	g := "ST_Force2D(t." + geom + ")"
	return "CASE WHEN ST_XMin(t." + geom + ") >= -180 AND ST_XMax(t." + geom + ") <= 180 THEN " + g +
		" ELSE (SELECT ST_Collect(w.g) FROM unnest(ARRAY[" +
		"ST_ClipByBox2D(" + g + ", ST_MakeEnvelope(-180, -1e9, 180, 1e9)::box2d), " +
		"ST_Translate(ST_ClipByBox2D(" + g + ", ST_MakeEnvelope(180, -1e9, 540, 1e9)::box2d), -360, 0), " +
		"ST_Translate(ST_ClipByBox2D(" + g + ", ST_MakeEnvelope(-540, -1e9, -180, 1e9)::box2d), 360, 0)]) AS w(g) " +
		"WHERE NOT ST_IsEmpty(w.g)) END"
}

// overviewColumn is one of the layer's columns an overview stores, each
// name quoted: Column in the layer's table, Read in the relation a fill
// reads (the table, or the overview of the zoom below), As in the
// overview.
type overviewColumn struct{ Column, Read, As string }

// Build creates and fills the overview of target t: from the layer's
// table for the deepest zoom, else from the overview of the zoom below,
// built just before in the same job.
func (Overview) Build(ctx context.Context, job *Job, t Target) (int64, error) {
	l := job.Layer
	d := overviewData{
		Next: job.Next[t.Relation].Sanitize(), Source: l.TableIdent().Sanitize(),
		Points: t.Kind == tiles.KindPoint, Order: l.CarriedOrderBySQL("c"),
	}
	if len(t.Params.SourceColumns) != len(t.Columns) {
		return 0, fmt.Errorf("%s: %d source columns for %d columns", t.Relation, len(t.Params.SourceColumns), len(t.Columns))
	}
	for i, c := range t.Params.SourceColumns {
		col, as := pgx.Identifier{c}.Sanitize(), pgx.Identifier{t.Columns[i]}.Sanitize()
		d.Cols = append(d.Cols, overviewColumn{Column: col, Read: col, As: as})
	}
	var safe string // the fill's geometry through tiles.TransformSafe, when it transforms
	var err error
	below := RelationName(l.Name, "ov_z"+strconv.Itoa(t.ZoomMin+1))
	from, ok := job.whole[below]
	if !ok {
		from, ok = job.Next[below]
	}
	if ok {
		d.From, d.Geom, d.GeomExpr = from.Sanitize(), `"geom"`, `t."geom"`
		for i := range d.Cols {
			d.Cols[i].Read = d.Cols[i].As // the overview below stores them as this one does
		}
	} else {
		// The table's geometries may have Z or M, which the overview's
		// column (two dimensions, as tiles draw them) refuses.
		d.FromSource, d.From, d.Geom = true, d.Source, pgx.Identifier{l.GeometryColumn}.Sanitize()
		if d.GeomExpr, safe, err = sourceGeometry(ctx, job.Tx, d.Geom, l.SRID); err != nil {
			return 0, err
		}
	}
	pieces := !d.Points && t.Params.MaxVertices > 0
	if pieces {
		// The whole features first, into a table of the build's own.
		d.Next, d.Scratch = wholeIdent(job, t).Sanitize(), true
	}
	if err := exec(ctx, job.Tx, createTemplate, d); err != nil {
		return 0, err
	}
	if pieces {
		if _, err := job.Tx.Exec(ctx, "ALTER TABLE "+d.Next+" ADD COLUMN "+pgx.Identifier{tiles.PiecesKey}.Sanitize()+" bigint GENERATED ALWAYS AS IDENTITY"); err != nil {
			return 0, fmt.Errorf("number %s: %w", t.Relation, err)
		}
	}
	if d.Order == "" {
		d.Order = "c.geom" // no id, no order_by: the geometry is the only key
	}
	fill, args := pointsTemplate, []any{tiles.TileWidth(0) / 2, t.Params.CellMetres}
	if !d.Points {
		fill = linesTemplate
		args = []any{t.Params.ToleranceMetres, t.Params.MinSizeMetres, tiles.TileWidth(0) / 2, t.Params.CellMetres}
	}
	tag, err := fillFrom(ctx, job.Tx, fill, d, safe, args)
	if err != nil {
		return 0, fmt.Errorf("fill %s: %w", t.Relation, err)
	}
	rows := tag.RowsAffected()
	if pieces {
		if rows, err = inPieces(ctx, job, t, d); err != nil {
			return 0, err
		}
	}
	next := job.Next[t.Relation].Sanitize()
	if _, err := job.Tx.Exec(ctx, "CREATE INDEX "+job.Index(t, "gist").Sanitize()+" ON "+next+" USING gist (geom)"); err != nil {
		return 0, fmt.Errorf("index %s: %w", t.Relation, err)
	}
	if pieces {
		key := pgx.Identifier{tiles.PiecesKey}.Sanitize()
		if _, err := job.Tx.Exec(ctx, "CREATE INDEX "+job.Index(t, "fid").Sanitize()+" ON "+next+" USING btree ("+key+")"); err != nil {
			return 0, fmt.Errorf("index %s: %w", t.Relation, err)
		}
	}
	return rows, nil
}

// overviewPiecesData fills sql/serving_overview_pieces.sql (see its
// header).
type overviewPiecesData struct {
	Next, From string
	Cols       []string
	Lines      bool
}

// wholeMissingSQL stores whole, as one piece, each feature of an
// overview the cut left nothing of (a ring the repair leaves empty).
// Template: the pieces' table, the whole features', the carried columns
// as listed and as read from the whole features (w).
const wholeMissingSQL = `INSERT INTO %[1]s (geom%[3]s, fid, box)
SELECT w.geom%[4]s, w.fid, Box2D(w.geom)
FROM %[2]s AS w
WHERE NOT ST_IsEmpty(w.geom) AND NOT EXISTS (SELECT FROM %[1]s AS p WHERE p.fid = w.fid)`

// inPieces creates and fills the overview of target t, stored in pieces,
// from the whole features the scratch table d.Next holds (kept in
// job.whole for the zoom above, and dropped once that is built, or now at
// the band's last zoom), and returns the pieces it holds.
func inPieces(ctx context.Context, job *Job, t Target, d overviewData) (int64, error) {
	whole := d.Next
	if job.whole == nil {
		job.whole = map[string]pgx.Identifier{}
	}
	job.whole[t.Relation] = wholeIdent(job, t)
	d.Next, d.Scratch, d.Pieces = job.Next[t.Relation].Sanitize(), false, true
	if err := exec(ctx, job.Tx, createTemplate, d); err != nil {
		return 0, err
	}
	p := overviewPiecesData{Next: d.Next, From: whole, Lines: t.Kind == tiles.KindLine}
	var cols, read strings.Builder
	for _, c := range d.Cols {
		p.Cols = append(p.Cols, c.As)
		cols.WriteString(", " + c.As)
		read.WriteString(", w." + c.As)
	}
	sql, err := render(piecesTemplate, p)
	if err != nil {
		return 0, err
	}
	tag, err := job.Tx.Exec(ctx, sql, t.Params.MaxVertices, tiles.TileWidth(0)/2, tiles.TileWidth(maptile.Zoom(t.ZoomMin))) //nolint:gosec // G115: zooms are 0..tiles.MaxZoom
	if err != nil {
		return 0, fmt.Errorf("cut %s: %w", t.Relation, err)
	}
	pieces := tag.RowsAffected()
	if tag, err = job.Tx.Exec(ctx, fmt.Sprintf(wholeMissingSQL, d.Next, whole, cols.String(), read.String())); err != nil {
		return 0, fmt.Errorf("fill %s: %w", t.Relation, err)
	}
	// The zoom below was simplified from; the band's last zoom has no
	// zoom above it to be.
	if err := dropWhole(ctx, job, RelationName(job.Layer.Name, "ov_z"+strconv.Itoa(t.ZoomMin+1))); err != nil {
		return 0, err
	}
	if lo, _, _ := job.Layer.OverviewZooms(job.Kind); t.ZoomMin <= lo {
		if err := dropWhole(ctx, job, t.Relation); err != nil {
			return 0, err
		}
	}
	return pieces + tag.RowsAffected(), nil
}

// wholeIdent is the scratch table of the whole features of target t, an
// overview stored in pieces: in the serving schema, which the builder
// owns (a temporary table would need the database's TEMPORARY right,
// which a hardened database takes from PUBLIC).
func wholeIdent(job *Job, t Target) pgx.Identifier {
	return pgx.Identifier{tiles.ServingSchema, job.Next[t.Relation][1] + "_whole"}
}

// dropWhole drops the scratch table of whole features kept for relation
// rel, if any.
func dropWhole(ctx context.Context, job *Job, rel string) error {
	w, ok := job.whole[rel]
	if !ok {
		return nil
	}
	delete(job.whole, rel)
	if _, err := job.Tx.Exec(ctx, "DROP TABLE "+w.Sanitize()); err != nil {
		return fmt.Errorf("drop %s: %w", w.Sanitize(), err)
	}
	return nil
}

func render(t *template.Template, data any) (string, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return buf.String(), nil
}

func exec(ctx context.Context, tx pgx.Tx, t *template.Template, data any) error {
	sql, err := render(t, data)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", t.Name(), err)
	}
	return nil
}
