package tiles

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/maptile"
)

// Source is what a tile of a layer at one zoom reads from the database and
// how it generalises what it reads: the relation its query scans (the
// layer's own table, or storage `geotoll prepare` built for that zoom)
// and the generalisation applied on the way to the tile. It is the input
// a per-relation cost model needs: the rows a tile reads are those of
// Relation in the tile's envelope.
type Source struct {
	// Relation is the relation scanned, quoted with Relation.Sanitize().
	Relation       pgx.Identifier
	GeometryColumn string
	SRID           int
	Kind           Kind
	// Builder names the storage Relation is ("overview"), or is empty for
	// the layer's own table.
	Builder string
	// Rows is the number of rows Relation held when it was built,
	// SourceRows the layer's table's then, and BuiltAt when; all zero for
	// the layer's own table.
	Rows, SourceRows int64
	BuiltAt          time.Time
	// Generalization is what the query does at this zoom. Over an
	// overview it describes the overview as built (cells, tolerance),
	// which the query then only clips and encodes.
	Generalization Generalization
	// Clustered is true when the tile's point features are clusters:
	// read from an overview, or clustered by the query itself.
	Clustered bool
	// Pieces is true when Relation holds features cut into pieces, joined
	// back per feature: the layer's pieces, or an overview stored in
	// pieces (Storage.InPieces).
	Pieces bool
}

// Source returns what a tile of the layer at zoom z reads (see Source).
// It follows the serving storage Catalog.Refresh last found, so two calls
// may differ while `geotoll prepare` swaps storage in.
func (l *Layer) Source(z maptile.Zoom) Source {
	return l.plan().zoom(z).source
}

// SQL returns the constant query text a tile of the layer at zoom z runs
// (see sql/tile_points.sql and sql/tile_lines_polygons.sql).
func (l *Layer) SQL(z maptile.Zoom) string {
	return l.plan().zoom(z).sql
}

// Kind returns the layer's geometry kind: configured, read from the
// database by Catalog.Refresh, or KindMixed while unknown.
func (l *Layer) Kind() Kind { return l.plan().kind }
