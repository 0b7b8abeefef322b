package serving

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"text/template"

	"github.com/jackc/pgx/v5"

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
// the builder writes bumps it, and every overview is rebuilt. Version 3
// stores the layer's columns under names of its own and lists those in
// the registry's columns (version 1 stored them by theirs, and failed on
// a column called cx, cy, point_count or geom; version 2 listed the
// layer's names in columns, which a server reading them by those names
// took for columns the overview has), so the next run rebuilds every
// overview once.
const overviewVersion = 3

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
)

func parse(name string) *template.Template {
	return template.Must(template.New(name).Parse(queries.MustRead(name)))
}

// overviewData fills the overview templates (see their headers).
type overviewData struct {
	Next, Source, From, Geom, GeomExpr, Order string
	Cols                                      []overviewColumn
	Points, FromSource                        bool
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
	below := RelationName(l.Name, "ov_z"+strconv.Itoa(t.ZoomMin+1))
	if from, ok := job.Next[below]; ok {
		d.From, d.Geom, d.GeomExpr = from.Sanitize(), `"geom"`, `t."geom"`
		for i := range d.Cols {
			d.Cols[i].Read = d.Cols[i].As // the overview below stores them as this one does
		}
	} else {
		// The table's geometries may have Z or M, which the overview's
		// column (two dimensions, as tiles draw them) refuses.
		d.FromSource, d.From, d.Geom = true, d.Source, pgx.Identifier{l.GeometryColumn}.Sanitize()
		d.GeomExpr = "ST_Force2D(t." + d.Geom + ")"
		if l.SRID != 3857 {
			d.GeomExpr = "ST_Transform(" + d.GeomExpr + ", 3857)"
		}
	}
	if err := exec(ctx, job.Tx, createTemplate, d); err != nil {
		return 0, err
	}
	if d.Order == "" {
		d.Order = "c.geom" // no id, no order_by: the geometry is the only key
	}
	fill, args := pointsTemplate, []any{tiles.TileWidth(0) / 2, t.Params.CellMetres}
	if !d.Points {
		fill = linesTemplate
		args = []any{t.Params.ToleranceMetres, t.Params.MinSizeMetres, tiles.TileWidth(0) / 2, t.Params.CellMetres}
	}
	sql, err := render(fill, d)
	if err != nil {
		return 0, err
	}
	tag, err := job.Tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("fill %s: %w", t.Relation, err)
	}
	if _, err := job.Tx.Exec(ctx, "CREATE INDEX "+job.Index(t, "gist").Sanitize()+" ON "+d.Next+" USING gist (geom)"); err != nil {
		return 0, fmt.Errorf("index %s: %w", t.Relation, err)
	}
	return tag.RowsAffected(), nil
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
