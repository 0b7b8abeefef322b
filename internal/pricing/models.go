// Package pricing estimates, in memory, the work a request asks of the
// database: it keeps a density model (internal/density) of every relation a
// layer reads, built from the database at start-up and refreshed in the
// background, and turns a tile, a box, a radius or a point into the
// features and vertices the query will read. No estimate ever calls the
// database; a relation whose model is not built yet has no estimate, and
// the toll prices such a request by its size (area) meanwhile — unless the
// relation is a rebuild of one modelled before (Lazy.Set): then by that
// one's model.
//
// A tile is estimated on the relation its query reads at its zoom — the
// layer's own table, or a precomputed overview at low zooms (see
// tiles.Layer.Source) — over the tile's envelope widened by the layer's
// buffer, as the query's filter reads it. within estimates the radius
// circle on its layer, bbox the box, contains one point on the fences (or
// on its layer's model, with ?layer=), and a batch check the sum over its
// points.
package pricing

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/density"
)

// Models keeps one density model per relation, each refreshed in the
// background by Run. It is safe for concurrent use.
type Models struct {
	db   density.DB
	opts density.Options

	mu  sync.Mutex
	all map[string]*density.Refresher // by density.Relation.String()
}

// NewModels returns an empty set of models read through db (the read role).
// Unless opts.Slots says otherwise, at most BuildsOn(the pool's size) build
// at once (Builds when db is no *pgxpool.Pool).
func NewModels(db density.DB, opts density.Options) *Models {
	if opts.Slots == nil {
		opts.Slots = buildSlots(db)
	}
	return &Models{db: db, opts: opts, all: make(map[string]*density.Refresher)}
}

// Builds is how many models m builds at once, at most.
func (m *Models) Builds() int { return m.opts.Slots.Cap() }

// Track makes sure rel has a model (built by Run) and returns its
// refresher; a relation already tracked gets the same one.
func (m *Models) Track(rel density.Relation) (*density.Refresher, error) {
	key := rel.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.all[key]; ok {
		return r, nil
	}
	r, err := density.NewRefresher(m.db, rel, m.opts)
	if err != nil {
		return nil, fmt.Errorf("pricing: %s: %w", rel, err)
	}
	m.all[key] = r
	return r, nil
}

// Run builds every tracked model, then keeps each current, until ctx is
// done. Relations tracked later are run as they come (see Track); a
// relation Keep let go stops being refreshed.
func (m *Models) Run(ctx context.Context) {
	running := map[*density.Refresher]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m.mu.Lock()
		tracked := make(map[*density.Refresher]bool, len(m.all))
		for _, r := range m.all {
			tracked[r] = true
			if running[r] == nil {
				rctx, cancel := context.WithCancel(ctx)
				running[r] = cancel
				wg.Go(func() { r.Run(rctx) })
			}
		}
		m.mu.Unlock()
		for r, cancel := range running {
			if !tracked[r] {
				cancel()
				delete(running, r)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Nudge asks for a build soon of every tracked model of table (see
// density.Refresher.Nudge): the server has just written it.
func (m *Models) Nudge(table pgx.Identifier) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.all {
		if slices.Equal(r.Relation().Table, table) {
			r.Nudge()
		}
	}
}

// Keep stops tracking every relation but those of keep (as
// density.Relation.String() names them): the relations a tile layer no
// longer reads once `geotoll prepare` swapped its storage.
func (m *Models) Keep(keep map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.all {
		if !keep[key] {
			delete(m.all, key)
		}
	}
}

// Build builds every tracked model once, one after another, and returns
// the first error: for a command that needs the models now (calibrate),
// not for serve, whose Run builds them in the background.
func (m *Models) Build(ctx context.Context) error {
	m.mu.Lock()
	all := make([]*density.Refresher, 0, len(m.all))
	for _, r := range m.all {
		all = append(all, r)
	}
	m.mu.Unlock()
	for _, r := range all {
		if err := r.Refresh(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Status is every model's state, by relation.
func (m *Models) Status() []density.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]density.Status, 0, len(m.all))
	for _, r := range m.all {
		out = append(out, r.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Relation < out[j].Relation })
	return out
}

// Kinds reads the geometry kind of relations from PostGIS's catalog
// (geometry_columns): a Point, Line or Polygon model (multi types alike).
// It is one query at start-up, never per request; a relation whose type is
// generic (GEOMETRY) is taken as polygons, the dearest to read.
func Kinds(ctx context.Context, db density.DB, tables []pgx.Identifier, columns []string) ([]density.Kind, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	out := make([]density.Kind, len(tables))
	for i, t := range tables {
		schema, name := "public", t[len(t)-1]
		if len(t) > 1 {
			schema = t[0]
		}
		var typ string
		err := tx.QueryRow(ctx, `SELECT upper(type) FROM geometry_columns
			WHERE f_table_schema = $1 AND f_table_name = $2 AND f_geometry_column = $3`, schema, name, columns[i]).Scan(&typ)
		if err != nil && err != pgx.ErrNoRows {
			return nil, fmt.Errorf("pricing: geometry type of %s: %w", t.Sanitize(), err)
		}
		out[i] = kindOf(typ)
	}
	return out, nil
}

func kindOf(typ string) density.Kind {
	switch typ {
	case "POINT", "MULTIPOINT":
		return density.Point
	case "LINESTRING", "MULTILINESTRING":
		return density.Line
	}
	return density.Polygon
}
