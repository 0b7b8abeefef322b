package tiles

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// Store renders MVT tiles in PostGIS.
type Store struct {
	pool *pgxpool.Pool
	// RetryAfter is the Retry-After (seconds) sent with a 503 when the
	// database timed out or could not be reached.
	RetryAfter int
	// AcquireTimeout, when positive, bounds the wait for a pooled
	// connection: a database that does not answer, or a pool whose every
	// connection is busy, gives a 503 after this instead of a hang.
	AcquireTimeout time.Duration
	// Observer, if set, times each layer's query.
	Observer Observer
	// Calls, if set, counts database calls by outcome and the statements
	// still running after their answer (see package pgcall's Observer).
	Calls interface {
		Call(outcome string)
		Outliving(delta int)
	}
	// PlanChanged, if set, is called when a tile read changed a layer's
	// plan (its storage was gone: the layer reads its table now), so that
	// what prices its tiles can follow.
	PlanChanged func(layer string)
}

// tileTimeoutDetail is the problem detail of a tile cut by its timeout.
const tileTimeoutDetail = "the tile query exceeded its time limit; try again later or at a higher zoom"

// NewStore returns a Store reading through pool. The pool should connect as
// the read-only role that the migrations create.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool, RetryAfter: 2} }

// db is the guarded way to the pool, with the Store's settings.
func (s *Store) db() *pgcall.DB {
	return &pgcall.DB{Pool: s.pool, AcquireTimeout: s.AcquireTimeout, RetryAfter: s.RetryAfter,
		TimeoutDetail: tileTimeoutDetail, Calls: s.Calls, ReadSettings: ReadSettingsSQL}
}

// Tile renders one tile (see Render) and returns its bytes.
func (s *Store) Tile(ctx context.Context, layers []*Layer, t maptile.Tile) ([]byte, error) {
	r, err := s.Render(ctx, layers, t)
	return r.MVT, err
}

// Render renders one tile with one MVT layer per entry of layers, in order,
// in one guarded read (pgcall.DB.Read: one read-only transaction with jit
// off and generic plans, ReadSettingsSQL, sent as one batch), each layer's
// query under its own statement
// timeout (so a composite cannot lend a tight layer the slack of a loose
// one). Each layer's query holds the layer to its byte budget itself (see
// Budget); the result says which were reduced. The tile may be empty (no
// features). ctx is the request's: a client that hangs up cancels the
// query.
//
// A statement timeout is a problem.Timeout (503 with Retry-After); an
// unreachable database is problem.Unavailable, and so is a layer whose
// table no longer fits its configuration (the problem names the layer and
// the reason; see Catalog.Checks). A row PostGIS cannot transform into
// EPSG:3857 (a vertex past a pole) does not fail the tile: it is drawn
// again with the part of that row Web Mercator shows, or without the row
// (geotoll.tile_transform). A layer whose serving storage is gone
// (dropped by a `geotoll prepare` that retired it while this server could
// not re-read the registry) fails so once: it reads its table from then
// on, until a Refresh reads the registry (see Layer.storageGone). Either
// may wrap a
// pgcall.Stopping when the query had not stopped by the time it was
// answered.
func (s *Store) Render(ctx context.Context, layers []*Layer, t maptile.Tile) (Rendered, error) {
	return s.render(ctx, layers, t, false)
}

// render is Render; with safe, each layer not in EPSG:3857 is read through
// its query that draws what it can of rows the transform fails on.
func (s *Store) render(ctx context.Context, layers []*Layer, t maptile.Tile, safe bool) (Rendered, error) {
	if len(layers) == 0 {
		return Rendered{}, problem.Malformed("layer", "no layer")
	}
	parts := make([][]byte, len(layers))
	levels := make([]int, len(layers))
	stmts := make([]pgcall.Statement, len(layers))
	for i, l := range layers {
		sql, args := l.query(t, safe)
		stmts[i] = pgcall.Statement{SQL: sql, Args: args, Timeout: l.StatementTimeout, Scan: pgcall.One(&parts[i], &levels[i])}
	}
	timing, err := s.db().Read(ctx, stmts...)
	if err != nil && pgcall.TransformFailed(err) {
		// A layer whose filter box, the tile's envelope transformed into
		// its relation's SRID, lies outside that projection's domain has
		// nothing in the tile: the tile is drawn without it. A probe whose
		// statement had not stopped when it answered is the answer: the
		// request waits for it (pgcall.Respond) as for its own statements.
		out, perr := s.outsideProjection(ctx, layers, t)
		var stopping *pgcall.Stopping
		if errors.As(perr, &stopping) {
			return Rendered{}, perr
		}
		if perr == nil && len(out) > 0 {
			rest := slices.DeleteFunc(slices.Clone(layers), func(l *Layer) bool { return slices.Contains(out, l) })
			if len(rest) == 0 {
				return Rendered{}, nil
			}
			return s.render(ctx, rest, t, safe)
		}
		// A transform that failed on a row (a vertex past a pole): the
		// tile again, each row transformed by geotoll.tile_transform,
		// which draws the part of such a row Web Mercator can show (in
		// EPSG:4326), or leaves the row out. A call of it costs a
		// subtransaction, so only such tiles pay it. Failing again (the
		// migration not run, or the read role without its right), the
		// layer's misfit (below).
		if !safe && ctx.Err() == nil {
			return s.render(ctx, layers, t, true)
		}
	}
	if err != nil {
		if missing := pgcall.MissingRelation(err); missing != "" {
			for _, l := range layers {
				src := l.Source(t.Z)
				if src.Builder != "" && strings.Contains(missing, `"`+strings.Join(src.Relation, ".")+`"`) &&
					l.storageGone() && s.PlanChanged != nil {
					s.PlanChanged(l.Name)
				}
			}
		}
		return Rendered{}, pgcall.Misfit(err, subject(layers))
	}
	tile := Rendered{MVT: parts[0]} // one layer: the bytes pgx read for this call alone
	if len(parts) > 1 {
		// An MVT tile is a protobuf message whose only field is the
		// repeated layer, so concatenated layers are one valid tile.
		tile.MVT = bytes.Join(parts, nil)
	}
	for i, l := range layers {
		if s.Observer != nil {
			s.Observer.TileQuery(l.Name, t.Z, timing.Statements[i])
		}
		if levels[i] > 0 {
			tile.Reduced = append(tile.Reduced, Reduction{Layer: l.Name, Level: levels[i]})
		}
	}
	return tile, nil
}

// outsideProjection returns the layers whose relation at t's zoom is in
// another SRID than 3857 and whose filter box for t — the tile's envelope,
// widened by its buffer, transformed into that SRID, as the tile's query
// computes it — PostGIS cannot transform: the tile lies outside the
// projection's domain (a national grid's layer, far from its country).
func (s *Store) outsideProjection(ctx context.Context, layers []*Layer, t maptile.Tile) ([]*Layer, error) {
	env := Envelope(t)
	var out []*Layer
	for _, l := range layers {
		src := l.plan().zoom(t.Z).source
		if src.SRID == 3857 {
			continue
		}
		probe := `WITH env AS (SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS geom, $5::float8 AS buffer_m) SELECT ` +
			transformedEnvelope(src.SRID) + ` IS NOT NULL`
		_, err := s.db().Read(ctx, pgcall.Statement{SQL: probe, Timeout: l.StatementTimeout,
			Args: []any{env.Min[0], env.Min[1], env.Max[0], env.Max[1], l.bufferMetres(src, t)}})
		switch {
		case err == nil:
		case pgcall.TransformFailed(err):
			out = append(out, l)
		default:
			return nil, err
		}
	}
	return out, nil
}
