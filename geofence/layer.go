package geofence

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/catalog"
	"github.com/geotoll/geotoll/internal/layercheck"
	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// Layer is one table that within and bbox queries can search. Layers come
// from the server's configuration; nothing in a Layer ever comes from a
// request.
type Layer struct {
	Name  string `yaml:"name"`  // the ?layer= value: [A-Za-z0-9_-]{1,64}
	Table string `yaml:"table"` // schema.table (or table)
	// GeometryColumn must be a geometry with SRID 4326 (lon/lat). within
	// needs a GiST index on (column::geography), bbox one on the column.
	GeometryColumn string `yaml:"geometry_column"`
	// IDColumn is the integer feature id, which names the features of an
	// answer: a row whose id is NULL is in none.
	IDColumn   string   `yaml:"id_column"`
	Properties []string `yaml:"properties"` // allowlisted attribute columns
	// StatementTimeout bounds each query of this layer (SET LOCAL
	// statement_timeout); it should be tighter than the read role's own.
	StatementTimeout time.Duration `yaml:"statement_timeout"`

	withinSQL, bboxSQL string // rendered once by NewCatalog
	// verdict is the layer checks' last word on the layer (Catalog.Checks):
	// a layer that does not match its table answers 503, from its pieces too.
	verdict *layercheck.Verdict
}

// DefaultStatementTimeout is the statement_timeout of a layer that sets none,
// and of contains, check and the fence admin's reads.
const DefaultStatementTimeout = 2 * time.Second

var layerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// DistanceProperty is the property within adds to each feature.
const DistanceProperty = "distance_m"

func (l *Layer) withDefaults() {
	if l.IDColumn == "" {
		l.IDColumn = "id"
	}
	if l.StatementTimeout == 0 {
		l.StatementTimeout = DefaultStatementTimeout
	}
}

func (l *Layer) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !layerName.MatchString(l.Name) {
		bad("name %q must match %s", l.Name, layerName)
	}
	if l.Table == "" || l.GeometryColumn == "" {
		bad("table and geometry_column are required")
	}
	if catalog.SQLQuoted(l.Table) {
		bad("table %q: names are written without SQL quotes, each spelt as in the database, case and all", l.Table)
	}
	seen := map[string]bool{}
	for _, p := range l.Properties {
		switch {
		case p == "":
			bad("a property name is empty")
		case p == DistanceProperty:
			bad("property %q is reserved for the within distance", p)
		case seen[p]:
			bad("property %q is listed twice", p)
		}
		seen[p] = true
	}
	if l.StatementTimeout < time.Millisecond || l.StatementTimeout > time.Minute {
		bad("statement_timeout %s must be within 1ms..1m", l.StatementTimeout)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("geofence layer %q: %w", l.Name, err)
	}
	return nil
}

// ident quotes a possibly schema-qualified identifier ("schema.table").
func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

var (
	withinTemplate = template.Must(template.New("geofence_within.sql").Parse(queries.MustRead("geofence_within.sql")))
	bboxTemplate   = template.Must(template.New("geofence_bbox.sql").Parse(queries.MustRead("geofence_bbox.sql")))
)

// property is one allowlisted column: its quoted name in the table and the
// quoted alias it travels under between the inner and outer query.
type property struct{ Col, Alias string }

// queryData is what the query templates fill in: quoted identifiers only.
type queryData struct {
	Table, Geom, ID string
	Props           []property
	Mercator        bool // contains and check: the relation is in EPSG:3857
}

// newQueryData quotes l's id and properties for a query over table (quoted)
// and its geometry column geom (quoted).
func newQueryData(l *Layer, table, geom string) queryData {
	data := queryData{Table: table, Geom: geom, ID: ident(l.IDColumn)}
	for i, p := range l.Properties {
		// The inner query carries each property as p0, p1… so that no
		// column name can collide with id, geom or distance_m there; the
		// outer query renames it back for the JSON key.
		data.Props = append(data.Props, property{Col: pgx.Identifier{p}.Sanitize(), Alias: fmt.Sprintf("p%d", i)})
	}
	return data
}

