package geofence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkb"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// Store runs geofence queries in PostGIS, each a guarded call of its own
// (package pgcall): reads in a READ ONLY transaction, fence writes in a
// read-write one, each with statement_timeout and jit off set locally, with
// the request's context, so a client that hangs up cancels its query.
type Store struct {
	pool *pgxpool.Pool
	// Timeout is the statement_timeout of contains, check and fence admin
	// reads (layers carry their own).
	Timeout time.Duration
	// WriteTimeout is the statement_timeout of each statement of a fence
	// write (validate; insert, update or delete with the trigger that cuts
	// the fence into pieces). A write cut by it is a 503 of its own (see
	// writeTimeoutDetail).
	WriteTimeout time.Duration
	// RetryAfter is the Retry-After (seconds) sent with a 503 when the
	// database timed out or could not be reached, fence writes included.
	RetryAfter int
	// AcquireTimeout, when positive, bounds the wait for a pooled
	// connection: a database that does not answer, or a pool whose every
	// connection is busy, gives a 503 after this instead of a hang.
	AcquireTimeout time.Duration
	// Calls, if set, counts database calls by outcome and the statements
	// still running after their answer (see package pgcall's Observer).
	Calls interface {
		Call(outcome string)
		Outliving(delta int)
	}
}

// queryTimeoutDetail is the problem detail of a geofence query cut by its
// timeout.
const queryTimeoutDetail = "the query exceeded its time limit; try again later with a smaller radius, box or batch"

// NewStore returns a Store over pool. For reads the pool should connect as
// the read-only role (geotoll_reader); for fence writes as
// geotoll_fence_writer, which may write geotoll.geofences and nothing else.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, Timeout: DefaultStatementTimeout, WriteTimeout: DefaultFenceWriteTimeout, RetryAfter: 2}
}

// writeTimeoutDetail is the problem detail of a fence write cut by
// WriteTimeout (what says "smaller radius, box or batch" to a read would
// mislead here). The time a write takes grows with the fence's vertices —
// validating it and cutting it into pieces —, so the detail says to
// simplify it or raise the setting. The answer keeps its Retry-After: a
// database busy with other work also makes a write slow, and then the
// same write passes later; a fence that is simply too large does not, and
// the detail says so.
func writeTimeoutDetail(timeout time.Duration) string {
	return fmt.Sprintf("the fence took longer than the fence write timeout (%s a statement) to store and cut into pieces, and was cut: "+
		"nothing was written. Simplify it (fewer vertices), or have the operator raise geofence.fence_write_timeout; "+
		"the same write passes later only if the database was busy", timeout)
}

// deleteTimeoutDetail is writeTimeoutDetail for a delete, which nothing
// in the request can make smaller.
func deleteTimeoutDetail(timeout time.Duration) string {
	return fmt.Sprintf("deleting the fence and its pieces took longer than the fence write timeout (%s a statement), and was cut: "+
		"nothing was deleted; try again later, or have the operator raise geofence.fence_write_timeout", timeout)
}

// db is the guarded way to the pool, with the Store's settings.
func (s *Store) db() *pgcall.DB {
	return &pgcall.DB{Pool: s.pool, AcquireTimeout: s.AcquireTimeout, RetryAfter: s.RetryAfter,
		TimeoutDetail: queryTimeoutDetail, Calls: s.Calls}
}

// Query texts; the layer queries are rendered per layer by NewCatalog.
var (
	containsSQL      = queries.MustRead("geofence_contains.sql")
	checkSQL         = queries.MustRead("geofence_check.sql")
	fenceGetSQL      = queries.MustRead("geofence_fence_get.sql")
	fenceListSQL     = queries.MustRead("geofence_fence_list.sql")
	fenceValidateSQL = queries.MustRead("geofence_fence_validate.sql")
	fenceInsertSQL   = queries.MustRead("geofence_fence_insert.sql")
	fenceUpdateSQL   = queries.MustRead("geofence_fence_update.sql")
	fenceDeleteSQL   = queries.MustRead("geofence_fence_delete.sql")
	fenceLockSQL     = queries.MustRead("geofence_fence_lock.sql")
)

var errNoFence = errors.New("no such fence")

var (
	_ Reader = (*Store)(nil)
	_ Writer = (*Store)(nil)
)

