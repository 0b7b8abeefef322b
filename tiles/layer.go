package tiles

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/catalog"
	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// Layer is one vector-tile layer served from one table. Layers come from the
// server's configuration; nothing in a Layer ever comes from a request.
type Layer struct {
	Name           string   `yaml:"name"`            // URL and MVT layer name: [A-Za-z0-9_-]{1,64}
	Schema         string   `yaml:"schema"`          // when set, qualifies Table, which is then one identifier, dots and all
	Table          string   `yaml:"table"`           // schema.table (or table); the bare name when Schema is set
	GeometryColumn string   `yaml:"geometry_column"` // geometry column used for filtering and drawing
	SRID           int      `yaml:"srid"`            // SRID of GeometryColumn: 3857 is drawn as is, others are transformed
	IDColumn       string   `yaml:"id_column"`       // integer feature id, unique per row
	WithoutID      bool     `yaml:"without_id"`      // serve no feature ids (a table without an integer key)
	Properties     []string `yaml:"properties"`      // allowlisted attribute columns
	// GeometryKind is point, line, polygon or mixed; empty reads it from
	// the database at start-up (see Kind).
	GeometryKind Kind `yaml:"geometry_kind"`
	// MinZoom and MaxZoom are the zooms served (default 0..22); a request
	// outside them is a 422 (a composite drops the layer instead).
	MinZoom int `yaml:"minzoom"`
	MaxZoom int `yaml:"maxzoom"`
	// DataMaxZoom is the deepest zoom that adds detail (default 16,
	// within MinZoom..MaxZoom): TileJSON's maxzoom, so that clients overzoom its
	// tiles instead of buying deeper ones.
	DataMaxZoom int `yaml:"data_maxzoom"`
	Extent      int `yaml:"extent"`       // MVT extent, default 4096
	Buffer      int `yaml:"buffer"`       // tile units, default 64
	MaxFeatures int `yaml:"max_features"` // features per tile, default 10000
	// OrderBy is the layer's priority: "column", "column desc"… (default
	// the id column, which is always the last key). The feature cap keeps
	// the first features in this order, a point cluster is drawn as its
	// first point, and the byte budget drops features from the end, so a
	// tile renders to the same bytes every time.
	OrderBy []string `yaml:"order_by"`
	// MaxTileBytes is the byte budget of one tile of this layer, in
	// uncompressed MVT bytes (default 500000); see Budget.
	MaxTileBytes int `yaml:"max_tile_bytes"`
	// Generalize thins the layer's tiles at low and middle zooms.
	Generalize Generalize `yaml:"generalize"`
	// Overviews are the low zooms read from tables `geotoll prepare`
	// builds (see package serving).
	Overviews Overviews `yaml:"overviews"`
	// Subdivide is the pieces `geotoll prepare` cuts a line or polygon
	// layer's rows into, read above the overview band.
	Subdivide Subdivide `yaml:"subdivide"`
	// StatementTimeout bounds each tile query of this layer (SET LOCAL
	// statement_timeout). It should be tighter than the read role's own.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// MaxAge is the Cache-Control max-age of the layer's tiles (default
	// 1 min); a composite tile gets the smallest of its layers'.
	MaxAge time.Duration `yaml:"max_age"`

	state     *layerState // what each zoom reads: set by Prepare, swapped by Catalog.Refresh
	extentSQL string      // exact extent, the fallback of Store.Describe
	order     []OrderKey  // OrderBy parsed, the id appended
}

// Overviews is the zoom band whose tiles read precomputed overview tables
// instead of the layer's table, once `geotoll prepare` has built them:
// per zoom, a point layer's clusters or a line or polygon layer's
// simplified features. MaxZoom 0 means the default: for points every
// clustered zoom (up to Generalize.MaxZoom, z12 by default), so that no
// tile clusters on the fly (their overviews are clusters, smaller than the
// table at each zoom); z7 for lines and polygons (each zoom's overview is a
// simplified copy).
// The band is clipped to the layer's zooms and to Generalize.MaxZoom.
type Overviews struct {
	Off     bool `yaml:"off"`
	MinZoom int  `yaml:"minzoom"`
	MaxZoom int  `yaml:"maxzoom"`
}

