package geofence

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/signature"
	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// Containment is what contains and check read on one polygon layer: the
// layer's pieces (the subdivided storage `geotoll prepare` builds, at most
// a few hundred vertices each, with the source's id and properties) or,
// while it has none, its table; and the two queries rendered over that
// relation. Nothing in it comes from a request.
type Containment struct {
	Layer *Layer
	// Relation is the relation read, quoted; Pieces says it holds the
	// layer's pieces rather than its table.
	Relation string
	Pieces   bool
	// PieceVertices is the most vertices of a piece (the pieces' recorded
	// max_vertices), 0 when the table is read.
	PieceVertices int

	containsSQL, checkSQL string
	// catalog installed it (nil for one made by hand): see piecesGone.
	catalog *Catalog
}

// Written tells the catalog that table (quoted, as pgx.Identifier writes
// it) was just written, and committed: the layers whose contains and
// check read pieces cut from it read the table from now on, as the next
// LoadContainment would have them do (the pieces predate the write), not
// for up to a refresh longer.
func (c *Catalog) Written(table string) {
	c.written.Store(table, struct{}{})
	c.writes.Add(1)
	c.tableRead(table)
}

// tableRead installs table in place of the pieces cut from it, for every
// layer whose contains and check read them.
func (c *Catalog) tableRead(table string) {
	all := c.contain.Load()
	if all == nil {
		return
	}
	for _, st := range *all {
		if st.c != nil && st.c.Pieces && ident(st.c.Layer.Table) == table {
			st.c.piecesGone()
		}
	}
}

// piecesGone installs the layer's table in place of ct's pieces, when a
// read found their relation missing: `geotoll prepare` drops pieces it
// retired once their retention has passed, which a server whose
// LoadContainment kept failing meanwhile may still read. The next load
// that succeeds installs what the registry names.
func (ct *Containment) piecesGone() {
	if ct == nil || !ct.Pieces || ct.catalog == nil {
		return
	}
	table := &Containment{Layer: ct.Layer, Relation: ident(ct.Layer.Table), catalog: ct.catalog}
	if table.render(ct.Layer.GeometryColumn, false) != nil {
		return
	}
	for {
		old := ct.catalog.contain.Load()
		if old == nil || (*old)[ct.Layer.Name].c != ct {
			return // replaced meanwhile
		}
		next := maps.Clone(*old)
		next[ct.Layer.Name] = containState{c: table}
		if ct.catalog.contain.CompareAndSwap(old, &next) {
			return
		}
	}
}