// rendering is one query text to render: its template and destination.
type rendering struct {
	t   *template.Template
	dst *string
}

// renderAll executes each template with data into its destination.
func renderAll(subject string, data queryData, rs ...rendering) error {
	for _, q := range rs {
		var buf bytes.Buffer
		if err := q.t.Execute(&buf, data); err != nil {
			return fmt.Errorf("geofence %s: render %s: %w", subject, q.t.Name(), err)
		}
		*q.dst = buf.String()
	}
	return nil
}

// render fills the layer's quoted identifiers into the within and bbox
// queries.
func (l *Layer) render() error {
	return renderAll(l.subject(), newQueryData(l, ident(l.Table), ident(l.GeometryColumn)),
		rendering{withinTemplate, &l.withinSQL}, rendering{bboxTemplate, &l.bboxSQL})
}

// WithinSQL returns the layer's constant within query text.
func (l *Layer) WithinSQL() string { return l.withinSQL }

// BBoxSQL returns the layer's constant bbox query text.
func (l *Layer) BBoxSQL() string { return l.bboxSQL }

// Catalog is the immutable set of layers within, bbox, contains and check
// can search, and what contains and check read on each (LoadContainment).
type Catalog struct {
	catalog.Set[Layer] // Layer(name) and Layers()

	contain atomic.Pointer[map[string]containState] // by layer name
	// writes counts Written calls, and written holds the tables they
	// named: a LoadContainment that overlapped a write applies them again
	// to what it installs, which it may have read before the write.
	writes  atomic.Uint64
	written sync.Map // quoted table → struct{}
}

// NewCatalog validates layers, fills defaults and renders each layer's
// queries.
func NewCatalog(layers []Layer) (*Catalog, error) {
	set, err := catalog.Build(layers, "geofence layer")
	if err != nil {
		return nil, err
	}
	return &Catalog{Set: set}, nil
}

// Key and Prepare make a Layer a catalog.Layer.
func (l *Layer) Key() string { return l.Name }

// Prepare copies the property list (the catalog owns it), fills defaults,
// validates and renders the layer's queries.
func (l *Layer) Prepare() error {
	l.Properties = append([]string(nil), l.Properties...)
	l.verdict = &layercheck.Verdict{}
	l.withDefaults()
	if err := l.validate(); err != nil {
		return err
	}
	return l.render()
}

// Resolve returns the layer named by a ?layer= value: 400 when empty (sent
// as ?layer=: the parameter left out is another matter), 404
// when unknown, 503 while the last layer check found it not to match its
// table (a table dropped, a grant revoked: the pieces contains and check
// read outlive both).
func (c *Catalog) Resolve(name string) (*Layer, error) {
	if name == "" {
		return nil, problem.Malformed("layer", "layer is empty; expected the name of a layer")
	}
	l := c.Layer(name)
	if l == nil {
		return nil, problem.Missing("layer", "unknown layer %q", truncate(name, 64))
	}
	if err := l.verdict.Err(l.subject()); err != nil {
		return nil, err
	}
	return l, nil
}

// Limits bound every request parameter. A parameter beyond its limit is a
// 422, before anything is priced or queried.
type Limits struct {
	MaxRadius    float64 `yaml:"max_radius"`    // metres; default 50000
	DefaultLimit int     `yaml:"default_limit"` // features when ?limit is absent; default 100
	MaxLimit     int     `yaml:"max_limit"`     // default 1000
	MaxBBoxArea  float64 `yaml:"max_bbox_area"` // square degrees; default 100
	MaxBatch     int     `yaml:"max_batch"`     // points per batch check; default 1000
	// MaxBodyBytes bounds a query body (the batch check); default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxFenceBytes bounds a fence written through the admin routes: a
	// detailed coastline is several MB of GeoJSON; default 16 MiB.
	MaxFenceBytes int64 `yaml:"max_fence_bytes"`
	// MaxVertices bounds the positions of a fence written; default
	// 1,000,000 (fences are stored cut into pieces, so their size does
	// not slow contains and check).
	MaxVertices int `yaml:"max_vertices"`
	// MaxResponseVertices caps the positions of one within, bbox or
	// contains answer and of one page of the fence list (their bytes);
	// default 20000. Fences past it are left out of a contains answer,
	// which says "truncated": true; within and bbox answers leave out a
	// feature larger than the cap alone and end before the first other
	// that would pass it (truncated too). A fence larger than the cap is
	// answered by check (its id) and drawn by GET /geofence/fences/{id}. A
	// list page ends before the fence that would pass it and gives the
	// next page, but always carries its first fence, so a larger fence is
	// listed alone on its page.
	MaxResponseVertices int `yaml:"max_response_vertices"`
	// StatementTimeout bounds contains, check and fence admin reads.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// FenceWriteTimeout bounds each statement of a fence write: cutting a
	// fence of several hundred thousand positions into pieces takes
	// seconds; default 15 s.
	FenceWriteTimeout time.Duration `yaml:"fence_write_timeout"`
}