// Defaults for unset Layer fields.
const (
	DefaultExtent           = 4096
	DefaultBuffer           = 64
	DefaultMaxFeatures      = 10000
	DefaultStatementTimeout = 2 * time.Second
	DefaultMaxAge           = time.Minute
	DefaultDataMaxZoom      = 16
	// DefaultOverviewMaxZoom ends the default overview band of line and
	// polygon layers. A point layer's ends at its Generalize.MaxZoom,
	// whatever that is: a constant would leave the clustered zooms above
	// it clustering the whole table on the fly.
	DefaultOverviewMaxZoom = 7
	maxMaxAge              = 365 * 24 * time.Hour
	maxFeaturesCeiling     = 200000
	minTileBytes           = 1024
	maxTileBytesCeiling    = 64 << 20
)

var layerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// reservedNames are names a layer's property cannot have, on any kind of
// layer (its kind may be read from its table only once it is served).
// No name is taken by the queries or the storage: the tile queries carry
// the layer's columns under names of their own (see carried), the
// overviews `geotoll prepare` builds store them so too
// (StorageParams.SourceColumns), and the row ST_AsMVT encodes draws its first
// column called geom, the geometry, and carries a later one as a
// property. What remains is the MVT's: every point feature carries
// "point_count", its cluster's count, and a property by that name would
// give it two values under one key. A layer is refused one (validate),
// and Discover never offers one.
var reservedNames = []string{PointCount}

// PointCount is the attribute every point feature carries: how many rows
// its cluster holds (1 where nothing is clustered).
const PointCount = "point_count"

// ZoomInRange reports whether z is within the layer's zoom range.
func (l *Layer) ZoomInRange(z maptile.Zoom) bool {
	return int(z) >= l.MinZoom && int(z) <= l.MaxZoom
}

// OverviewZooms returns the zooms the overviews of the layer, of geometry
// kind, serve: lo..hi inclusive; ok is false when it has none (overviews
// off, or a band outside the layer's generalised zooms).
func (l *Layer) OverviewZooms(kind Kind) (lo, hi int, ok bool) {
	if l.Overviews.Off || l.Generalize.Off {
		return 0, 0, false
	}
	hi = l.Overviews.MaxZoom
	if hi == 0 {
		hi = DefaultOverviewMaxZoom
		if kind == KindPoint {
			hi = l.Generalize.MaxZoom
		}
	}
	lo = max(l.Overviews.MinZoom, l.MinZoom)
	hi = min(hi, l.Generalize.MaxZoom, l.MaxZoom)
	return lo, hi, lo <= hi
}

// OverviewParams is how the layer's configuration asks the overview of
// zoom z (a zoom of OverviewZooms) of geometry kind to be built: the
// zoom's cluster grid (cluster_px), for lines and polygons its
// simplification (tolerance_px, min_size_px), the order_by that chose
// each cell's feature, and for lines and polygons the size of the pieces
// the overview is stored in (subdivide.max_vertices; none when subdivide
// is off: features stored whole). The overview builder records them (with
// its Version) in the registry, and a layer reads only the overviews whose
// params are these, but for their pieces (see Catalog.Refresh).
func (l *Layer) OverviewParams(kind Kind, z int) StorageParams {
	g := l.Generalize.At(maptile.Zoom(z), l.Extent) //nolint:gosec // G115: zooms are 0..MaxZoom, validated with the configuration
	p := StorageParams{Zoom: z, CellsPerTile: g.CellsPerTile, CellMetres: g.CellMetres, OrderBy: l.CanonicalOrderBy(l.OrderBy)}
	if kind != KindPoint {
		p.ToleranceMetres, p.MinSizeMetres = g.ToleranceMetres, g.MinSizeMetres
	}
	if (kind == KindLine || kind == KindPolygon) && !l.Subdivide.Off {
		p.MaxVertices = l.Subdivide.MaxVertices // stored in pieces (Storage.InPieces)
	}
	return p
}

