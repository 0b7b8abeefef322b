package tiles

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/layercheck"
)

// layerState is the part of a Layer that changes while it is served: its
// plan, swapped whole by Catalog.Refresh (and Catalog.Written).
type layerState struct {
	plan     atomic.Pointer[plan]
	kindRead atomic.Bool // the geometry kind was read from the database
	// numeric names the properties of type numeric, once read from the
	// database (nil until then): the tile queries cast them to float8.
	numeric atomic.Pointer[[]string]
	// follow: Refresh reads storage only while it was built from the
	// table as it is (see Catalog.Follow).
	follow atomic.Bool
	// writes counts Catalog.Written calls; swap orders a followed layer's
	// plan swaps, so that a Refresh that read the table before a write
	// never installs storage after Written took it away.
	writes atomic.Uint64
	swap   sync.Mutex
	// maxVertices is the vertices of the largest rows (Layer.CheckHeavy).
	maxVertices atomic.Int64
	// verdict is the layer checks' last word on the layer (Misfit).
	verdict layercheck.Verdict
}

// plan is what a tile of a layer runs at each zoom: its query text and the
// Source behind it. A plan is immutable once built.
type plan struct {
	kind    Kind
	zooms   [MaxZoom + 1]zoomQuery
	storage []Storage // the serving storage the plan reads
	// table is a followed layer's table's change detector when Refresh
	// made the plan ("" otherwise): when it moves, tiles drawn from the
	// table are stale.
	table string
}

// zoomQuery is the query of one zoom.
type zoomQuery struct {
	sql string
	// safe is sql drawing what it can of rows the transform into
	// EPSG:3857 fails on (TransformSafe; see Store.Render): sql itself
	// for a relation in EPSG:3857, which it does not transform.
	safe   string
	source Source
}

func (l *Layer) plan() *plan { return l.state.plan.Load() }

func (p *plan) zoom(z maptile.Zoom) *zoomQuery { return &p.zooms[min(z, MaxZoom)] }

// Storage returns the serving storage the layer reads now (see
// Catalog.Refresh), in registry order.
func (l *Layer) Storage() []Storage { return slices.Clone(l.plan().storage) }

// relation is a relation a layer's query reads.
type relation struct {
	ident   pgx.Identifier
	geom    string
	srid    int
	storage *Storage // nil for the layer's own table
}

// newPlan renders the layer's queries for kind: from its own table at every
// zoom, except where one of storage serves the zoom (the storage with the
// narrowest zoom range wins). Storage the layer cannot use is left out and
// reported in skipped.
func (l *Layer) newPlan(kind Kind, storage []Storage) (p *plan, skipped []error, err error) {
	p = &plan{kind: kind}
	own := relation{ident: l.tableIdent(), geom: l.GeometryColumn, srid: l.SRID}
	rendered := map[bool]zoomQuery{} // the own table's queries, clustered or not
	for z := range p.zooms {
		g := l.Generalize.At(maptile.Zoom(z), l.Extent)
		clustered := kind == KindPoint && g.On
		q, ok := rendered[clustered]
		if !ok {
			if q, err = l.renderQueries(kind, own, clustered); err != nil {
				return nil, nil, err
			}
			rendered[clustered] = q
		}
		p.zooms[z] = zoomQuery{sql: q.sql, safe: q.safe, source: Source{
			Relation: own.ident, GeometryColumn: own.geom, SRID: own.srid, Kind: kind,
			Generalization: g, Clustered: clustered,
		}}
	}
	var width [MaxZoom + 1]int // zoom range width of the storage serving each zoom; 0: none
	for i := range storage {
		s := &storage[i]
		if err := l.usable(kind, s); err != nil {
			skipped = append(skipped, err)
			continue
		}
		rel := relation{ident: s.Ident(), geom: s.GeometryColumn, srid: s.SRID, storage: s}
		q, err := l.renderQueries(kind, rel, false)
		if err != nil {
			return nil, nil, err
		}
		p.storage = append(p.storage, *s)
		w := s.ZoomMax - s.ZoomMin + 1
		for z := s.ZoomMin; z <= s.ZoomMax; z++ {
			if width[z] != 0 && width[z] <= w {
				continue
			}
			width[z] = w
			g := s.Params.generalization(maptile.Zoom(z)) //nolint:gosec // G115: zooms are 0..tiles.MaxZoom, validated with the configuration
			if s.Builder == BuilderSubdivide {
				g = l.Generalize.At(maptile.Zoom(z), l.Extent) //nolint:gosec // G115: as above
			}
			p.zooms[z] = zoomQuery{sql: q.sql, safe: q.safe, source: Source{
				Relation: rel.ident, GeometryColumn: rel.geom, SRID: rel.srid, Kind: kind,
				Builder: s.Builder, Rows: s.Rows, SourceRows: s.SourceRows, BuiltAt: s.BuiltAt,
				Generalization: g, Clustered: kind == KindPoint,
				Pieces: s.Builder == BuilderSubdivide || s.InPieces(),
			}}
		}
	}
	return p, skipped, nil
}

