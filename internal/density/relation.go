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

// SRIDs a model is built in. A relation in any other SRID is modelled in
// EPSG:4326 (see Relation.Transformed).
const (
	SRIDWebMercator = 3857 // EPSG:3857 metres
	SRIDLonLat      = 4326 // EPSG:4326 degrees
)

// Relation is the table or view a model describes. It comes from the
// server's configuration, never from a request.
type Relation struct {
	Table          pgx.Identifier // schema-qualified: {"geotoll", "places"}
	GeometryColumn string
	// SRID is the geometry column's: SRIDWebMercator and SRIDLonLat are
	// read as they are; any other is transformed (see Transformed).
	SRID int
	Kind Kind
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

// Transformed reports whether a build reads the relation's boxes
// transformed to EPSG:4326 (its SRID is neither SRIDWebMercator nor
// SRIDLonLat), so that the model is a lon/lat one, queried as a model of
// an EPSG:4326 relation is. A layer's tables, overviews and pieces may be
// in any SRID PostGIS knows (a national grid, a UTM zone); left out, they
// would be priced by their size for ever, which from z12 up is about the
// base price whatever a tile reads. What the build transforms is each
// feature's bounding box, not its geometry: the box is what the query's
// index filter compares (in the relation's SRID), and its corners (its
// outline, when large) cost the same whatever the feature's vertices; a box
// that holds a pole, or crosses the antimeridian, is widened to the pole or
// cut in two there (see the package's Building). A box outside the
// projection's domain is skipped and counted (Summary.Skipped); an SRID
// PostGIS does not know fails the build, which reports it as any failed
// build (Refresher.Status).
func (r Relation) Transformed() bool { return r.SRID != SRIDWebMercator && r.SRID != SRIDLonLat }

// Validate reports what is wrong with the relation, or nil. Any SRID is
// valid here: whether PostGIS can transform it is the build's to find out,
// and to report.
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
	if r.Kind < Point || r.Kind > Polygon {
		errs = append(errs, fmt.Errorf("kind %s: must be point, line or polygon", r.Kind))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("density relation %s: %w", r.Table.Sanitize(), err)
	}
	return nil
}