func (l *Layer) withDefaults() {
	if l.SRID == 0 {
		l.SRID = 3857
	}
	if l.IDColumn == "" {
		l.IDColumn = "id"
	}
	if l.MaxZoom == 0 {
		l.MaxZoom = int(MaxZoom)
	}
	if l.DataMaxZoom == 0 {
		l.DataMaxZoom = max(l.MinZoom, min(DefaultDataMaxZoom, l.MaxZoom))
	}
	if l.Extent == 0 {
		l.Extent = DefaultExtent
	}
	if l.Buffer == 0 {
		l.Buffer = DefaultBuffer
	}
	if l.MaxFeatures == 0 {
		l.MaxFeatures = DefaultMaxFeatures
	}
	if l.MaxTileBytes == 0 {
		l.MaxTileBytes = DefaultMaxTileBytes
	}
	if l.StatementTimeout == 0 {
		l.StatementTimeout = DefaultStatementTimeout
	}
	if l.MaxAge == 0 {
		l.MaxAge = DefaultMaxAge
	}
	l.Generalize.withDefaults(l.DataMaxZoom)
	l.Subdivide.withDefaults()
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
	// With Schema, Table is one name as it is, dots and quotes and all (as
	// Discover gives it).
	if catalog.SQLQuoted(l.Schema) || (l.Schema == "" && catalog.SQLQuoted(l.Table)) {
		bad("table %q (schema %q): names are written without SQL quotes, each spelt as in the database, case and all "+
			"(schema: the schema of a table whose name has dots)", l.Table, l.Schema)
	}
	if l.SRID <= 0 {
		bad("srid %d must be positive", l.SRID)
	}
	if l.GeometryKind != "" && !l.GeometryKind.Valid() {
		bad("geometry_kind %q must be point, line, polygon or mixed (or empty: read from the database)", l.GeometryKind)
	}
	errs = append(errs, l.validateSettings()...)
	seen := make(map[string]bool, len(l.Properties))
	for _, p := range l.Properties {
		switch {
		case p == "":
			bad("a property name is empty")
		case seen[p]:
			bad("property %q is listed twice", p)
		case slices.Contains(reservedNames, p):
			bad("property %q: point features carry their cluster's count under that name", p)
		case p == l.GeometryColumn:
			bad("property %q is the geometry_column: a feature's properties are its attributes", p)
		}
		seen[p] = true
	}
	var err error
	if l.order, err = l.orderKeys(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("layer %q: %w", l.Name, err)
	}
	return nil
}

// validateSettings checks what a layer has whatever its table: zooms,
// tile bounds, timeouts, generalisation, pieces, overviews. Each error
// names the setting as configuration does.
func (l *Layer) validateSettings() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if l.MinZoom < 0 || l.MaxZoom > int(MaxZoom) || l.MinZoom > l.MaxZoom {
		bad("zoom range (minzoom..maxzoom) %d..%d must lie within 0..%d", l.MinZoom, l.MaxZoom, MaxZoom)
	}
	if l.DataMaxZoom < l.MinZoom || l.DataMaxZoom > l.MaxZoom {
		bad("data_maxzoom %d must lie within the zoom range %d..%d", l.DataMaxZoom, l.MinZoom, l.MaxZoom)
	}
	if l.Extent < 256 || l.Extent > 16384 {
		bad("extent %d must be within 256..16384", l.Extent)
	}
	if l.Buffer < 0 || l.Buffer > l.Extent/2 {
		bad("buffer %d must be within 0..extent/2", l.Buffer)
	}
	if l.MaxFeatures < 1 || l.MaxFeatures > maxFeaturesCeiling {
		bad("max_features %d must be within 1..%d", l.MaxFeatures, maxFeaturesCeiling)
	}
	if l.MaxTileBytes < minTileBytes || l.MaxTileBytes > maxTileBytesCeiling {
		bad("max_tile_bytes %d must be within %d..%d", l.MaxTileBytes, minTileBytes, maxTileBytesCeiling)
	}
	if l.StatementTimeout < time.Millisecond || l.StatementTimeout > time.Minute {
		bad("statement_timeout %s must be within 1ms..1m", l.StatementTimeout)
	}
	if l.MaxAge < time.Second || l.MaxAge > maxMaxAge {
		bad("max_age %s must be within 1s..8760h", l.MaxAge)
	}
	if err := l.Generalize.validate(l.DataMaxZoom); err != nil {
		errs = append(errs, err)
	}
	if err := l.Subdivide.validate(); err != nil {
		errs = append(errs, err)
	}
	if o := l.Overviews; o.MinZoom < 0 || o.MaxZoom < 0 || o.MaxZoom > int(MaxZoom) || (o.MaxZoom != 0 && o.MinZoom > o.MaxZoom) {
		bad("overviews zoom band %d..%d must lie within 0..%d", o.MinZoom, o.MaxZoom, MaxZoom)
	}
	return errs
}