// usable reports why the layer cannot read s, or nil: a builder the
// server does not know, zooms outside 0..MaxZoom, storage the layer's
// configuration no longer asks for (overviews when generalize or overviews
// is off, or of zooms outside its overview band; pieces when subdivide is
// off), another geometry kind, overviews built under other generalisation
// settings (Layer.OverviewParams), or columns the layer needs that s lacks
// (the configuration changed since `geotoll prepare` ran).
func (l *Layer) usable(kind Kind, s *Storage) error {
	ovLo, ovHi, overviews := l.OverviewZooms(kind)
	switch {
	case s.Builder != BuilderOverview && s.Builder != BuilderSubdivide:
		return fmt.Errorf("layer %q: storage %s: builder %q is not read by this server", l.Name, s.Relation, s.Builder)
	case s.Builder == BuilderSubdivide && (l.WithoutID || kind == KindPoint || kind == KindMixed):
		return fmt.Errorf("layer %q: storage %s: pieces serve only line and polygon layers with ids", l.Name, s.Relation)
	case s.ZoomMin < 0 || s.ZoomMax > int(MaxZoom) || s.ZoomMin > s.ZoomMax:
		return fmt.Errorf("layer %q: storage %s: zooms %d..%d", l.Name, s.Relation, s.ZoomMin, s.ZoomMax)
	case s.Builder == BuilderOverview && !overviews:
		return fmt.Errorf("layer %q: storage %s: the layer is configured without overviews (generalize or overviews off); run geotoll prepare to retire it", l.Name, s.Relation)
	case s.Builder == BuilderOverview && (s.ZoomMin < ovLo || s.ZoomMax > ovHi):
		return fmt.Errorf("layer %q: storage %s: zooms %d..%d are outside the layer's overview band %d..%d; run geotoll prepare", l.Name, s.Relation, s.ZoomMin, s.ZoomMax, ovLo, ovHi)
	case s.Builder == BuilderSubdivide && l.Subdivide.Off:
		return fmt.Errorf("layer %q: storage %s: the layer is configured with subdivide off; run geotoll prepare to retire it", l.Name, s.Relation)
	case s.Kind != kind:
		return fmt.Errorf("layer %q: storage %s holds %s geometries, the layer is %s; run geotoll prepare", l.Name, s.Relation, s.Kind, kind)
	case kind == KindPoint && s.Params.CellsPerTile < 1:
		return fmt.Errorf("layer %q: storage %s records no cluster cells", l.Name, s.Relation)
	case s.Builder == BuilderOverview && (s.Params.Zoom < 0 || s.Params.Zoom > int(MaxZoom) ||
		!l.builtAs(s.Params, kind)):
		return fmt.Errorf("layer %q: storage %s was built under other generalisation settings (cluster_px, tolerance_px, min_size_px or order_by) than the layer's; run geotoll prepare",
			l.Name, s.Relation)
	}
	if n := len(s.Params.SourceColumns); n > 0 && n != len(s.Columns) {
		return fmt.Errorf("layer %q: storage %s records %d source columns for its %d columns; run geotoll prepare", l.Name, s.Relation, n, len(s.Columns))
	}
	for _, c := range l.Columns() {
		if !slices.Contains(s.SourceColumns(), c) {
			return fmt.Errorf("layer %q: storage %s lacks column %q (built for another configuration); run geotoll prepare", l.Name, s.Relation, c)
		}
	}
	return nil
}

