package density_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
)

// insertPoints adds n points spread over a 0.2° square at lon/lat.
func insertPoints(ctx context.Context, t *testing.T, owner *pgxpool.Pool, rel density.Relation, lon, lat float64, n int) {
	t.Helper()
	_, err := owner.Exec(ctx, "INSERT INTO "+rel.Table.Sanitize()+` (geom)
		SELECT ST_SetSRID(ST_MakePoint($1::float8 + 0.2 * (k % 37) / 37, $2::float8 + 0.2 * (k % 41) / 41), 4326)
		FROM generate_series(1, $3::int) AS k`, lon, lat, n)
	if err != nil {
		t.Fatal(err)
	}
}

// pacific is a 1°×1° box in the open Pacific.
var pacific = orb.Bound{Min: orb.Point{-150, -20}, Max: orb.Point{-149, -19}}

// Rows inserted into an empty area after a build are in the model after the
// next background refresh; until then the model in use says the area is
// empty.
func TestRefreshPicksUpNewRows(t *testing.T) {
	rel, owner := scratchTable(t, "density_fresh", "Point", density.Point)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model() != nil || r.Status().Ready {
		t.Fatal("a refresher that has not built reports a model")
	}
	// An empty table builds a model that estimates zero everywhere.
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	world := orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}
	if s, e := r.Status(), r.Model().BBox(world); !s.Ready || s.Rows != 0 || e.Features != 0 {
		t.Fatalf("empty table: status %+v, world estimate %+v", s, e)
	}
	insertPoints(ctx, t, owner, rel, 13.3, 52.4, 1000) // Berlin
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	first := r.Model()
	if got := first.BBox(pacific).Features; got != 0 {
		t.Fatalf("empty Pacific box estimates %.2f features", got)
	}
	if got := first.BBox(orb.Bound{Min: orb.Point{13, 52}, Max: orb.Point{14, 53}}).Features; math.Abs(got-1000) > 1e-6 {
		t.Fatalf("Berlin box estimates %.2f features, want 1000", got)
	}

	insertPoints(ctx, t, owner, rel, -149.8, -19.8, 500)
	if got := first.BBox(pacific).Features; got != 0 {
		t.Fatalf("the built model changed: %.2f features", got)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for {
		if m := r.Model(); m != first && math.Abs(m.BBox(pacific).Features-500) < 1e-6 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no refresh picked up the new rows: status %+v", r.Status())
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := r.Status()
	if !s.Ready || s.Rows != 1500 || s.LastError != "" || s.Failures != 0 || s.Age < 0 || s.Age > 10*time.Second {
		t.Errorf("status after refresh: %+v", s)
	}
}

// A build that fails keeps the model in use and reports the error; the next
// success clears it.
func TestRefresherKeepsLastModelOnFailure(t *testing.T) {
	rel, owner := scratchTable(t, "density_fail", "Point", density.Point)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insertPoints(ctx, t, owner, rel, 2.3, 48.8, 100)
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	good := r.Model()
	if s := r.Status(); s.Stale {
		t.Errorf("status after a build: %+v, want not stale", s)
	}
	table := rel.Table.Sanitize()
	if _, err := owner.Exec(ctx, "REVOKE SELECT ON "+table+" FROM geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	err = r.Refresh(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
		t.Fatalf("refresh without SELECT: %v, want permission denied", err)
	}
	if r.Model() != good {
		t.Fatal("a failed refresh replaced the model")
	}
	s := r.Status()
	if !s.Ready || s.Failures != 1 || !strings.Contains(s.LastError, "permission denied") || s.Rows != 100 || !s.Stale {
		t.Errorf("status after a failure: %+v, want the last model, stale", s)
	}
	if _, err := owner.Exec(ctx, "GRANT SELECT ON "+table+" TO geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Status(); r.Model() == good || s.Failures != 0 || s.LastError != "" || s.Stale {
		t.Errorf("status after recovery: %+v", s)
	}
}

// A model of its own that no build has replaced or found current for
// StaleIntervals refresh intervals is stale, failed builds or not (a build
// may be stuck waiting); a predecessor's model, in use while the relation's
// own is built, is not (its readiness says so otherwise).
func TestRefresherStaleAfterIntervals(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	opts := density.Options{Interval: time.Minute, Now: clock}
	r, err := density.NewRefresher(testenv.ReadPool(t), demoRelations[4].rel, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(density.StaleIntervals * time.Minute))
	if s := r.Status(); !s.Ready || s.Stale || s.Age != density.StaleIntervals*time.Minute {
		t.Fatalf("status %d intervals after a build: %+v, want not stale yet", density.StaleIntervals, s)
	}
	now.Add(int64(time.Second))
	if s := r.Status(); !s.Ready || s.Failures != 0 || !s.Stale {
		t.Fatalf("status past %d intervals without a build: %+v, want stale", density.StaleIntervals, s)
	}

	heir, err := density.NewRefresher(testenv.ReadPool(t), density.Relation{Table: pgx.Identifier{"geotoll", "no_such_table"},
		GeometryColumn: "geom", SRID: 4326, Kind: density.Polygon}, opts)
	if err != nil {
		t.Fatal(err)
	}
	heir.Inherit(r)
	if err := heir.Refresh(ctx); err == nil {
		t.Fatal("a build of a missing table succeeded")
	}
	if s := heir.Status(); !s.Ready || !s.Inherited || s.Failures != 1 || s.Stale {
		t.Errorf("an inherited model whose own fails to build: %+v, want inherited, not stale", s)
	}
}

// Until a build succeeds there is no model, and the status says why.
func TestRefresherNotReadyBeforeFirstBuild(t *testing.T) {
	rel := density.Relation{Table: pgx.Identifier{"geotoll", "no_such_table"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("a build of a missing table succeeded")
	}
	s := r.Status()
	if r.Model() != nil || s.Ready || s.Failures != 1 || s.LastError == "" || s.Relation != `"geotoll"."no_such_table"."geom"` || s.Cells != 0 {
		t.Errorf("model %v, status %+v", r.Model(), s)
	}
}

// The build's statement_timeout is the configured one, not the role's.
func TestBuildStatementTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := density.Build(ctx, testenv.ReadPool(t), demoRelations[0].rel, density.Options{StatementTimeout: time.Millisecond})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" { // query_canceled
		t.Fatalf("build under a 1ms statement_timeout: %v, want a statement timeout", err)
	}
}

