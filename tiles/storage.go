package tiles

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/signature"
	queries "github.com/geotoll/geotoll/sql"
)

// ServingSchema is the schema that holds serving storage and its registry
// (created by the migrations, owned by the schema owner, readable by
// geotoll_reader).
const ServingSchema = "geotoll_serving"

// BuilderOverview is the builder of per-zoom overview tables.
const BuilderOverview = "overview"

// Storage is one relation `geotoll prepare` built for a layer, as recorded
// in the serving registry (geotoll_serving.storage; see package serving,
// which writes it).
type Storage struct {
	Layer    string // the layer's name
	Builder  string // what built it: BuilderOverview or BuilderSubdivide
	Relation string // its table in ServingSchema
	// ZoomMin..ZoomMax are the tile zooms it serves; both -1 for storage
	// that serves no tile zoom.
	ZoomMin, ZoomMax int
	GeometryColumn   string
	SRID             int
	Kind             Kind
	// Columns are the relation's columns that hold the layer's source
	// columns it carries (id, properties, order_by): each by its own name
	// (the pieces, and overviews of version 1), or an overview's names of
	// its own (c0, c1…), each holding the column Params.SourceColumns
	// names at the same index (see SourceColumns). Listing only names the
	// relation holds keeps a server that predates Params.SourceColumns,
	// which reads each of a layer's columns by its own name from storage
	// whose Columns include it, off storage that holds none by its name.
	Columns []string
	Params  StorageParams
	// SourceTable is the layer's table it was built from, quoted, and
	// SourceGeometryColumn that table's geometry column: a layer reads
	// only storage built from its own table and geometry column.
	SourceTable, SourceGeometryColumn string
	// sourceOID is the relation SourceTable names now, 0 for none (see
	// LoadStorage).
	sourceOID int64
	// SourceRows is the row count of the layer's table it was built from,
	// SourceSignature its change detector then ("" for none: a view).
	SourceRows      int64
	SourceSignature string
	Rows            int64
	BuiltAt         time.Time
	// CheckedAt is when `geotoll prepare` last found it current (built or
	// unchanged since): the storage is at most this old.
	CheckedAt time.Time
}

// PiecesKey and PiecesBox are the columns of an overview stored in
// pieces (Storage.InPieces) besides the geometry and the layer's
// columns: each piece's feature's number in the overview (bigint: the
// pieces of a feature share it, whatever the layer's ids) and that whole
// feature's box (box2d), from which a feature too small for a tile's grid
// is drawn as a point.
const (
	PiecesKey = "fid"
	PiecesBox = "box"
)

// InPieces reports whether s is an overview stored in pieces: each of its
// features cut into pieces of at most Params.MaxVertices vertices, which
// share the feature's PiecesKey, so that a tile reads the pieces near it,
// not whole features (a border that crosses the antimeridian meets every
// tile of its latitudes).
func (s *Storage) InPieces() bool { return s.Builder == BuilderOverview && s.Params.MaxVertices > 0 }

// Ident is the storage's relation, schema-qualified.
func (s *Storage) Ident() pgx.Identifier { return pgx.Identifier{ServingSchema, s.Relation} }

// SourceColumns returns the layer's source columns s carries, in the
// order of Columns, which hold them: Params.SourceColumns, or Columns
// itself when it records none (each column held by its own name).
func (s *Storage) SourceColumns() []string {
	if len(s.Params.SourceColumns) > 0 {
		return s.Params.SourceColumns
	}
	return s.Columns
}

// StorageParams is what a builder recorded about how it built a relation
// (the registry's params column, JSON). Fields a builder does not use are
// zero.
type StorageParams struct {
	// Version is the builder's version: a relation built by another is
	// rebuilt.
	Version int `json:"version"`
	// Zoom is the zoom an overview was built for.
	Zoom int `json:"zoom"`
	// CellsPerTile and CellMetres are a point overview's cluster grid.
	CellsPerTile int     `json:"cells_per_tile,omitempty"`
	CellMetres   float64 `json:"cell_m,omitempty"`
	// ToleranceMetres and MinSizeMetres are a line or polygon overview's
	// simplification.
	ToleranceMetres float64 `json:"tolerance_m,omitempty"`
	MinSizeMetres   float64 `json:"min_size_m,omitempty"`
	// MaxVertices is the most vertices of a piece: of the layer's pieces
	// (BuilderSubdivide), or of a line or polygon overview's when it is
	// stored in pieces (Storage.InPieces).
	MaxVertices int `json:"max_vertices,omitempty"`
	// OrderBy is the order that chose each cluster's representative.
	OrderBy []string `json:"order_by,omitempty"`
	// SourceColumns are the layer's source columns Storage.Columns hold,
	// in the same order, when those are not their names: an overview
	// stores them under names of its own (c0, c1…; see
	// Layer.CarriedColumns), beside the columns it names itself (geom; a
	// point overview's cx, cy and point_count), so that a layer's column
	// may have any name. Empty: Storage.Columns are the source columns,
	// each held by its own name (the pieces, which other code reads by
	// those names, and overviews of version 1).
	SourceColumns []string `json:"source_columns,omitempty"`
}