// tableIdent is the layer's table as an identifier: Schema and Table when
// Schema is set, else Table split at its dots.
func (l *Layer) tableIdent() pgx.Identifier {
	if l.Schema != "" {
		return pgx.Identifier{l.Schema, l.Table}
	}
	return pgx.Identifier(strings.Split(l.Table, "."))
}

// TableIdent is the layer's table as an identifier (see Schema and Table).
func (l *Layer) TableIdent() pgx.Identifier { return l.tableIdent() }

// column quotes a column name as one identifier: a dot in it is part of the
// name, not a qualifier (the query qualifies columns with "t." itself).
func column(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

var extentTemplate = template.Must(template.New("layer_extent.sql").Parse(queries.MustRead("layer_extent.sql")))

// mustQueryText is queries.MustRead without the lines that are only
// comments: the parameter contract stays in the file, and the text
// PostgreSQL parses (and shows in pg_stat_activity, cut at
// track_activity_query_size) is the query itself.
func mustQueryText(name string) string {
	lines := strings.Split(queries.MustRead(name), "\n")
	out := lines[:0]
	for _, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// renderExtent renders the layer's exact-extent query (Store.Describe's
// fallback).
func (l *Layer) renderExtent() error {
	data := struct{ Table, Geom string }{Table: l.tableIdent().Sanitize(), Geom: column(l.GeometryColumn)}
	var buf bytes.Buffer
	if err := extentTemplate.Execute(&buf, data); err != nil {
		return fmt.Errorf("layer %q: render layer_extent.sql: %w", l.Name, err)
	}
	l.extentSQL = buf.String()
	return nil
}

// Catalog is the immutable set of layers a server offers.
type Catalog struct {
	catalog.Set[Layer] // Layer(name) and Layers()
}

// NewCatalog validates layers, fills defaults and renders each layer's query.
func NewCatalog(layers []Layer) (*Catalog, error) {
	set, err := catalog.Build(layers, "layer")
	if err != nil {
		return nil, err
	}
	return &Catalog{set}, nil
}

// Key and Prepare make a Layer a catalog.Layer.
func (l *Layer) Key() string { return l.Name }

// Prepare fills defaults, validates and renders the layer's queries: the
// plan of every zoom from its own table, with GeometryKind (KindMixed when
// unset) until Catalog.Refresh learns more.
func (l *Layer) Prepare() error {
	l.withDefaults()
	if err := l.validate(); err != nil {
		return err
	}
	if err := l.renderExtent(); err != nil {
		return err
	}
	kind := l.GeometryKind
	if kind == "" {
		kind = KindMixed
	}
	p, _, err := l.newPlan(kind, nil)
	if err != nil {
		return err
	}
	l.state = &layerState{}
	l.state.plan.Store(p)
	return nil
}

// MaxComposite is the most layers one composite tile request may name.
const MaxComposite = 8

// Resolve parses a layer list ("a" or "a,b,c") into layers. An empty or
// repeated name is a 400; an unknown one a 404; more than MaxComposite a 422.
func (c *Catalog) Resolve(list string) ([]*Layer, error) {
	if list == "" {
		return nil, problem.Malformed("layer", "layer is empty")
	}
	names := strings.Split(list, ",")
	if len(names) > MaxComposite {
		return nil, problem.Range("layer", "at most %d layers per tile, got %d", MaxComposite, len(names))
	}
	out := make([]*Layer, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if n == "" {
			return nil, problem.Malformed("layer", "empty layer name in %q", truncate(list, 64))
		}
		if seen[n] {
			return nil, problem.Malformed("layer", "layer %q is named twice", truncate(n, 64))
		}
		seen[n] = true
		l := c.Layer(n)
		if l == nil {
			return nil, problem.Missing("layer", "unknown layer %q", truncate(n, 64))
		}
		out = append(out, l)
	}
	return out, nil
}