// DefaultLimits returns the default bounds. MaxRadius is the
// 50 km cap, which the default radius weight prices at MaxCost; a body of
// 1 MiB holds a full batch with ids of MaxPointIDLen bytes several times
// over; a fence body of 16 MiB holds a fence of several hundred thousand
// positions.
func DefaultLimits() Limits {
	return Limits{
		MaxRadius:           50000,
		DefaultLimit:        100,
		MaxLimit:            1000,
		MaxBBoxArea:         100,
		MaxBatch:            1000,
		MaxBodyBytes:        1 << 20,
		MaxFenceBytes:       16 << 20,
		MaxVertices:         1_000_000,
		MaxResponseVertices: 20000,
		StatementTimeout:    DefaultStatementTimeout,
		FenceWriteTimeout:   DefaultFenceWriteTimeout,
	}
}

// DefaultFenceWriteTimeout is the statement_timeout of a fence write.
const DefaultFenceWriteTimeout = 15 * time.Second

// Validate reports whether the limits are usable.
func (l Limits) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !(l.MaxRadius > 0 && l.MaxRadius <= 20_037_509) { // half the equator: every point on Earth
		bad("max_radius %g must be within (0, 20037509] metres", l.MaxRadius)
	}
	if l.MaxLimit < 1 || l.MaxLimit > 100_000 {
		bad("max_limit %d must be within 1..100000", l.MaxLimit)
	}
	if l.DefaultLimit < 1 || l.DefaultLimit > l.MaxLimit {
		bad("default_limit %d must be within 1..max_limit", l.DefaultLimit)
	}
	if !(l.MaxBBoxArea > 0 && l.MaxBBoxArea <= 360*180) {
		bad("max_bbox_area %g must be within (0, 64800] square degrees", l.MaxBBoxArea)
	}
	if l.MaxBatch < 1 || l.MaxBatch > 100_000 {
		bad("max_batch %d must be within 1..100000", l.MaxBatch)
	}
	if l.MaxBodyBytes < 1024 || l.MaxBodyBytes > 64<<20 {
		bad("max_body_bytes %d must be within 1 KiB..64 MiB", l.MaxBodyBytes)
	}
	if l.MaxFenceBytes < 1024 || l.MaxFenceBytes > 256<<20 {
		bad("max_fence_bytes %d must be within 1 KiB..256 MiB", l.MaxFenceBytes)
	}
	if l.MaxVertices < 4 || l.MaxVertices > 10_000_000 {
		bad("max_vertices %d must be within 4..10000000", l.MaxVertices)
	}
	if l.MaxResponseVertices < 4 || l.MaxResponseVertices > 10_000_000 {
		bad("max_response_vertices %d must be within 4..10000000", l.MaxResponseVertices)
	}
	if l.StatementTimeout < time.Millisecond || l.StatementTimeout > time.Minute {
		bad("statement_timeout %s must be within 1ms..1m", l.StatementTimeout)
	}
	if l.FenceWriteTimeout < time.Millisecond || l.FenceWriteTimeout > 5*time.Minute {
		bad("fence_write_timeout %s must be within 1ms..5m", l.FenceWriteTimeout)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("geofence limits: %w", err)
	}
	return nil
}