// statements records the SQL a connection sends.
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A build is one READ ONLY transaction: its settings, the planner's row
// estimate, ONE aggregate query, and a rollback.
func TestBuildIsOneReadOnlyAggregate(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	trace := &statements{}
	cfg.ConnConfig.Tracer = trace
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := density.Build(ctx, pool, demoRelations[2].rel, density.Options{StatementTimeout: 7 * time.Second}); err != nil {
		t.Fatal(err)
	}
	trace.mu.Lock()
	defer trace.mu.Unlock()
	if len(trace.sql) != 5 {
		t.Fatalf("%d statements, want 5: %q", len(trace.sql), trace.sql)
	}
	checks := []struct{ want, why string }{
		{"begin", "BEGIN"}, {"read only", "READ ONLY"},
	}
	for _, c := range checks {
		if !strings.Contains(strings.ToLower(trace.sql[0]), c.want) {
			t.Errorf("first statement %q is not %s", trace.sql[0], c.why)
		}
	}
	if !strings.Contains(trace.sql[1], "set_config('statement_timeout'") || !strings.Contains(trace.sql[1], "set_config('jit', 'off'") {
		t.Errorf("second statement %q sets no statement_timeout or jit", trace.sql[1])
	}
	if !strings.Contains(trace.sql[2], "EXPLAIN (FORMAT JSON) SELECT 1 FROM") || !strings.Contains(trace.sql[3], "GROUP BY") ||
		!strings.Contains(trace.sql[3], `FROM "geotoll"."districts" AS t`) || strings.ToLower(trace.sql[4]) != "rollback" {
		t.Errorf("statements %q: want EXPLAIN, the aggregate, rollback", trace.sql[2:])
	}
}