// Columns returns the source columns a tile of the layer reads besides
// its geometry: the id (unless WithoutID), the properties and the order_by
// columns, each once, in that order. Serving storage carries them: the
// pieces by the same names, the overviews by CarriedColumns.
func (l *Layer) Columns() []string {
	var cols []string
	add := func(c string) {
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	if !l.WithoutID {
		add(l.IDColumn)
	}
	for _, p := range l.Properties {
		add(p)
	}
	for _, k := range l.order {
		add(k.Column)
	}
	return cols
}

// Query returns the query a tile t of the layer runs and its bound
// arguments, as Store.Render binds them (Source says what it reads). The
// query returns one row: the layer's MVT (bytea; empty or NULL without
// features) and the byte budget's reduction level (int, 0 when the tile
// fit).
func (l *Layer) Query(t maptile.Tile) (string, []any) {
	return l.query(t, false)
}

// query is Query, or with safe its query that draws what it can of rows
// the transform into EPSG:3857 fails on.
func (l *Layer) query(t maptile.Tile, safe bool) (string, []any) {
	q := l.plan().zoom(t.Z)
	sql := q.sql
	if safe {
		sql = q.safe
	}
	env := Envelope(t)
	args := []any{env.Min[0], env.Min[1], env.Max[0], env.Max[1], l.Extent, l.Buffer,
		l.bufferMetres(q.source, t), l.MaxFeatures, l.Name}
	if q.source.Kind == KindPoint {
		return sql, l.pointArgs(args, q.source, t)
	}
	return sql, l.lineArgs(args, q.source)
}

// worldClampedEnvelope is the tile's envelope widened by its buffer, its x
// range cut at the world's edges (±π·R), in EPSG:3857: what a relation in
// another SRID is filtered by, transformed. Uncut, the buffer of a tile of
// the world's western or eastern column overhangs ±180°, where the
// transform wraps a longitude to the other side: the box read would span
// every longitude but the tile's. What lies beyond the edge is not the
// tile's buffer either: a relation in EPSG:3857 holds nothing there.
var worldClampedEnvelope = "ST_MakeEnvelope(greatest(ST_XMin(env.geom) - env.buffer_m, -" + worldHalfText + "), ST_YMin(env.geom) - env.buffer_m, " +
	"least(ST_XMax(env.geom) + env.buffer_m, " + worldHalfText + "), ST_YMax(env.geom) + env.buffer_m, 3857)"

// transformedEnvelope is the filter box of a relation in srid (not 3857):
// worldClampedEnvelope transformed. In EPSG:4326 that is its box exactly
// (Mercator's straight lines of constant x or y are straight in lon/lat).
// In another projection a side straight in EPSG:3857 may be a curve (a
// parallel is an arc in a conic projection) that bulges out between the
// corners, where a row inside the tile would fail the filter. A side that
// turns by θ radians strays from its chord by about side × θ / 8, and a
// tile's sides turn by at most about its width in radians of longitude
// (width / R), so the box of the four corners is expanded by side × (width
// / 8R + 1/1000): nothing to speak of at z14, a tenth of the box at z3.
// At z0–2 (a width above R) that estimate does not hold — a tile of a
// polar projection may have all four corners on one line — and the box
// is expanded by its whole side. Cutting the sides into segments before
// the transform would fit the curve closer, but more of its points may
// lie outside the projection's domain (a transverse Mercator some 80° from
// its meridian), and the transform then fails the tile; a tile whose
// corners lie there holds nothing of the layer (Store.Render drops it from
// the tile). Rows in the margin are read and
// clipped away. It is a scalar subquery over env, so that it runs once
// per query (an InitPlan), not once per row a sequential scan filters.
func transformedEnvelope(srid int) string {
	corners := "ST_Transform(" + worldClampedEnvelope + ", " + sridText(srid) + ")"
	if srid == 4326 {
		return "(SELECT " + corners + " FROM env)"
	}
	return "(SELECT ST_Expand(b.g, greatest(ST_XMax(b.g) - ST_XMin(b.g), ST_YMax(b.g) - ST_YMin(b.g))" +
		" * CASE WHEN ST_XMax(env.geom) - ST_XMin(env.geom) > 6378137.0 THEN 1" +
		" ELSE (ST_XMax(env.geom) - ST_XMin(env.geom)) / (8 * 6378137.0) + 0.001 END)" +
		" FROM env, LATERAL (SELECT " + corners + " AS g) AS b)"
}

// worldHalfText is worldHalf written into a query: every digit, so that
// the envelope of a tile at the world's edge is cut at that edge exactly.
var worldHalfText = strconv.FormatFloat(worldHalf, 'f', -1, 64)

// sridText is an SRID written into a query: an int from configuration or
// the registry, never request text.
func sridText(srid int) string { return strconv.Itoa(srid) }

// queryData fills the tile query templates (see their headers).
type queryData struct {
	Table, Geom, GeomExpr, FilterExpr string
	// ID is the carried name of the id column ("" without ids). Key is
	// the column pieces join back on: the id column (the layer's
	// pieces), or an overview's own feature number (PiecesKey); Box,
	// an overview's pieces' column holding their whole feature's box
	// (PiecesBox), else empty.
	ID, Key, Box string
	// Order is the layer's order over the carried names (alias t),
	// TableOrder the same order over the relation's columns that hold
	// them (alias t), for the scan that reads it, so that an index on
	// them may serve the order.
	Order, TableOrder string
	// Cols are the columns carried (Layer.Columns), each by the
	// relation's column that holds it (Column: its own name, or the name
	// an overview stored it under) and its carried name (As); Props the
	// properties, each by the carried name of its column (As) and its own
	// name (Column), which its features carry.
	Props, Cols       []carried
	Overview, Cluster bool
	// Transform is the function that transforms the relation's
	// geometries into EPSG:3857 (ST_Transform, or TransformSafe), "" for
	// a relation in EPSG:3857.
	Transform string
	// Pieces: the relation holds pieces of the layer's rows (a
	// BuilderSubdivide storage, or an overview in pieces), joined back per
	// Key; LineMerge: they are lines, merged at their shared ends.
	Pieces, LineMerge bool
}

// carried is a column of the layer's relation as a tile query carries it:
// read as Column (quoted), then carried from step to step as As, a name
// the query makes (c0, c1…), and named Column again only in the row
// ST_AsMVT encodes. A query's steps also carry values of their own (a
// point's cell cx, cy, a line's priority prio, the geometry g…): under
// their own names, a property by one of those names would make every
// reference to it ambiguous, and which names a table's columns have is
// not the query's to choose.
type carried struct {
	Column, As string
	// Numeric: a numeric property (or a domain over numeric), which
	// ST_AsMVT would write as text; the tile writes it as a float8.
	Numeric bool
}

// Value is the property's value as the tile writes it, read from its
// carried column of alias. A numeric is cast to float8; one whose cast
// would fail the whole tile — beyond float8's range, or nearer 0 than half
// its least value — is written as ±Infinity or 0. The bounds are float8's
// to 17 digits, a hair inside the exact ones: a value between them (within
// 1e-16 of the bound, relatively) is written as ±Infinity or 0 too.
func (c carried) Value(alias string) string {
	v := alias + "." + c.As
	if !c.Numeric {
		return v
	}
	return "CASE WHEN " + v + " = 'NaN' THEN 'NaN'::float8" +
		" WHEN " + v + " > 1.7976931348623158e308 THEN 'Infinity'::float8" +
		" WHEN " + v + " < -1.7976931348623158e308 THEN '-Infinity'::float8" +
		" WHEN abs(" + v + ") < 2.4703282292062328e-324 THEN 0::float8" +
		" ELSE " + v + "::float8 END"
}

// carriedName is the name the tile queries carry the i-th of
// Layer.Columns under.
func carriedName(i int) string { return "c" + strconv.Itoa(i) }

// CarriedColumns returns the names the tile queries carry the layer's
// Columns under, in the same order: c0, c1…. Neither a step of a query
// nor an overview names a column of its own so (geom; a point overview's
// cx, cy and point_count), so the overviews `geotoll prepare` builds
// store the layer's columns under them (Storage.Columns, with
// StorageParams.SourceColumns naming the layer's), and a
// layer's column may have any name.
func (l *Layer) CarriedColumns() []string {
	cols := l.Columns()
	out := make([]string, len(cols))
	for i := range cols {
		out[i] = carriedName(i)
	}
	return out
}

// carriedAs returns, for a column of the layer's Columns, the name the
// tile queries carry it under.
func (l *Layer) carriedAs() func(name string) string {
	cols := l.Columns()
	return func(name string) string { return carriedName(slices.Index(cols, name)) }
}

// storedAs returns, for a column of the layer's Columns, the column of
// rel that holds it, quoted: the one of its storage's Columns at the
// column's index in StorageParams.SourceColumns, else its own name (the
// layer's table, the pieces, overviews of version 1). usable has checked
// that the storage carries every one of them.
func storedAs(rel relation) func(name string) string {
	s := rel.storage
	if s == nil || len(s.Params.SourceColumns) == 0 {
		return column
	}
	return func(name string) string {
		if i := slices.Index(s.SourceColumns(), name); i >= 0 { // usable checked the lengths agree
			return column(s.Columns[i])
		}
		return column(name)
	}
}

// TransformSafe is the transform into EPSG:3857 that draws what it can of
// a row ST_Transform fails on (migrations/00013_tile_transform.sql),
// called as ST_Transform is: TransformSafe(geom, 3857).
const TransformSafe = "geotoll.tile_transform"

// renderQueries renders the tile query of kind over rel (renderQuery) and
// its safe form (TransformSafe; the same query for a relation in
// EPSG:3857).
func (l *Layer) renderQueries(kind Kind, rel relation, clustered bool) (zoomQuery, error) {
	sql, err := l.renderQuery(kind, rel, clustered, "ST_Transform")
	if err != nil || rel.srid == 3857 {
		return zoomQuery{sql: sql, safe: sql}, err
	}
	safe, err := l.renderQuery(kind, rel, clustered, TransformSafe)
	return zoomQuery{sql: sql, safe: safe}, err
}

// renderQuery renders the tile query of kind over rel: sql/tile_points.sql
// for points (clustering the layer's own rows when clustered), else
// sql/tile_lines_polygons.sql. Every identifier is quoted with
// pgx.Identifier; the SRID is an int.
func (l *Layer) renderQuery(kind Kind, rel relation, clustered bool, transform string) (string, error) {
	geom := column(rel.geom)
	as, stored := l.carriedAs(), storedAs(rel)
	d := queryData{
		Table: rel.ident.Sanitize(), Geom: geom,
		Overview: rel.storage != nil && rel.storage.Builder == BuilderOverview, Cluster: clustered,
		Pieces:     rel.storage != nil && (rel.storage.Builder == BuilderSubdivide || rel.storage.InPieces()),
		Order:      orderSQLBy("t", l.order, as),
		TableOrder: orderSQLBy("t", l.order, stored),
	}
	if !l.WithoutID {
		d.ID, d.Key = as(l.IDColumn), stored(l.IDColumn)
	}
	if d.Overview && d.Pieces {
		// Joined on the overview's own feature number, which also ends
		// the order: ids may repeat, or be absent.
		d.Key, d.Box = column(PiecesKey), column(PiecesBox)
		if d.Order == "" {
			d.Order = "t.fid"
		} else {
			d.Order += ", t.fid"
		}
	}
	var numeric []string
	if l.state != nil { // nil until the catalog serves the layer
		if n := l.state.numeric.Load(); n != nil {
			numeric = *n
		}
	}
	for _, p := range l.Properties {
		c := carried{Column: column(p), As: as(p)}
		c.Numeric = slices.Contains(numeric, p)
		d.Props = append(d.Props, c)
	}
	for i, c := range l.Columns() {
		d.Cols = append(d.Cols, carried{Column: stored(c), As: carriedName(i)})
	}
	if rel.srid == 3857 {
		d.GeomExpr = "t." + geom
		d.FilterExpr = "ST_Expand(env.geom, env.buffer_m)"
	} else {
		d.Transform = transform
		d.GeomExpr = transform + "(t." + geom + ", 3857)"
		d.FilterExpr = transformedEnvelope(rel.srid)
	}
	d.LineMerge = d.Pieces && kind == KindLine
	tmpl := linesTemplate
	if kind == KindPoint {
		tmpl = pointsTemplate
		if d.Order == "" {
			d.Order = "t.cx, t.cy" // no id, no order_by: the cell is the only key
		}
	} else if d.Order == "" {
		// No id, no order_by: the geometry (its box) is the only key,
		// carried as g.
		d.Order, d.TableOrder = "t.g", "t."+geom
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, d); err != nil {
		return "", fmt.Errorf("layer %q: render %s: %w", l.Name, tmpl.Name(), err)
	}
	return buf.String(), nil
}

// builtAs reports whether an overview recorded with got was built as the
// layer's configuration asks for its zoom (OverviewParams): the same build,
// its order_by compared in canonical form, so that the same order spelt
// otherwise ("rank ASC", "rank", "rank, id") is the same build.
//
// Whether it is stored in pieces, and of what size, is not compared:
// the query reads what the storage records (Storage.InPieces), and either
// draws the same tile.
func (l *Layer) builtAs(got StorageParams, kind Kind) bool {
	want := l.OverviewParams(kind, got.Zoom)
	got.OrderBy, got.MaxVertices = l.CanonicalOrderBy(got.OrderBy), want.MaxVertices
	return got.sameBuild(want)
}