// containState is one layer's containment, or why it has none.
type containState struct {
	c      *Containment
	reason string // non-empty: contains and check refuse the layer (422)
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var (
	sourcesSQL            = queries.MustRead("geofence_sources.sql")
	layerContainsTemplate = template.Must(template.New("geofence_layer_contains.sql").Parse(queries.MustRead("geofence_layer_contains.sql")))
	layerCheckTemplate    = template.Must(template.New("geofence_layer_check.sql").Parse(queries.MustRead("geofence_layer_check.sql")))
)

// FencePieceVertices is the most vertices of a piece of a fence
// (geotoll.geofence_pieces, cut by migration 00008's trigger, whose
// ST_Subdivide takes the same number: change both together).
const FencePieceVertices = 256

// piecesSchema is the schema of the serving storage `geotoll prepare`
// builds; registry rows name their relation unqualified.
const piecesSchema = "geotoll_serving"

// pieces is a layer's subdivided storage as the serving registry lists it.
type pieces struct {
	Relation, Geom string
	SRID           int
	Columns        []string
	MaxVertices    int // params' max_vertices, 0 when not recorded
	// Stale says the table has changed since they were cut (see
	// changedSince).
	Stale bool
}

// layerSource reads the geometry type of l's table and its pieces, if the
// serving registry lists any (builder "subdivide", same source table; see
// geofence_sources.sql). typ is "" when PostGIS's catalog does not know
// the column; p is nil without pieces.
func layerSource(ctx context.Context, q Querier, l *Layer) (typ string, p *pieces, err error) {
	rows, err := q.Query(ctx, sourcesSQL, ident(l.Table), l.GeometryColumn)
	if err != nil {
		return "", nil, err
	}
	var (
		t              *string
		rel, geom, sig *string
		srid, most     *int
		cols           []string
	)
	if _, err := pgx.ForEachRow(rows, []any{&t, &rel, &geom, &srid, &cols, &sig, &most}, func() error { return nil }); err != nil {
		return "", nil, err
	}
	if t != nil {
		typ = *t
	}
	if rel != nil && geom != nil && srid != nil {
		p = &pieces{Relation: *rel, Geom: *geom, SRID: *srid, Columns: cols}
		if most != nil {
			p.MaxVertices = *most
		}
		// The change detector recorded when they were cut (package
		// signature), or "" for a source without one (a view), never stale.
		if sig != nil && *sig != "" {
			if p.Stale, err = changedSince(ctx, q, l, *sig); err != nil {
				return "", nil, err
			}
		}
	}
	return typ, p, nil
}

// changedSince reports whether l's table differs from the one whose change
// detector was recorded (package signature, the detector `geotoll
// prepare` records): pieces cut before a write to the table would answer
// for what it held then, so the table is read instead until prepare cuts
// them again.
func changedSince(ctx context.Context, q Querier, l *Layer, recorded string) (bool, error) {
	sig, err := signature.Read(ctx, q, ident(l.Table), true)
	if err != nil {
		return false, err
	}
	return !signature.Same(recorded, sig.String()), nil
}

// LoadContainment reads, for every layer, its geometry type and its pieces,
// and installs what contains and check read from then on (see
// Containment): the pieces when the registry lists pieces in EPSG:4326
// carrying the layer's id and properties, else the layer's table. A layer
// of points or lines gets none: contains and check refuse it. Call it at
// start-up and whenever the serving registry may have changed; a failed
// load keeps what was installed. warnings name pieces that could not be
// used.
func (c *Catalog) LoadContainment(ctx context.Context, q Querier) (warnings []string, err error) {
	writes := c.writes.Load()
	next := make(map[string]containState, len(c.Layers()))
	for _, l := range c.Layers() {
		typ, p, err := layerSource(ctx, q, l)
		if err != nil {
			return nil, fmt.Errorf("geofence %s: storage: %w", l.subject(), err)
		}
		if !polygonal(typ) {
			next[l.Name] = containState{reason: fmt.Sprintf("layer %q holds %s geometries; contains and check need a polygon layer", l.Name, strings.ToLower(typ))}
			continue
		}
		rel, geom := ident(l.Table), l.GeometryColumn
		if p != nil {
			if why := p.unusable(l); why != "" {
				warnings = append(warnings, fmt.Sprintf("geofence %s: pieces %s.%s not used: %s", l.subject(), piecesSchema, p.Relation, why))
				p = nil
			} else {
				rel, geom = pgx.Identifier{piecesSchema, p.Relation}.Sanitize(), p.Geom
			}
		}
		ct := &Containment{Layer: l, Relation: rel, Pieces: p != nil, catalog: c}
		if p != nil {
			ct.PieceVertices = p.MaxVertices
		}
		if err := ct.render(geom, p != nil && p.SRID == 3857); err != nil {
			return nil, err
		}
		next[l.Name] = containState{c: ct}
	}
	c.contain.Store(&next)
	if c.writes.Load() != writes { // a write came while this load read: its pieces may predate it
		c.written.Range(func(table, _ any) bool {
			c.tableRead(table.(string))
			return true
		})
	}
	return warnings, nil
}

// polygonal reports whether a geometry type from PostGIS's catalog may
// hold polygons ("" and GEOMETRY: unknown, read as they come).
func polygonal(typ string) bool {
	switch typ {
	case "POINT", "MULTIPOINT", "LINESTRING", "MULTILINESTRING":
		return false
	}
	return true
}

// unusable says why p cannot stand in for l's table ("" when it can).
func (p *pieces) unusable(l *Layer) string {
	if p.Stale {
		return "the table has changed since they were cut (geotoll prepare cuts them again)"
	}
	if !(p.SRID == 4326 && p.Geom == l.GeometryColumn) && p.SRID != 3857 {
		return fmt.Sprintf("they are cut from column %q in SRID %d, not from %q in 4326 nor in 3857", p.Geom, p.SRID, l.GeometryColumn)
	}
	for _, col := range append([]string{l.IDColumn}, l.Properties...) {
		if !slices.Contains(p.Columns, col) {
			return fmt.Sprintf("they do not carry column %q", col)
		}
	}
	return ""
}

// render fills the relation's quoted identifiers into the contains and
// check queries; mercator when the relation is in EPSG:3857 (pieces cut
// from a tile layer's geometry): the point is transformed to it. An edge
// is then straight in Mercator, not in lon/lat: a point within the sag
// between the two lines — about R·tanφ·Δφ²/8 between vertices Δφ apart:
// nothing for the edges of detailed borders, some 90 m for an edge one
// degree tall at 20°N, 770 m for three — may be answered otherwise than by the
// table.
func (ct *Containment) render(geom string, mercator bool) error {
	data := newQueryData(ct.Layer, ct.Relation, pgx.Identifier{geom}.Sanitize())
	data.Mercator = mercator
	return renderAll(ct.Layer.subject(), data,
		rendering{layerContainsTemplate, &ct.containsSQL}, rendering{layerCheckTemplate, &ct.checkSQL})
}

// name is the layer's name, "" for the fences (a nil Containment).
func (ct *Containment) name() string {
	if ct == nil {
		return ""
	}
	return ct.Layer.Name
}

// ContainsSQL returns the layer's contains query text.
func (ct *Containment) ContainsSQL() string { return ct.containsSQL }

// CheckSQL returns the layer's check query text.
func (ct *Containment) CheckSQL() string { return ct.checkSQL }

// Containment returns what contains and check read on the layer named by a
// ?layer= value (or a check body's "layer"): 400 when empty, 404 when
// unknown, 422 when it holds no polygons, 503 while its storage has not
// been read (LoadContainment has not succeeded yet).
func (c *Catalog) Containment(name string) (*Containment, error) {
	l, err := c.Resolve(name)
	if err != nil {
		return nil, err
	}
	all := c.contain.Load()
	if all == nil {
		return nil, &problem.Error{Code: problem.Unavailable, Param: "layer", RetryAfter: 5,
			Detail: fmt.Sprintf("the storage of layer %q has not been read from the database yet; try again shortly", l.Name)}
	}
	st := (*all)[l.Name]
	if st.c == nil {
		return nil, problem.Range("layer", "%s", st.reason)
	}
	return st.c, nil
}
