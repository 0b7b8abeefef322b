package tiles

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
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
	IDColumn       string   `yaml:"id_column"`       // integer feature id
	WithoutID      bool     `yaml:"without_id"`      // serve no feature ids (a table without an integer key)
	Properties     []string `yaml:"properties"`      // allowlisted attribute columns
	MinZoom        int      `yaml:"minzoom"`
	MaxZoom        int      `yaml:"maxzoom"`
	Extent         int      `yaml:"extent"`       // MVT extent, default 4096
	Buffer         int      `yaml:"buffer"`       // tile units, default 64
	MaxFeatures    int      `yaml:"max_features"` // LIMIT per tile, default 10000
	// StatementTimeout bounds each tile query of this layer (SET LOCAL
	// statement_timeout). It should be tighter than the read role's own.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	// MaxAge is the Cache-Control max-age of the layer's tiles (default
	// 1 min); a composite tile gets the smallest of its layers'.
	MaxAge time.Duration `yaml:"max_age"`

	sql       string // rendered once by NewCatalog
	extentSQL string // exact extent, the fallback of Store.Describe
}

// Defaults for unset Layer fields.
const (
	DefaultExtent           = 4096
	DefaultBuffer           = 64
	DefaultMaxFeatures      = 10000
	DefaultStatementTimeout = 2 * time.Second
	DefaultMaxAge           = time.Minute
	maxMaxAge               = 365 * 24 * time.Hour
	maxFeaturesCeiling      = 200000
)

var layerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// SQL returns the layer's constant query text.
func (l *Layer) SQL() string { return l.sql }

// ZoomInRange reports whether z is within the layer's zoom range.
func (l *Layer) ZoomInRange(z maptile.Zoom) bool {
	return int(z) >= l.MinZoom && int(z) <= l.MaxZoom
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
	if l.Extent == 0 {
		l.Extent = DefaultExtent
	}
	if l.Buffer == 0 {
		l.Buffer = DefaultBuffer
	}
	if l.MaxFeatures == 0 {
		l.MaxFeatures = DefaultMaxFeatures
	}
	if l.StatementTimeout == 0 {
		l.StatementTimeout = DefaultStatementTimeout
	}
	if l.MaxAge == 0 {
		l.MaxAge = DefaultMaxAge
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
	if l.SRID <= 0 {
		bad("srid %d must be positive", l.SRID)
	}
	if l.MinZoom < 0 || l.MaxZoom > int(MaxZoom) || l.MinZoom > l.MaxZoom {
		bad("zoom range %d..%d must lie within 0..%d", l.MinZoom, l.MaxZoom, MaxZoom)
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
	if l.StatementTimeout < time.Millisecond || l.StatementTimeout > time.Minute {
		bad("statement_timeout %s must be within 1ms..1m", l.StatementTimeout)
	}
	if l.MaxAge < time.Second || l.MaxAge > maxMaxAge {
		bad("max_age %s must be within 1s..8760h", l.MaxAge)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("layer %q: %w", l.Name, err)
	}
	return nil
}

// tableIdent is the layer's table as an identifier: Schema and Table when
// Schema is set, else Table split at its dots.
func (l *Layer) tableIdent() pgx.Identifier {
	if l.Schema != "" {
		return pgx.Identifier{l.Schema, l.Table}
	}
	return pgx.Identifier(strings.Split(l.Table, "."))
}

// column quotes a column name as one identifier: a dot in it is part of the
// name, not a qualifier (the query qualifies columns with "t." itself).
func column(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

var (
	tileTemplate   = template.Must(template.New("tile.sql").Parse(queries.MustRead("tile.sql")))
	extentTemplate = template.Must(template.New("layer_extent.sql").Parse(queries.MustRead("layer_extent.sql")))
)

// render fills the layer's quoted identifiers into the tile query.
func (l *Layer) render() error {
	geom := column(l.GeometryColumn)
	data := struct {
		Table, Geom, ID, GeomExpr, FilterExpr string
		Props                                 []string
	}{
		Table: l.tableIdent().Sanitize(),
		Geom:  geom,
	}
	if !l.WithoutID {
		data.ID = column(l.IDColumn)
	}
	if l.SRID == 3857 {
		data.GeomExpr = "t." + geom
		data.FilterExpr = "ST_Expand(env.geom, $7::float8)"
	} else {
		srid := strconv.Itoa(l.SRID) // an int from config, not request text
		data.GeomExpr = "ST_Transform(t." + geom + ", 3857)"
		data.FilterExpr = "ST_Transform(ST_Expand(env.geom, $7::float8), " + srid + ")"
	}
	for _, p := range l.Properties {
		data.Props = append(data.Props, column(p))
	}
	var buf bytes.Buffer
	if err := tileTemplate.Execute(&buf, data); err != nil {
		return fmt.Errorf("layer %q: render tile.sql: %w", l.Name, err)
	}
	l.sql = buf.String()
	buf.Reset()
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

// Prepare fills defaults, validates and renders the layer's query.
func (l *Layer) Prepare() error {
	l.withDefaults()
	if err := l.validate(); err != nil {
		return err
	}
	return l.render()
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
