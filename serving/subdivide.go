package serving

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/tiles"
)

// Subdivide builds a line or polygon layer's pieces: one table,
// RelationName(layer, "sub"), holding every row of the layer's table cut
// with ST_Subdivide into pieces of at most the layer's
// subdivide.max_vertices vertices, each with the row's columns (id,
// properties, order_by) and its geometry column by the same names, in the
// same SRID and two dimensions (a row's Z and M are dropped, as tiles drop
// them), with a GiST index on the geometry and a btree on the id.
// Lines are cut with ST_Subdivide as they are. Polygons are first cut
// into chunks by quarters of their box, the chunks that are not valid are
// repaired with ST_MakeValid, then each chunk is cut with ST_Subdivide
// (cutting before the repair is what makes a repair of a country border
// take seconds, not minutes). An invalid polygon is not cut as it is
// (rectangle clipping of an invalid polygon can keep a box of water as
// land): its exterior ring alone is repaired and cut, and from each
// chunk its interior rings, each repaired alone, are subtracted, so that
// the pieces cover what ST_Covers covers on the row (a hole lying outside
// its shell subtracts nothing). The source rows that were not valid
// (ST_IsValid), and so were repaired, are counted in the build's
// Result.Repaired. Tiles of the zooms above the overview band read the
// pieces near the tile and join them back per id (tiles.BuilderSubdivide).
//
// Pieces are built only from a table whose id column identifies its rows:
// no NULL and no repeated id among the rows with a geometry. Otherwise
// the run skips the layer (Reason NullIDs or RepeatedIDs), retires the
// pieces built before, and the layer's tiles read the table, where each
// row is a feature of its own.
//
// Its registry row serves those zooms (tiles.Layer.SubdivideZooms); its
// source_table is the layer's table: the pieces of a table are the rows
// with builder 'subdivide' and source_table::regclass the table's.
type Subdivide struct{}

// subdivideVersion is recorded in the pieces' params: a change to what
// the builder writes bumps it, and every layer's pieces are rebuilt.
// Version 4 builds no pieces from a table with NULL or repeated ids
// (version 3 merged those rows), so the next run checks every layer's.
const subdivideVersion = 4

// chunkPieces is how many pieces' worth of vertices a chunk holds at
// most: polygon rows are cut into chunks by quarters of their box, chunks
// are repaired where invalid, then cut into pieces (lines are not cut
// into chunks; see sql/serving_subdivide_fill.sql).
const chunkPieces = 16

// Name is tiles.BuilderSubdivide.
func (Subdivide) Name() string { return tiles.BuilderSubdivide }

// Targets returns the layer's pieces, or none when it has none (see
// tiles.Layer.SubdivideZooms).
func (Subdivide) Targets(l *tiles.Layer, kind tiles.Kind) []Target {
	lo, hi, ok := l.SubdivideZooms(kind)
	if !ok {
		return nil
	}
	return []Target{{
		Relation: RelationName(l.Name, "sub"),
		ZoomMin:  lo, ZoomMax: hi,
		GeometryColumn: l.GeometryColumn, SRID: l.SRID, Kind: kind,
		Columns: l.Columns(),
		Params:  tiles.StorageParams{Version: subdivideVersion, MaxVertices: l.Subdivide.MaxVertices},
	}}
}

var (
	subdivideCreateTemplate = parse("serving_subdivide_create.sql")
	subdivideFillTemplate   = parse("serving_subdivide_fill.sql")
	subdivideIDsTemplate    = parse("serving_subdivide_ids.sql")
)

// subdivideData fills the pieces templates (see their headers).
type subdivideData struct {
	Next, Source, Geom, SRID, ID string
	Cols                         []string
}

// refuse returns NullIDs or RepeatedIDs when the layer's id column, as
// job.Tx sees the table, does not identify its rows with a geometry: a
// tile joins the pieces back into features by id, and would draw those
// rows as one. The catalog answers for a NOT NULL column under a unique
// key; another id column costs a read of the table.
func (Subdivide) refuse(ctx context.Context, job *Job) (string, error) {
	l := job.Layer
	table := l.TableIdent().Sanitize()
	sql, err := render(subdivideIDsTemplate, subdivideData{
		Source: table, Geom: pgx.Identifier{l.GeometryColumn}.Sanitize(), ID: pgx.Identifier{l.IDColumn}.Sanitize(),
	})
	if err != nil {
		return "", err
	}
	var nulls, repeated bool
	if err := job.Tx.QueryRow(ctx, sql, table, l.IDColumn).Scan(&nulls, &repeated); err != nil {
		return "", fmt.Errorf("check the ids of %s: %w", table, err)
	}
	switch {
	case nulls:
		return NullIDs, nil
	case repeated:
		return RepeatedIDs, nil
	}
	return "", nil
}

// Build creates, fills and indexes the layer's pieces, and adds the rows
// it repaired to job.Repaired.
func (Subdivide) Build(ctx context.Context, job *Job, t Target) (int64, error) {
	l := job.Layer
	next := job.Next[t.Relation]
	d := subdivideData{
		Next: next.Sanitize(), Source: l.TableIdent().Sanitize(),
		Geom: pgx.Identifier{t.GeometryColumn}.Sanitize(), SRID: strconv.Itoa(t.SRID),
		ID: pgx.Identifier{l.IDColumn}.Sanitize(),
	}
	for _, c := range t.Columns {
		d.Cols = append(d.Cols, pgx.Identifier{c}.Sanitize())
	}
	if err := exec(ctx, job.Tx, subdivideCreateTemplate, d); err != nil {
		return 0, err
	}
	fill, err := render(subdivideFillTemplate, d)
	if err != nil {
		return 0, err
	}
	dim := 3
	if t.Kind == tiles.KindLine {
		dim = 2
	}
	var pieces, repaired int64
	if err := job.Tx.QueryRow(ctx, fill, t.Params.MaxVertices, dim, t.Params.MaxVertices*chunkPieces, dim == 3).Scan(&pieces, &repaired); err != nil {
		return 0, fmt.Errorf("fill %s: %w", t.Relation, err)
	}
	job.Repaired += repaired
	for _, ix := range []struct{ suffix, using string }{{"gist", "gist (" + d.Geom + ")"}, {"id", "btree (" + d.ID + ")"}} {
		if _, err := job.Tx.Exec(ctx, "CREATE INDEX "+job.Index(t, ix.suffix).Sanitize()+" ON "+d.Next+" USING "+ix.using); err != nil {
			return 0, fmt.Errorf("index %s: %w", t.Relation, err)
		}
	}
	return pieces, nil
}