// sameBuild reports whether p and q record the same build but for the
// builder's Version: the zoom, cluster grid, simplification, order and
// pieces' size. Lengths compare exactly: both sides compute them alike
// (Layer.OverviewParams), and JSON carries a float64 unchanged.
func (p StorageParams) sameBuild(q StorageParams) bool {
	return p.Zoom == q.Zoom && p.CellsPerTile == q.CellsPerTile && p.CellMetres == q.CellMetres &&
		p.ToleranceMetres == q.ToleranceMetres && p.MinSizeMetres == q.MinSizeMetres &&
		p.MaxVertices == q.MaxVertices && slices.Equal(p.OrderBy, q.OrderBy)
}

// generalization is the Generalization of a tile at zoom z read from the
// storage: what the builder did (its cells per tile, its lengths).
func (p StorageParams) generalization(z maptile.Zoom) Generalization {
	g := Generalization{
		Zoom: z, On: true, CellsPerTile: p.CellsPerTile,
		ToleranceMetres: p.ToleranceMetres, MinSizeMetres: p.MinSizeMetres,
	}
	if p.CellsPerTile > 0 {
		g.CellMetres = TileWidth(z) / float64(p.CellsPerTile)
	}
	return g
}

var (
	storageSQL     = queries.MustRead("serving_storage.sql")
	layerTablesSQL = queries.MustRead("layer_tables.sql")
)