// Within implements Reader.
func (s *Store) Within(ctx context.Context, q WithinQuery) ([]Feature, bool, error) {
	fs, truncated, err := s.features(ctx, q.Layer.StatementTimeout, q.Layer.withinSQL, q.Lng, q.Lat, q.Radius, q.Limit, positionCap(q.MaxVertices))
	return fs, truncated, pgcall.Misfit(err, q.Layer.subject())
}

// BBox implements Reader. A box that crosses the antimeridian is queried as
// its two parts in one statement.
func (s *Store) BBox(ctx context.Context, q BBoxQuery) ([]Feature, bool, error) {
	parts := q.Box.Parts()
	a := parts[0]
	var west2, east2 *float64
	if len(parts) == 2 {
		west2, east2 = &parts[1].Min[0], &parts[1].Max[0]
	}
	fs, truncated, err := s.features(ctx, q.Layer.StatementTimeout, q.Layer.bboxSQL,
		a.Min[0], a.Min[1], a.Max[0], a.Max[1], west2, east2, q.Limit, positionCap(q.MaxVertices))
	return fs, truncated, pgcall.Misfit(err, q.Layer.subject())
}

// positionCap is a query's cap of positions as the layers' within and bbox
// statements take it: max, or none (the most a bigint holds).
func positionCap(max int) int64 {
	if max <= 0 {
		return math.MaxInt64
	}
	return int64(max)
}

// Contains implements Reader. Fence rows past the caps come without a
// geometry (see geofence_contains.sql): each is left out and makes the
// answer truncated, and the fences after it that fit are answered; a
// layer's answer is truncated when its query found more than q.Limit
// features.
func (s *Store) Contains(ctx context.Context, q ContainsQuery) ([]Feature, bool, error) {
	if q.Layer != nil {
		return s.layerContains(ctx, q)
	}
	var (
		out       []Feature
		truncated bool // rows past the caps; the fences after them may fit
	)
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: containsSQL, Args: []any{q.Lng, q.Lat, q.Limit, q.MaxVertices}, Timeout: s.Timeout,
		Scan: func(rows pgx.Rows) (err error) {
			out, truncated, err = scanCapped(rows, false)
			return err
		}})
	if err != nil {
		return nil, false, pgcall.Misfit(err, fenceSubject)
	}
	return out, truncated, nil
}

// scanCapped reads fence rows (id, geometry, properties, and with
// revision the revision) of a query whose rows past a cap come without a
// geometry: those are left out, and left reports that one was.
func scanCapped(rows pgx.Rows, revision bool) (out []Feature, left bool, err error) {
	out = []Feature{}
	var (
		f    Feature
		geom *string
	)
	scans := []any{&f.ID, &geom, &f.Properties}
	if revision {
		scans = append(scans, &f.Revision)
	}
	_, err = pgx.ForEachRow(rows, scans, func() error {
		if geom == nil {
			left = true
		} else {
			f.Geometry = json.RawMessage(*geom)
			out = append(out, f)
		}
		f = Feature{}
		return nil
	})
	return out, left, err
}

// layerContains is Contains on a layer: ids and properties.
func (s *Store) layerContains(ctx context.Context, q ContainsQuery) ([]Feature, bool, error) {
	out := []Feature{}
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: q.Layer.containsSQL, Args: []any{q.Lng, q.Lat, q.Limit}, Timeout: q.Layer.Layer.StatementTimeout,
		Scan: func(rows pgx.Rows) error {
			var f Feature
			_, err := pgx.ForEachRow(rows, []any{&f.ID, &f.Properties}, func() error {
				out = append(out, f)
				f = Feature{}
				return nil
			})
			return err
		}})
	if err != nil {
		if pgcall.MissingRelation(err) != "" {
			q.Layer.piecesGone()
		}
		return nil, false, pgcall.Misfit(err, q.Layer.Layer.subject())
	}
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// Fence implements Reader: problem.NotFound when there is no such fence.
func (s *Store) Fence(ctx context.Context, id int64) (Feature, error) {
	fs, err := s.fences(ctx, fenceGetSQL, id)
	if err != nil {
		return Feature{}, err
	}
	if len(fs) == 0 {
		return Feature{}, noFence(id)
	}
	return fs[0], nil
}

// Fences implements Reader. The page ends at q.Limit fences or before the
// first fence that would take it past q.MaxVertices positions, which comes
// without a geometry (see geofence_fence_list.sql): it is left out and
// the page reported cut.
func (s *Store) Fences(ctx context.Context, q FencesQuery) ([]Feature, bool, error) {
	var (
		out []Feature
		cut bool // the fence that ended the page: the walk's last row
	)
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: fenceListSQL, Args: []any{q.After, q.Limit, q.MaxVertices}, Timeout: s.Timeout,
		Scan: func(rows pgx.Rows) (err error) {
			out, cut, err = scanCapped(rows, true)
			return err
		}})
	if err != nil {
		return nil, false, err
	}
	return out, cut, nil
}

