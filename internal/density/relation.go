package density

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Kind is the kind of geometry a relation holds.
type Kind uint8

// Kinds of geometry. A Point relation counts each feature as one vertex
// (and its model keeps no vertex sums); Line and Polygon sum ST_NPoints.
const (
	Point Kind = iota + 1
	Line
	Polygon
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Point:
		return "point"
	case Line:
		return "line"
	case Polygon:
		return "polygon"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// SRIDs a model can hold.
const (
	SRIDWebMercator = 3857 // EPSG:3857 metres
	SRIDLonLat      = 4326 // EPSG:4326 degrees
)

// Relation is the table or view a model describes. It comes from the
// server's configuration, never from a request.
type Relation struct {
	Table          pgx.Identifier // schema-qualified: {"geotoll", "places"}
	GeometryColumn string
	SRID           int // SRIDWebMercator or SRIDLonLat
	Kind           Kind
	// PiecesPerRow is, for pieces of a table's rows (each row cut into
	// pieces that carry its id), the pieces a row has on average; 0 or 1
	// for a relation whose rows are the features. A query that caps the
	// features it reads caps ids, and reads every piece of them.
	PiecesPerRow float64
}

// String is the relation's quoted name and column.
func (r Relation) String() string {
	return r.Table.Sanitize() + "." + pgx.Identifier{r.GeometryColumn}.Sanitize()
}

// Validate reports what is wrong with the relation, or nil.
func (r Relation) Validate() error {
	var errs []error
	if len(r.Table) == 0 {
		errs = append(errs, errors.New("table is required"))
	}
	for _, part := range r.Table {
		if part == "" {
			errs = append(errs, fmt.Errorf("table %q has an empty part", r.Table.Sanitize()))
			break
		}
	}
	if r.GeometryColumn == "" {
		errs = append(errs, errors.New("geometry column is required"))
	}
	if r.SRID != SRIDWebMercator && r.SRID != SRIDLonLat {
		errs = append(errs, fmt.Errorf("srid %d: a density model holds EPSG:3857 or EPSG:4326 geometries", r.SRID))
	}
	if r.Kind < Point || r.Kind > Polygon {
		errs = append(errs, fmt.Errorf("kind %s: must be point, line or polygon", r.Kind))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("density relation %s: %w", r.Table.Sanitize(), err)
	}
	return nil
}