// LoadStorage reads the serving registry through q (the read role may):
// every relation built, in registry order (layer, zoom, builder).
func LoadStorage(ctx context.Context, q Querier) ([]Storage, error) {
	rows, err := q.Query(ctx, storageSQL)
	if err != nil {
		return nil, fmt.Errorf("serving registry: %w", err)
	}
	var out []Storage
	var s Storage
	var params []byte
	var kind string
	_, err = pgx.ForEachRow(rows, []any{&s.Layer, &s.Builder, &s.Relation, &s.ZoomMin, &s.ZoomMax,
		&s.GeometryColumn, &s.SRID, &kind, &s.Columns, &params, &s.SourceTable, &s.SourceGeometryColumn, &s.sourceOID,
		&s.SourceRows, &s.SourceSignature, &s.Rows, &s.BuiltAt, &s.CheckedAt}, func() error {
		s.Kind = Kind(kind)
		s.Params = StorageParams{}
		if err := json.Unmarshal(params, &s.Params); err != nil {
			return fmt.Errorf("storage %s: params: %w", s.Relation, err)
		}
		out = append(out, s)
		s.Columns = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("serving registry: %w", err)
	}
	return out, nil
}

// Refreshed is what one Catalog.Refresh found.
type Refreshed struct {
	// Changed names the layers whose kind or storage changed: their cached
	// tiles are stale.
	Changed []string
	// Behind names the followed layers (Catalog.Follow) whose storage, or
	// some of it, was built from another version of their table: their
	// tiles read the table at those zooms until `geotoll prepare` builds
	// it again.
	Behind []string
	// Warnings are storage the layers cannot read (left out: those zooms
	// read the layer's table) and kinds that could not be read.
	Warnings []error
	// Kept names the layers that kept their plan, unchecked, because
	// their storage could not be read: warnings of theirs a refresh
	// before found may still stand.
	Kept []string
}

// Refresh reads through q (the read role) what the database knows about
// the catalog's layers — the geometry kind of each layer whose
// configuration names none (until it has been read once), and the serving
// registry — and swaps in each layer's new plan. Requests in flight keep
// the plan they started with. Reading the registry failing is an error
// (the layers keep their plans, with any kinds read); storage a layer
// cannot use is a warning. A layer reads only the storage registered under
// its name that was built from the table it reads now (the relation its
// table's name and the registry's source_table resolve to) and from its
// geometry column: storage of the table it read before it was configured
// onto another is left out, with a warning, until `geotoll prepare`
// rebuilds it.
func (c *Catalog) Refresh(ctx context.Context, q Querier) (Refreshed, error) {
	var out Refreshed
	layers := c.Layers()
	storage, loadErr := LoadStorage(ctx, q)
	var tables []int64
	if loadErr == nil {
		tables, loadErr = layerTables(ctx, q, layers)
	}
	byLayer := make(map[string][]Storage)
	for _, s := range storage {
		byLayer[s.Layer] = append(byLayer[s.Layer], s)
	}
	for i, l := range layers {
		old := l.plan()
		kind := old.kind
		if l.GeometryKind != "" {
			kind = l.GeometryKind
		} else if !l.state.kindRead.Load() {
			k, err := l.ReadKind(ctx, q)
			if err != nil {
				out.Warnings = append(out.Warnings, err)
			} else {
				kind = k
				l.state.kindRead.Store(true)
			}
		}
		if err := l.readNumeric(ctx, q); err != nil {
			out.Warnings = append(out.Warnings, err)
		}
		layerStorage := old.storage
		if loadErr == nil {
			var other []error
			layerStorage, other = l.builtFrom(tables[i], byLayer[l.Name])
			out.Warnings = append(out.Warnings, other...)
		}
		writes := l.state.writes.Load()
		var table string
		if l.state.follow.Load() {
			current, sig, err := currentStorage(ctx, q, l, layerStorage)
			if err != nil {
				out.Warnings = append(out.Warnings, err)
				out.Kept = append(out.Kept, l.Name)
				continue // the layer keeps its plan
			}
			if len(current) < len(layerStorage) {
				out.Behind = append(out.Behind, l.Name)
			}
			layerStorage, table = current, sig
		}
		p, skipped, err := l.newPlan(kind, layerStorage)
		if err != nil {
			return out, err
		}
		p.table = table
		out.Warnings = append(out.Warnings, skipped...)
		if l.install(p, writes) || p.kind != old.kind || !sameStorage(p.storage, old.storage) || p.table != old.table {
			out.Changed = append(out.Changed, l.Name)
		}
	}
	return out, loadErr
}

// install stores p as the layer's plan, unless the table was written
// (Catalog.Written) since writes was read: then p's storage may predate
// the write, and the table is read instead. It reports whether it stored
// a plan of the table instead of p.
func (l *Layer) install(p *plan, writes uint64) (instead bool) {
	l.state.swap.Lock()
	defer l.state.swap.Unlock()
	if l.state.writes.Load() != writes && len(p.storage) > 0 && l.readTableLocked(p) {
		return true
	}
	l.state.plan.Store(p)
	return false
}

// readTableLocked stores a plan of like's kind and table that reads the
// layer's table at every zoom, none of its storage; it reports whether it
// did (planning the kind has not failed before, so it does not fail now).
// The caller holds l.state.swap.
func (l *Layer) readTableLocked(like *plan) bool {
	own, _, err := l.newPlan(like.kind, nil)
	if err != nil {
		return false
	}
	own.table = like.table
	l.state.plan.Store(own)
	return true
}

// storageGone makes l read its table at every zoom, when a tile read
// found a relation of its storage missing: `geotoll prepare` drops
// storage it retired once Options.Retain has passed, which a server that
// could not re-read the registry meanwhile (it keeps its plan when a
// Refresh fails) may still read. The next Refresh that reads the
// registry plans the storage it names. It reports whether l's plan
// changed (it read storage until now).
func (l *Layer) storageGone() bool { return l.readTable(false) }

// currentStorage reads l's table's change detector (package signature),
// sig, and returns the storage of storage that was built from the table
// as it is now: whose recorded detector is sig. Storage of a source
// without one (a view) is kept.
func currentStorage(ctx context.Context, q Querier, l *Layer, storage []Storage) (current []Storage, sig string, err error) {
	s, err := signature.Of(ctx, q, l.tableIdent().Sanitize())
	if err != nil {
		return nil, "", fmt.Errorf("layer %q: %w", l.Name, err)
	}
	sig = s.String()
	for _, st := range storage {
		if st.SourceSignature == "" || signature.Same(st.SourceSignature, sig) {
			current = append(current, st)
		}
	}
	return current, sig, nil
}

// Follow makes Refresh check the named layer's storage against its table
// at every refresh: storage built before the table's last write (its
// change detector, package signature, differs from the one `geotoll
// prepare` recorded) is not read, the table is, until prepare builds it again; and
// a table written since the last refresh (by another replica, say) puts
// the layer in Refreshed.Changed, so that its cached tiles go. Use
// it for layers whose table the server itself writes (the fence table,
// through the fence admin), whose tiles must follow the writes; a layer's
// table is otherwise trusted to change only as often as prepare runs. It
// reports whether the catalog has the layer.
func (c *Catalog) Follow(name string) bool {
	l := c.Layer(name)
	if l == nil {
		return false
	}
	l.state.follow.Store(true)
	return true
}

// Written tells the catalog that the named layer's table was just written
// (and committed): from now its tiles read the table at every zoom, none
// of the storage built before the write, and the layer is followed (see
// Follow), so that a Refresh puts storage back only once `geotoll prepare`
// has built it from the table as written. Drop the layer's cached tiles
// after it: a render that starts later reads the table. It reports
// whether the layer read storage until now (its tiles changed source).
func (c *Catalog) Written(name string) bool {
	l := c.Layer(name)
	if l == nil {
		return false
	}
	l.state.follow.Store(true)
	return l.readTable(true)
}

// readTable makes l read its table at every zoom, none of its storage,
// counting a write (Catalog.Written) when written; it reports whether l
// read storage until now.
func (l *Layer) readTable(written bool) bool {
	l.state.swap.Lock()
	defer l.state.swap.Unlock()
	if written {
		l.state.writes.Add(1)
	}
	old := l.plan()
	return len(old.storage) > 0 && l.readTableLocked(old)
}

// layerTables returns the relation each layer's table names now, as
// LoadStorage resolves source_table (0 for none), in the order of layers.
func layerTables(ctx context.Context, q Querier, layers []*Layer) ([]int64, error) {
	names := make([]string, len(layers))
	for i, l := range layers {
		names[i] = l.tableIdent().Sanitize()
	}
	rows, err := q.Query(ctx, layerTablesSQL, names)
	if err != nil {
		return nil, fmt.Errorf("layer tables: %w", err)
	}
	oids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("layer tables: %w", err)
	}
	if len(oids) != len(layers) {
		return nil, fmt.Errorf("layer tables: %d rows for %d layers", len(oids), len(layers))
	}
	return oids, nil
}