// fences runs a fence query, whose rows are (id, geometry, properties,
// revision).
func (s *Store) fences(ctx context.Context, sql string, args ...any) ([]Feature, error) {
	var out []Feature
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: sql, Args: args, Timeout: s.Timeout,
		Scan: func(rows pgx.Rows) error {
			var err error
			out, err = scanFences(rows)
			return err
		}})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Check implements Reader: one statement for the whole batch.
func (s *Store) Check(ctx context.Context, q CheckQuery) ([][]int64, error) {
	points := q.Points
	sql, timeout, subject := checkSQL, s.Timeout, fenceSubject
	if q.Layer != nil {
		sql, timeout, subject = q.Layer.checkSQL, q.Layer.Layer.StatementTimeout, q.Layer.Layer.subject()
	}
	lngs := make([]float64, len(points))
	lats := make([]float64, len(points))
	for i, p := range points {
		lngs[i], lats[i] = p.Lng, p.Lat
	}
	out := make([][]int64, len(points))
	for i := range out {
		out[i] = []int64{}
	}
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: sql, Args: []any{lngs, lats}, Timeout: timeout,
		Scan: func(rows pgx.Rows) error {
			var ord, id int64
			_, err := pgx.ForEachRow(rows, []any{&ord, &id}, func() error {
				if ord < 1 || ord > int64(len(out)) {
					return fmt.Errorf("check: ordinal %d outside 1..%d", ord, len(out))
				}
				out[ord-1] = append(out[ord-1], id)
				return nil
			})
			return err
		}})
	if err != nil {
		if pgcall.MissingRelation(err) != "" {
			q.Layer.piecesGone()
		}
		return nil, pgcall.Misfit(err, subject)
	}
	return out, nil
}

// features runs a layer's within or bbox statement: its rows left out by
// the cap of positions come without a geometry, each dropped and making
// the answer truncated (scanCapped).
func (s *Store) features(ctx context.Context, timeout time.Duration, sql string, args ...any) ([]Feature, bool, error) {
	var (
		out       []Feature
		truncated bool
	)
	_, err := s.db().Read(ctx, pgcall.Statement{SQL: sql, Args: args, Timeout: timeout,
		Scan: func(rows pgx.Rows) (err error) {
			out, truncated, err = scanCapped(rows, false)
			return err
		}})
	if err != nil {
		return nil, false, err
	}
	return out, truncated, nil
}

// scanFences reads fence rows: (id, geometry, properties, revision).
func scanFences(rows pgx.Rows) ([]Feature, error) {
	out := []Feature{}
	var f Feature
	var geom string
	_, err := pgx.ForEachRow(rows, []any{&f.ID, &geom, &f.Properties, &f.Revision}, func() error {
		f.Geometry = json.RawMessage(geom)
		out = append(out, f)
		f = Feature{}
		return nil
	})
	return out, err
}

// write runs fn in a guarded read-write transaction of at most n
// statements (lock, validate, then insert, update or delete) under
// WriteTimeout each; a write cut by it answers timeoutDetail.
func (s *Store) write(ctx context.Context, n int, timeoutDetail string, fn func(context.Context, pgx.Tx) error) error {
	db := s.db()
	db.TimeoutDetail = timeoutDetail
	err := db.Write(ctx, s.WriteTimeout, n, fn)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateCheckViolation {
		return &problem.Error{Code: problem.OutOfRange, Param: "geometry", Detail: "the fence violates a table constraint: " + pgErr.ConstraintName, Err: err}
	}
	// checkEdges refuses antipodal edges first, with a margin; should one
	// still reach PostGIS's geography, it is the fence's fault, not ours.
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateInternal && strings.HasPrefix(pgErr.Message, "Antipodal") {
		return &problem.Error{Code: problem.OutOfRange, Param: "geometry", Detail: "the fence has an edge between antipodal points: " + pgErr.Message,
			Extra: map[string]any{"reason": "Antipodal edge"}, Err: err}
	}
	return err
}