// Readers never see a torn model while refreshes swap new ones in.
func TestConcurrentReadersDuringRefresh(t *testing.T) {
	r, err := density.NewRefresher(testenv.ReadPool(t), demoRelations[4].rel, density.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want := r.Model().BBox(orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}).Features
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m := r.Model()
				if got := m.BBox(orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}).Features; got != want {
					errs <- "world estimate changed"
					return
				}
				_ = m.Circle(orb.Point{13.4, 52.5}, 5000)
			}
		}()
	}
	for i := 0; i < 5; i++ {
		if err := r.Refresh(ctx); err != nil {
			t.Error(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A Refresher's log hears of a failed build once, however many follow it,
// and of the build that ends the failures: an operator learns that prices
// come from an old model without a line every retry.
func TestRefresherLogsFailuresOnce(t *testing.T) {
	rel, owner := scratchTable(t, "density_log", "Point", density.Point)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insertPoints(ctx, t, owner, rel, 2.3, 48.8, 100)
	var logged bytes.Buffer
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{Interval: 20 * time.Millisecond,
		RetryInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(run) }()
	until := func(what string, ok func(density.Status) bool) {
		t.Helper()
		for !ok(r.Status()) {
			if ctx.Err() != nil {
				stop()
				t.Fatalf("waiting for %s: %+v", what, r.Status())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	until("a model", func(s density.Status) bool { return s.Ready })
	table := rel.Table.Sanitize()
	if _, err := owner.Exec(ctx, "REVOKE SELECT ON "+table+" FROM geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	until("three failed builds", func(s density.Status) bool { return s.Failures >= 3 })
	if _, err := owner.Exec(ctx, "GRANT SELECT ON "+table+" TO geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	until("a build again", func(s density.Status) bool { return s.Failures == 0 })
	stop()
	<-done
	out := logged.String()
	if n := strings.Count(out, "price model build failed"); n != 1 || !strings.Contains(out, "permission denied") ||
		!strings.Contains(out, "from the last model built") {
		t.Errorf("%d warnings of failed builds in:\n%s\nwant 1, naming the error and the model in use", n, out)
	}
	if n := strings.Count(out, "price model built again"); n != 1 || !strings.Contains(out, "failed_builds=") {
		t.Errorf("%d notes of the build ending the failures in:\n%s\nwant 1", n, out)
	}
}

// A nudge (the relation written) starts a build at once, not an Interval
// after the last; nudges right after a build wait for NudgeGap (here
// RetryInterval, which is less) since it, so that a run of writes costs
// one build per gap at most.
func TestRefresherNudgeBuildsSoon(t *testing.T) {
	rel, owner := scratchTable(t, "density_nudge", "Point", density.Point)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := density.NewRefresher(testenv.ReadPool(t), rel, density.Options{Interval: time.Hour, RetryInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(runCtx) }()
	defer func() { stop(); <-done }()
	built := func(want float64) time.Time {
		t.Helper()
		for {
			if m := r.Model(); m != nil && math.Abs(m.BBox(pacific).Features-want) < 1e-6 {
				return time.Now()
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no build found %v features in the Pacific: status %+v", want, r.Status())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	built(0)
	first := r.Status().LastAttempt
	insertPoints(ctx, t, owner, rel, -149.8, -19.8, 500)
	r.Nudge()
	built(500)
	second := r.Status().LastAttempt
	insertPoints(ctx, t, owner, rel, -149.8, -19.8, 100)
	r.Nudge()
	r.Nudge() // one pending at most
	built(600)
	third := r.Status().LastAttempt
	if gap := third.Sub(second); gap < 300*time.Millisecond {
		t.Errorf("builds %v apart after a nudge right after one, want RetryInterval (300ms) at least", gap)
	}
	if !first.Before(second) {
		t.Errorf("build times %v, %v", first, second)
	}
}