// builtFrom returns the storage of the layer's that was built from its
// table, the relation table (0: none, in which case no storage is), and
// from its geometry column; the rest is reported in other.
func (l *Layer) builtFrom(table int64, storage []Storage) (own []Storage, other []error) {
	for _, s := range storage {
		if table == 0 {
			other = append(other, fmt.Errorf("layer %q: storage %s was built from %s, and the layer's table %s does not exist now (dropped or renamed); it is not read",
				l.Name, s.Relation, s.SourceTable, l.tableIdent().Sanitize()))
			continue
		}
		if s.sourceOID != table || s.SourceGeometryColumn != l.GeometryColumn {
			other = append(other, fmt.Errorf("layer %q: storage %s was built from %s (column %q), not from the layer's %s (column %q); run geotoll prepare",
				l.Name, s.Relation, s.SourceTable, s.SourceGeometryColumn, l.tableIdent().Sanitize(), l.GeometryColumn))
			continue
		}
		own = append(own, s)
	}
	return own, other
}

// sameStorage reports whether two plans read the same builds.
func sameStorage(a, b []Storage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Relation != b[i].Relation || !a[i].BuiltAt.Equal(b[i].BuiltAt) {
			return false
		}
	}
	return true
}

// StorageSummary is a layer's storage from one builder, summed over its
// relations: what TileJSON, the catalog and the metrics report.
type StorageSummary struct {
	Builder   string `json:"builder"`
	MinZoom   int    `json:"minzoom"` // the tile zooms served, -1 for none
	MaxZoom   int    `json:"maxzoom"`
	Relations int    `json:"relations"`
	Rows      int64  `json:"rows"`
	// BuiltAt is the oldest build, CheckedAt the oldest time `geotoll
	// prepare` found a relation current.
	BuiltAt   time.Time `json:"built_at"`
	CheckedAt time.Time `json:"checked_at"`
}

// Age is how long before now the storage was last found current: how far
// behind its table it may be.
func (s StorageSummary) Age(now time.Time) time.Duration { return max(0, now.Sub(s.CheckedAt)) }

// StorageSummary sums the storage the layer reads now per builder, in the
// order builders first appear.
func (l *Layer) StorageSummary() []StorageSummary {
	var out []StorageSummary
	for _, s := range l.plan().storage {
		i := slices.IndexFunc(out, func(x StorageSummary) bool { return x.Builder == s.Builder })
		if i < 0 {
			out = append(out, StorageSummary{Builder: s.Builder, MinZoom: s.ZoomMin, MaxZoom: s.ZoomMax,
				BuiltAt: s.BuiltAt, CheckedAt: s.CheckedAt})
			i = len(out) - 1
		}
		x := &out[i]
		if s.ZoomMin >= 0 && (x.MinZoom < 0 || s.ZoomMin < x.MinZoom) {
			x.MinZoom = s.ZoomMin
		}
		x.MaxZoom = max(x.MaxZoom, s.ZoomMax)
		x.Relations++
		x.Rows += s.Rows
		if s.BuiltAt.Before(x.BuiltAt) {
			x.BuiltAt = s.BuiltAt
		}
		if s.CheckedAt.Before(x.CheckedAt) {
			x.CheckedAt = s.CheckedAt
		}
	}
	return out
}
