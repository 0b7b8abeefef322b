package tiles

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	queries "github.com/geotoll/geotoll/sql"
)

// Kind is the geometry kind of a layer. It chooses the layer's tile query
// (sql/tile_points.sql or sql/tile_lines_polygons.sql) and its
// generalisation: points are clustered, lines and polygons simplified.
type Kind string

// Geometry kinds. A layer whose configuration names none has its kind read
// from the database (geometry_columns) at start-up by Catalog.Refresh;
// until then, and for a column that holds several kinds, it is KindMixed.
const (
	KindPoint   Kind = "point"
	KindLine    Kind = "line"
	KindPolygon Kind = "polygon"
	// KindMixed is drawn by the line and polygon query, which keeps the
	// points among its features unclustered.
	KindMixed Kind = "mixed"
)

// Valid reports whether k is one of the kinds (the empty Kind, "read it
// from the database", is not).
func (k Kind) Valid() bool {
	switch k {
	case KindPoint, KindLine, KindPolygon, KindMixed:
		return true
	}
	return false
}

// KindOfType maps a PostGIS geometry type name (geometry_columns.type, or
// GeometryType()) to a Kind: POINT and MULTIPOINT are points, and so on;
// GEOMETRY, GEOMETRYCOLLECTION and anything unknown are KindMixed. The Z,
// M and ZM variants count as their 2D type.
func KindOfType(typ string) Kind {
	t := strings.ToUpper(strings.TrimSpace(typ))
	t = strings.TrimSuffix(t, "ZM")
	t = strings.TrimSuffix(t, "Z")
	t = strings.TrimSuffix(t, "M")
	switch t {
	case "POINT", "MULTIPOINT":
		return KindPoint
	case "LINESTRING", "MULTILINESTRING":
		return KindLine
	case "POLYGON", "MULTIPOLYGON":
		return KindPolygon
	}
	return KindMixed
}

var kindSQL = queries.MustRead("layer_kind.sql")

// ReadKind reads the layer's geometry kind from geometry_columns through
// q (see KindOfType). A relation or column q cannot see is an error.
func (l *Layer) ReadKind(ctx context.Context, q Querier) (Kind, error) {
	schema, table := l.schemaTable()
	rows, err := q.Query(ctx, kindSQL, schema, table, l.GeometryColumn)
	if err != nil {
		return "", fmt.Errorf("layer %q: geometry kind: %w", l.Name, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", fmt.Errorf("layer %q: geometry kind: %w", l.Name, err)
		}
		return "", fmt.Errorf("layer %q: geometry kind: %s.%s.%s is not in geometry_columns; set geometry_kind", l.Name, schema, table, l.GeometryColumn)
	}
	var typ string
	if err := rows.Scan(&typ); err != nil {
		return "", fmt.Errorf("layer %q: geometry kind: %w", l.Name, err)
	}
	rows.Close()
	return KindOfType(typ), rows.Err()
}

var numericSQL = queries.MustRead("layer_numeric.sql")

// readNumeric reads which of the layer's properties are of type numeric
// (layer_numeric.sql), at every Refresh (a column's type may change): the
// tile queries rendered after it cast them. A table that does not exist
// leaves what was read before.
func (l *Layer) readNumeric(ctx context.Context, q Querier) error {
	if len(l.Properties) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, numericSQL, l.tableIdent().Sanitize(), l.Properties)
	if err != nil {
		return fmt.Errorf("layer %q: property types: %w", l.Name, err)
	}
	names, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[*[]string])
	if err != nil {
		return fmt.Errorf("layer %q: property types: %w", l.Name, err)
	}
	if names != nil {
		l.state.numeric.Store(names)
	}
	return nil
}

// schemaTable splits the layer's table into schema and name, as
// geometry_columns spells them ("public" when unqualified).
func (l *Layer) schemaTable() (schema, table string) {
	id := l.tableIdent()
	if len(id) == 1 {
		return "public", id[0]
	}
	return id[len(id)-2], id[len(id)-1]
}
