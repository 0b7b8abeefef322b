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
//     order_by of each cluster cell (so a tile with data is never empty),
//     simplified to the zoom's tolerance (tolerance_px) with ST_Simplify
//     (not repaired: tiles are drawn through ST_AsMVTGeom, which returns
//     valid polygons); each zoom above is simplified from the one below.
//
// Every overview is in EPSG:3857 (geometry column "geom", a GiST index)
// and carries the layer's columns (id, properties, order_by) by their
// names.
type Overview struct{}

// overviewVersion is recorded in each overview's params: a change to what
// the builder writes bumps it, and every overview is rebuilt.
const overviewVersion = 1

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
		p.Version = overviewVersion
		out = append(out, Target{
			Relation: RelationName(l.Name, "ov_z"+strconv.Itoa(z)),
			ZoomMin:  z, ZoomMax: z,
			GeometryColumn: "geom", SRID: 3857, Kind: kind,
			Columns: l.Columns(), Params: p,
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
	Cols                                      []string
	Points, FromSource                        bool
}

// Build creates and fills the overview of target t: from the layer's
// table for the deepest zoom, else from the overview of the zoom below,
// built just before in the same job.
func (Overview) Build(ctx context.Context, job *Job, t Target) (int64, error) {
	l := job.Layer
	d := overviewData{
		Next: job.Next[t.Relation].Sanitize(), Source: l.TableIdent().Sanitize(),
		Points: t.Kind == tiles.KindPoint, Order: l.OrderBySQL("c"),
	}
	for _, c := range t.Columns {
		d.Cols = append(d.Cols, pgx.Identifier{c}.Sanitize())
	}
	below := RelationName(l.Name, "ov_z"+strconv.Itoa(t.ZoomMin+1))
	if from, ok := job.Next[below]; ok {
		d.From, d.Geom, d.GeomExpr = from.Sanitize(), `"geom"`, `t."geom"`
	} else {
		d.FromSource, d.From, d.Geom = true, d.Source, pgx.Identifier{l.GeometryColumn}.Sanitize()
		d.GeomExpr = "t." + d.Geom
		if l.SRID != 3857 {
			d.GeomExpr = "ST_Transform(t." + d.Geom + ", 3857)"
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