// CreateFence implements Writer: 422 with PostGIS's reason when the
// geometry is invalid.
func (s *Store) CreateFence(ctx context.Context, in FenceInput) (Feature, error) {
	var out Feature
	err := s.write(ctx, 3, writeTimeoutDetail(s.WriteTimeout), func(ctx context.Context, tx pgx.Tx) error {
		geom, err := validate(ctx, tx, in.Geometry)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, fenceInsertSQL, in.Name, in.Kind, geom)
		if err != nil {
			return err
		}
		fs, err := scanFences(rows)
		if err != nil {
			return err
		}
		if len(fs) != 1 {
			return fmt.Errorf("insert fence: %d rows returned", len(fs))
		}
		out = fs[0]
		return nil
	})
	return out, err
}

// ReplaceFence implements Writer: 404 when there is no such fence, 412
// when cond does not hold (checked first, under the row's lock), 422 when
// the geometry is invalid.
func (s *Store) ReplaceFence(ctx context.Context, id int64, in FenceInput, cond Preconditions) (Feature, error) {
	var out Feature
	err := s.write(ctx, 4, writeTimeoutDetail(s.WriteTimeout), func(ctx context.Context, tx pgx.Tx) error {
		if err := lockFence(ctx, tx, id, cond); err != nil {
			return err
		}
		geom, err := validate(ctx, tx, in.Geometry)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, fenceUpdateSQL, id, in.Name, in.Kind, geom)
		if err != nil {
			return err
		}
		fs, err := scanFences(rows)
		if err != nil {
			return err
		}
		if len(fs) == 0 {
			return noFence(id)
		}
		out = fs[0]
		return nil
	})
	return out, err
}

// DeleteFence implements Writer: 404 when there is no such fence, 412
// when cond does not hold (checked under the row's lock).
func (s *Store) DeleteFence(ctx context.Context, id int64, cond Preconditions) error {
	return s.write(ctx, 2, deleteTimeoutDetail(s.WriteTimeout), func(ctx context.Context, tx pgx.Tx) error {
		if err := lockFence(ctx, tx, id, cond); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, fenceDeleteSQL, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return noFence(id)
		}
		return nil
	})
}

// lockFence, when cond has conditions, locks fence id for the rest of the
// write's transaction and checks cond against its revision: 404 when there
// is no such fence, 412 when cond does not hold. Without conditions it
// does nothing (the write's own statement finds a missing fence).
func lockFence(ctx context.Context, tx pgx.Tx, id int64, cond Preconditions) error {
	if cond.None() {
		return nil
	}
	var revision int64
	err := tx.QueryRow(ctx, fenceLockSQL, id).Scan(&revision)
	if errors.Is(err, pgx.ErrNoRows) {
		return noFence(id)
	}
	if err != nil {
		return err
	}
	if header := cond.Failed(fenceETag(revision)); header != "" {
		return preconditionFailed(id, header, true)
	}
	return nil
}

func noFence(id int64) error {
	return &problem.Error{Code: problem.NotFound, Param: "id", Detail: fmt.Sprintf("no fence %d", id), Err: errNoFence}
}

// validate encodes g as WKB and asks PostGIS whether it is valid; an
// invalid geometry is a 422 carrying PostGIS's reason and location.
func validate(ctx context.Context, tx pgx.Tx, g orb.MultiPolygon) ([]byte, error) {
	if err := checkEdges(g); err != nil { // ParseFence has; a FenceInput may come from elsewhere
		return nil, err
	}
	geom, err := wkb.Marshal(g)
	if err != nil {
		return nil, problem.Range("geometry", "the geometry cannot be encoded: %v", err)
	}
	var (
		valid    bool
		reason   string
		lng, lat *float64
	)
	if err := tx.QueryRow(ctx, fenceValidateSQL, geom).Scan(&valid, &reason, &lng, &lat); err != nil {
		return nil, err
	}
	if valid {
		return geom, nil
	}
	e := problem.Range("geometry", "invalid polygon: %s", reason)
	e.Extra = map[string]any{"reason": reason}
	if lng != nil && lat != nil {
		e.Detail += fmt.Sprintf(" at [%g, %g]", *lng, *lat)
		e.Extra["location"] = []float64{*lng, *lat}
	}
	return nil, e
}

// sqlstateCheckViolation is the SQLSTATE of a fence that breaks a table
// constraint: a 422, not a server error.
const sqlstateCheckViolation = "23514"

// sqlstateInternal is the SQLSTATE of PostGIS's own errors (lwerror).
const sqlstateInternal = "XX000"
