package pgcall_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// Every statement of a Read runs read-only, with jit off and under its own
// statement_timeout, in one transaction; none of it leaks into the pool.
// The owner pool is used: its defaults are read-write with jit on.
func TestReadSettings(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	db := &pgcall.DB{Pool: pool}
	const q = `SELECT current_setting('transaction_read_only'), current_setting('jit'),
		current_setting('statement_timeout'), txid_current_if_assigned() IS NULL, pg_backend_pid()`
	type row struct {
		ro, jit, timeout string
		noXID            bool
		pid              int
	}
	var a, b row
	timing, err := db.Read(t.Context(),
		pgcall.Statement{SQL: q, Timeout: 1500 * time.Millisecond, Scan: pgcall.One(&a.ro, &a.jit, &a.timeout, &a.noXID, &a.pid)},
		pgcall.Statement{SQL: q, Timeout: 250 * time.Millisecond, Scan: pgcall.One(&b.ro, &b.jit, &b.timeout, &b.noXID, &b.pid)},
	)
	if err != nil {
		t.Fatal(err)
	}
	if a != (row{"on", "off", "1500ms", true, a.pid}) || b != (row{"on", "off", "250ms", true, a.pid}) {
		t.Errorf("settings %+v then %+v; want read-only, jit off, each statement's own timeout, one connection", a, b)
	}
	if len(timing.Statements) != 2 || timing.DB <= 0 || timing.Statements[0]+timing.Statements[1] > timing.DB {
		t.Errorf("timing %+v: want two statement times that fit in DB", timing)
	}
	var jit, timeout string
	if err := pool.QueryRow(t.Context(), `SELECT current_setting('jit'), current_setting('statement_timeout')`).Scan(&jit, &timeout); err != nil {
		t.Fatal(err)
	}
	if jit == "off" || timeout == "250ms" {
		t.Errorf("after the read, jit = %q and statement_timeout = %q: settings leaked into the pool", jit, timeout)
	}
}

func TestReadStatementTimeout(t *testing.T) {
	t.Parallel()
	obs := &observer{}
	db := &pgcall.DB{Pool: readPool(t, 1), RetryAfter: 7, TimeoutDetail: "too slow", Calls: obs}
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT pg_sleep(3)`, Timeout: 100 * time.Millisecond})
	p := problem.From(err)
	var pgErr *pgconn.PgError
	if p.Code != problem.Timeout || p.RetryAfter != 7 || p.Detail != "too slow" || !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("Read past its timeout: %v; want a timeout problem (Retry-After 7, \"too slow\") caused by SQLSTATE 57014", err)
	}
	if n, _ := obs.get(pgcall.StatementTimeout); n != 1 {
		t.Errorf("%d statement timeouts observed, want 1", n)
	}
	// The one connection is usable again.
	var one int
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second, Scan: pgcall.One(&one)}); err != nil || one != 1 {
		t.Errorf("Read after a timeout: %d, %v", one, err)
	}
}

// A statement cut by its statement_timeout leaves its connection's
// transaction failed, not the connection: it is rolled back and the
// connection kept. Closed instead, a flood of requests cut at their time
// made the pool open a backend (and warm PostGIS in it) for each, and
// calls that waited for those were taken for an outage. (A call whose
// caller left is cancelled by a cancel request, and keeps its connection
// once the server acknowledged that request: TestHungUpCallKeepsItsConnection.)
func TestCutStatementKeepsItsConnection(t *testing.T) {
	t.Parallel()
	keepsItsConnection(t, "cut statements", 3, func(db *pgcall.DB, i int) {
		_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT pg_sleep(5)`, Timeout: 50 * time.Millisecond})
		if problem.From(err).Code != problem.Timeout {
			t.Fatalf("call %d: %v, want a statement timeout", i, err)
		}
	})
}

// A statement whose caller went away (a map panned off its tile) is
// cancelled, and its connection then serves the next call: the server
// acknowledges the cancel request as it signals the backend, and the
// backend's answer to the cancel can come first. Closing the connection
// whenever the answer won that race opened a backend, and loaded PostGIS
// in it, for most tiles a map abandoned.
func TestHungUpCallKeepsItsConnection(t *testing.T) {
	t.Parallel()
	keepsItsConnection(t, "abandoned statements", 5, func(db *pgcall.DB, i int) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT pg_sleep(5)`, Timeout: 10 * time.Second})
		if p := problem.From(err); p.Detail != "request cancelled" {
			t.Fatalf("call %d whose caller left: %v, want \"request cancelled\"", i, err)
		}
		pgcall.WaitStopped(err)
	})
}

// keepsItsConnection makes n calls (call) through a pool of one
// connection and checks that the connection served them all and the next
// one: the same backend answers after them, and the pool opened no other.
func keepsItsConnection(t *testing.T, what string, n int, call func(db *pgcall.DB, i int)) {
	t.Helper()
	pool := readPool(t, 1)
	db := &pgcall.DB{Pool: pool, RetryAfter: 2}
	first := backendPID(t, db)
	for i := range n {
		call(db, i)
	}
	if now := backendPID(t, db); now != first {
		t.Errorf("backend %d after the %s, want %d: their connection was closed", now, what, first)
	}
	if n := pool.Stat().NewConnsCount(); n != 1 {
		t.Errorf("the pool opened %d connections, want 1", n)
	}
}

// backendPID is the process id of the backend that answers db's next call.
func backendPID(t *testing.T, db *pgcall.DB) int32 {
	t.Helper()
	var p int32
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT pg_backend_pid()`, Timeout: time.Second, Scan: pgcall.One(&p)}); err != nil {
		t.Fatal(err)
	}
	return p
}

// PostGIS reports a GEOS call that statement_timeout interrupts as an
// exception GEOS threw (internal_error, XX000), not as a cancel (57014):
// ST_IsValidDetail of a large polygon stopped at its time limit is a
// timeout all the same, observed as one, while a GEOS failure well within
// the limit stays one of the data's (TestReadMismatch).
func TestReadGEOSStoppedAtItsTimeLimitIsATimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hugePolygon(t, 200_000)
	obs := &observer{}
	db := &pgcall.DB{Pool: readPool(t, 1), RetryAfter: 7, TimeoutDetail: "too slow", Calls: obs}
	var valid bool
	// Unbounded, the check takes a few hundred ms; the first few ms of it
	// read the row, so a 60 ms limit stops GEOS itself.
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: f.sql(`SELECT (ST_IsValidDetail(g)).valid FROM {s}.huge`),
		Timeout: 60 * time.Millisecond, Scan: pgcall.One(&valid)})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("ST_IsValidDetail past its time limit: %v (valid %t); want an error of the database", err, valid)
	}
	if p := problem.From(err); p.Code != problem.Timeout || p.RetryAfter != 7 || p.Detail != "too slow" {
		t.Errorf("ST_IsValidDetail stopped at its time limit (SQLSTATE %s, %q): %v (code %s); want a timeout",
			pgErr.Code, pgErr.Message, p, p.Code)
	}
	if n, _ := obs.get(pgcall.StatementTimeout); n != 1 {
		t.Errorf("%d statement timeouts observed, want 1", n)
	}
	if n, _ := obs.get(pgcall.Failed); n != 0 {
		t.Errorf("%d failures observed, want 0", n)
	}
}

// A Scan that panics fails its call, not the process (it runs on the
// connection's goroutine, where nothing else would recover it), and its
// connection, left holding a result half read, is closed: the pool's one
// connection slot serves the next call.
func TestScanThatPanicsFailsItsCall(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 1)}
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT g FROM generate_series(1, 100000) AS g`, Timeout: 5 * time.Second,
		Scan: func(rows pgx.Rows) error {
			rows.Next()
			panic("a scanner's bug")
		}})
	if err == nil || !strings.Contains(err.Error(), "a scanner's bug") {
		t.Fatalf("Read whose Scan panicked: %v; want an error naming the panic", err)
	}
	if p := problem.From(err); p.Code == problem.Unavailable {
		t.Errorf("Read whose Scan panicked: %v; the program's fault, not the database being unavailable", p)
	}
	var one int
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: 5 * time.Second, Scan: pgcall.One(&one)}); err != nil || one != 1 {
		t.Errorf("Read after a Scan panicked: %d, %v", one, err)
	}
}

// A call answers by its context's deadline, however long its statements'
// own timeouts: they are shortened to fit.
func TestReadAnswersByItsDeadline(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 1)}
	ctx, cancel := context.WithTimeout(t.Context(), 800*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT pg_sleep(5)`, Timeout: 10 * time.Second})
	// The statement is cut some 300 ms before the deadline; a busy machine
	// may run this goroutine late, which is no fault of Read's. Waiting
	// for the statement (5 s) would be.
	if late := time.Since(deadline); late > 250*time.Millisecond {
		t.Errorf("answered %v after the deadline", late)
	}
	var pgErr *pgconn.PgError
	if p := problem.From(err); p.Code != problem.Timeout || !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Errorf("Read cut by its deadline: %v; want a timeout that PostgreSQL itself raised", err)
	}
}

// A caller that goes away cancels its statement in PostgreSQL; the answer
// nobody reads says so, and is no outage.
func TestReadCancelledCaller(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	obs := &observer{}
	pool := readPool(t, 1)
	db := &pgcall.DB{Pool: pool, Calls: obs}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := db.Read(ctx, pgcall.Statement{SQL: f.sql(`SELECT pg_sleep(10) /* {s} */`), Timeout: 20 * time.Second})
	if p := problem.From(err); p.Code != problem.Unavailable || p.Detail != "request cancelled" {
		t.Fatalf("Read whose caller left: %v, want \"request cancelled\"", err)
	}
	pgcall.WaitStopped(err)
	eventually(t, 5*time.Second, "the sleep cancelled in PostgreSQL", func() bool { return f.running(t) == 0 })
	eventually(t, 5*time.Second, "the connection back in the pool", func() bool { return pool.Stat().AcquiredConns() == 0 })
	if n, _ := obs.get(pgcall.Cancelled); n != 1 {
		t.Errorf("%d cancelled calls observed, want 1", n)
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 2)}
	var n int
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1 WHERE false`, Timeout: time.Second, Scan: pgcall.One(&n)})
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("One over no rows: %v, want pgx.ErrNoRows", err)
	}
	_, err = db.Read(t.Context(), pgcall.Statement{SQL: `SELEC 1`, Timeout: time.Second})
	if p := problem.From(err); p.Code != problem.Internal {
		t.Errorf("a broken statement: %v, want internal", err)
	}
	_, err = db.Read(t.Context(), pgcall.Statement{SQL: `DELETE FROM geotoll.api_keys`, Timeout: time.Second})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Errorf("a write in a guarded read: %v, want SQLSTATE 25006", err)
	}
	if _, err := db.Read(t.Context()); problem.From(err).Code != problem.Internal {
		t.Errorf("a read of no statements: %v, want internal", err)
	}
}

// A statement that does not fit the database — a table, column or right
// it names is missing — is a 503 with the database's reason, never a 500;
// Misfit names what the statement was for.
func TestReadMismatch(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 2), RetryAfter: 3}
	for _, tc := range []struct{ sql, reason string }{
		{`SELECT 1 FROM geotoll.nowhere`, `relation "geotoll.nowhere" does not exist`},
		{`SELECT nonsense FROM geotoll.places`, `column "nonsense" does not exist`},
		{`SELECT 1 FROM nowhere_schema.t`, `relation "nowhere_schema.t" does not exist`},
		{`SELECT count(*) FROM pg_catalog.pg_authid`, `permission denied for table pg_authid`},
		{`SELECT ST_Transform(id, 3857) FROM geotoll.places`, `function st_transform(bigint, integer) does not exist`},
		// A row of a column that declares no SRID, in none or another than
		// the layer's, and a point outside its projection's domain: PostGIS
		// says so as internal_error (XX000), which was a 500.
		{`SELECT ST_Transform(ST_MakePoint(1, 1), 3857)`, `ST_Transform: Input geometry has unknown (0) SRID`},
		{`SELECT ST_Intersects(ST_MakePoint(1, 1), ST_SetSRID(ST_MakePoint(1, 1), 3857))`, `ST_Intersects: Operation on mixed SRID geometries (Point, 0) != (Point, 3857)`},
		{`SELECT ST_Transform(ST_SetSRID(ST_MakePoint(1e15, 1e15), 3035), 3857)`, `transform: Point outside of projection domain (2050)`},
		// A curve, which a tile's clip, a GeoJSON answer or a geography
		// does not take (the last is invalid_parameter_value, 22023).
		{`SELECT ST_AsMVTGeom(ST_GeomFromText('CURVEPOLYGON(CIRCULARSTRING(0 0, 4 0, 4 4, 0 4, 0 0))', 3857), ST_MakeEnvelope(-10, -10, 10, 10)::box2d)`, `lwgeom_get_basic_type: Invalid type (10)`},
		{`SELECT ST_AsGeoJSON(ST_GeomFromText('CURVEPOLYGON(CIRCULARSTRING(0 0, 4 0, 4 4, 0 4, 0 0))', 4326))`, `lwgeom_to_geojson: 'CurvePolygon' geometry type not supported`},
		{`SELECT ST_GeomFromText('CURVEPOLYGON(CIRCULARSTRING(0 0, 4 0, 4 4, 0 4, 0 0))', 4326)::geography`, `Geography type does not support CurvePolygon`},
	} {
		_, err := db.Read(t.Context(), pgcall.Statement{SQL: tc.sql, Timeout: time.Second})
		p := problem.From(err)
		if p.Code != problem.Unavailable || p.RetryAfter != 3 || p.Detail != "the database does not match the configuration: "+tc.reason {
			t.Errorf("%s: %v (code %s, Retry-After %d), want a 503 saying %q", tc.sql, err, p.Code, p.RetryAfter, tc.reason)
		}
		p = problem.From(pgcall.Misfit(err, `layer "x"`))
		if p.Code != problem.Unavailable || p.RetryAfter != 3 || p.Detail != `layer "x" does not match the database: `+tc.reason {
			t.Errorf("%s: Misfit gave %v", tc.sql, p)
		}
	}
	// GEOS failing on a row (or stopped by the time limit, which it
	// reports as an exception it threw) is the data's or the time's: a 503.
	_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT ST_Intersection('POLYGON((0 0, 10 10, 10 0, 0 10, 0 0))'::geometry, 'POLYGON((0 0, 1 0, 1 1, 0 1, 0 0))'::geometry)`, Timeout: time.Second})
	if p := problem.From(err); p.Code != problem.Unavailable || p.RetryAfter != 3 || !strings.Contains(p.Detail, "GEOS") {
		t.Errorf("GEOS's TopologyException: %v (code %s), want a 503 naming GEOS", err, p.Code)
	}
	// Any other internal_error of PostGIS is the statement's fault: a 500.
	_, err = db.Read(t.Context(), pgcall.Statement{SQL: `SELECT ST_GeomFromText('nonsense')`, Timeout: time.Second})
	if p := problem.From(err); p.Code != problem.Internal {
		t.Errorf("a geometry PostGIS cannot parse: %v (code %s), want internal", err, p.Code)
	}
	other := problem.Malformed("z", "bad")
	if got := pgcall.Misfit(other, "layer"); got != error(other) {
		t.Errorf("Misfit changed an error that is not a mismatch: %v", got)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: testenv.Pool(t)}
	var timeout, jit, ro string
	err := db.Write(t.Context(), 700*time.Millisecond, 1, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('jit'), current_setting('transaction_read_only')`).Scan(&timeout, &jit, &ro)
	})
	if err != nil || timeout != "700ms" || jit != "off" || ro != "off" {
		t.Errorf("Write settings %q %q read-only %q (%v), want 700ms, off, off", timeout, jit, ro, err)
	}
	notFound := problem.Missing("id", "no fence 7")
	if err := db.Write(t.Context(), time.Second, 1, func(context.Context, pgx.Tx) error { return notFound }); !errors.Is(err, notFound) {
		t.Errorf("a problem from the transaction: %v, want it unchanged", err)
	}
	err = db.Write(t.Context(), 100*time.Millisecond, 1, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(3)`)
		return err
	})
	if p := problem.From(err); p.Code != problem.Timeout {
		t.Errorf("Write past its timeout: %v, want a timeout", err)
	}
}

// A write that waits for a row another transaction holds past its
// lock_timeout is a 503 with Retry-After (the same request succeeds once
// the other ends), never a 500.
func TestWriteLockedRow(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, "pgcall_lock", func(s string) []string {
		return []string{"CREATE TABLE " + s + ".locked (id int PRIMARY KEY)", "INSERT INTO " + s + ".locked VALUES (1)"}
	})
	holder, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := holder.Exec(t.Context(), "UPDATE "+schema+".locked SET id = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	db := &pgcall.DB{Pool: pool, RetryAfter: 1}
	err = db.Write(t.Context(), 5*time.Second, 1, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+schema+".locked SET id = 1 WHERE id = 1")
		return err
	})
	if p := problem.From(err); p.Code != problem.Unavailable || p.RetryAfter <= 0 || !strings.Contains(p.Detail, "another write") {
		t.Errorf("a write past its lock_timeout: %v (%+v), want a 503 with Retry-After", err, p)
	}
}

// A pool whose every connection is in use answers, after AcquireTimeout,
// a 503 that says the database is busy — it is alive and working, perhaps
// for statements that ignore cancellation; so does a share whose every
// slot is taken; one that cannot connect says the database is
// unavailable. A busy 503 marks its request's meter busy, so that it is
// charged its estimate (asked again at once, it must not be free: it was
// charged the base before); an outage leaves the meter as it was.
func TestReadWithoutConnection(t *testing.T) {
	t.Parallel()
	busy, _ := testenv.BusyPool(t) // its only connection is held
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	full := pgcall.NewShare(1)
	for _, tc := range []struct {
		name    string
		pool    *pgxpool.Pool
		share   *pgcall.Share
		detail  string
		outcome string
		busy    bool
	}{
		{"busy", busy, nil, "every database connection is busy; try again later", pgcall.Busy, true},
		{"share", testenv.ReadPool(t), full, "the database connections shared by callers without an API key are all busy; try again later, or use an API key", pgcall.Busy, true},
		{"down", down, nil, "the database is unavailable", pgcall.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &observer{}
			db := &pgcall.DB{Pool: tc.pool, AcquireTimeout: 200 * time.Millisecond, RetryAfter: 2, Calls: obs}
			ctx, meter := pgcall.WithMeter(t.Context())
			if tc.share != nil {
				var b *pgcall.Budget
				ctx, b = pgcall.WithBudget(ctx)
				b.Join(tc.share)
				release := holdShare(t, db, tc.share)
				defer release()
			}
			_, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second})
			if p := problem.From(err); p.Code != problem.Unavailable || p.RetryAfter != 2 || p.Detail != tc.detail {
				t.Errorf("Read: %q %q Retry-After %d (%v); want %q, %q, 2", p.Code, p.Detail, p.RetryAfter, err, problem.Unavailable, tc.detail)
			}
			if n, _ := obs.get(tc.outcome); n != 1 {
				t.Errorf("%d calls observed %s, want 1 (a busy pool is no outage)", n, tc.outcome)
			}
			if meter.Busy() != tc.busy || meter.Used() || meter.DB() != 0 {
				t.Errorf("the request's meter: busy %v, used %v, %s of database time; want busy %v, unused, none", meter.Busy(), meter.Used(), meter.DB(), tc.busy)
			}
		})
	}
}

// holdShare takes s's every slot with calls of db that wait until
// release is called.
func holdShare(t *testing.T, db *pgcall.DB, s *pgcall.Share) (release func()) {
	t.Helper()
	stop := make(chan struct{})
	var held sync.WaitGroup
	for range s.Size() {
		ctx, b := pgcall.WithBudget(t.Context())
		b.Join(s)
		held.Go(func() {
			_, _ = db.Read(ctx, pgcall.Statement{SQL: `SELECT 1`, Timeout: 5 * time.Second, Scan: func(pgx.Rows) error {
				<-stop
				return nil
			}})
		})
	}
	for s.InUse() < s.Size() {
		time.Sleep(time.Millisecond)
	}
	return func() { close(stop); held.Wait() }
}

// A request's Budget caps its statements: one that paid for 300 ms is cut
// by PostgreSQL near 300 ms, not at its layer's 10 s; its settings show the
// shortened timeout.
func TestReadUnderBudget(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 1)}
	ctx, budget := pgcall.WithBudget(t.Context())
	var timeout string
	if _, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT current_setting('statement_timeout')`, Timeout: 10 * time.Second, Scan: pgcall.One(&timeout)}); err != nil || timeout != "10s" {
		t.Fatalf("unset budget: %q %v, want the statement's own 10s", timeout, err)
	}
	budget.Set(300 * time.Millisecond)
	if _, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT current_setting('statement_timeout')`, Timeout: 10 * time.Second, Scan: pgcall.One(&timeout)}); err != nil {
		t.Fatal(err)
	}
	if ms, err := time.ParseDuration(timeout); err != nil || ms > 300*time.Millisecond || ms < 200*time.Millisecond {
		t.Fatalf("statement_timeout under a 300 ms budget: %q", timeout)
	}
	start := time.Now()
	_, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT pg_sleep(5)`, Timeout: 10 * time.Second})
	var pgErr *pgconn.PgError
	if p := problem.From(err); p.Code != problem.Timeout || !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("a read past its budget: %v; want PostgreSQL's own statement timeout", err)
	}
	if took := time.Since(start); took > 5*300*time.Millisecond {
		t.Fatalf("cut after %v with a 300 ms budget", took)
	}
}

// A read's meter counts the database's own time, as PostgreSQL clocks it
// from BEGIN to the end of the last statement: at least what the statement
// slept, at most the time from sending the batch to its last answer (the
// round trip and both sides' scheduling stay out).
func TestReadMetersTheDatabasesOwnTime(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: testenv.Pool(t)}
	ctx, meter := pgcall.WithMeter(t.Context())
	timing, err := db.Read(ctx, pgcall.Statement{SQL: `SELECT pg_sleep(0.03)`, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if timing.Server < 30*time.Millisecond || timing.Server > timing.DB {
		t.Errorf("timing %+v: want the server's time between the 30 ms slept and the call's %v", timing, timing.DB)
	}
	if meter.DB() != timing.Server {
		t.Errorf("metered %v, want the server's %v", meter.DB(), timing.Server)
	}
}

// A connection's first use of a statement prepares it, a round trip
// before the batch's transaction begins, in which PostgreSQL waits for
// the statement's tables as it would in the transaction: a table under an
// ACCESS EXCLUSIVE lock keeps the prepare waiting. That wait is the
// database's time spent on the call, and the Meter charges it.
func TestReadMetersAPreparesWaitForALock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.t (n int)`)
	f.exec(t, `GRANT SELECT ON {s}.t TO geotoll_reader`)
	db := &pgcall.DB{Pool: readPool(t, 1)}
	warm(t, db) // the connection's opening is not part of what is timed
	const held = 300 * time.Millisecond
	f.lockFor(t, "t", held)
	ctx, meter := pgcall.WithMeter(t.Context())
	var n int
	timing, err := db.Read(ctx, pgcall.Statement{SQL: f.sql(`SELECT count(*) FROM {s}.t`), Timeout: 5 * time.Second, Scan: pgcall.One(&n)})
	if err != nil {
		t.Fatal(err)
	}
	// The read began a little after the lock: it waited most of held.
	waited := held * 2 / 3
	if timing.DB < waited {
		t.Fatalf("the read took %v, less than %v of the %v the lock was held: it did not wait", timing.DB, waited, held)
	}
	if timing.Server < waited || timing.Server > timing.DB {
		t.Errorf("timing %+v: want the server's time to hold the %v (at least) the prepare waited, within the call's %v", timing, waited, timing.DB)
	}
	if meter.DB() != timing.Server {
		t.Errorf("metered %v, want the server's %v", meter.DB(), timing.Server)
	}
}

// A GEOS failure on the data, well within the statement's own limit, stays
// the data's (503 unavailable, outcome error) however long the prepare
// before the batch's transaction waited for a lock: no statement_timeout
// runs during it. Counted from before the prepare, it was taken for a
// statement stopped at its limit.
func TestReadGEOSFailureAfterAPrepareWaitIsNotATimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.bow AS SELECT 'POLYGON((0 0, 10 10, 10 0, 0 10, 0 0))'::geometry AS g`)
	f.exec(t, `GRANT SELECT ON {s}.bow TO geotoll_reader`)
	obs := &observer{}
	db := &pgcall.DB{Pool: readPool(t, 1), RetryAfter: 3, Calls: obs}
	warm(t, db)
	f.lockFor(t, "bow", 400*time.Millisecond)
	timing, err := db.Read(t.Context(), pgcall.Statement{
		SQL: f.sql(`SELECT ST_Intersection(g, 'POLYGON((0 0, 1 0, 1 1, 0 1, 0 0))'::geometry) FROM {s}.bow`), Timeout: 300 * time.Millisecond})
	if timing.DB < 300*time.Millisecond {
		t.Fatalf("the read took %v: it did not wait for the lock past the statement's limit", timing.DB)
	}
	if p := problem.From(err); p.Code != problem.Unavailable || !strings.Contains(p.Detail, "GEOS") {
		t.Errorf("a TopologyException on the data after a 400 ms prepare wait: %v (code %s), want the data's 503 naming GEOS", err, p.Code)
	}
	if n, _ := obs.get(pgcall.StatementTimeout); n != 0 {
		t.Errorf("%d statement timeouts observed, want 0", n)
	}
}

// warm opens db's connections' first one and uses it, so that a test's
// timing does not hold the connection's opening.
func warm(t *testing.T, db *pgcall.DB) {
	t.Helper()
	var one int
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: 5 * time.Second, Scan: pgcall.One(&one)}); err != nil {
		t.Fatal(err)
	}
}

// goroutineID is the current goroutine's number, as its stack trace
// names it ("goroutine 42 [running]:").
func goroutineID(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		t.Fatalf("stack %q", buf)
	}
	id, err := strconv.Atoi(string(f[1]))
	if err != nil {
		t.Fatalf("stack %q: %v", buf, err)
	}
	return id
}

// The calls on one connection of a Configure'd pool run on one goroutine,
// the connection's own, not on a new one each (whose stack would grow
// again, call after call); it ends when the pool closes the connection.
func TestCallsOfAConnectionShareItsGoroutine(t *testing.T) {
	t.Parallel()
	cfg := testenv.PoolConfig(t, testenv.ReadDatabaseURL(t))
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := &pgcall.DB{Pool: pool, AcquireTimeout: 5 * time.Second}
	ids := make([]int, 3)
	for i := range ids {
		_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second, Scan: func(rows pgx.Rows) error {
			ids[i] = goroutineID(t)
			return nil
		}})
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] || ids[0] == goroutineID(t) {
		t.Fatalf("the calls ran on goroutines %v (the test's is %d), want one of their own", ids, goroutineID(t))
	}
	pool.Close()
	mark := []byte("goroutine " + strconv.Itoa(ids[0]) + " [")
	deadline := time.Now().Add(5 * time.Second)
	for {
		all := make([]byte, 1<<20)
		all = all[:runtime.Stack(all, true)]
		if !bytes.Contains(all, mark) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutine %d still runs 5 s after its connection was closed", ids[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A request's Budget caps the database time of the request (README: "A
// request is cut at max(timeout_floor, timeout_factor × the time it paid
// for)"; Budget: "a call's statements run under at most what is left of
// it"), not of each of its statements: a read of two statements — a
// composite tile of two layers — under a 600 ms budget must be cut before
// it has run 800 ms. Today each statement gets the whole budget as its
// statement_timeout, so a composite of n layers may run n times what it
// paid for.
func TestReadBudgetCapsTheWholeRead(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 1)}
	ctx, budget := pgcall.WithBudget(t.Context())
	budget.Set(600 * time.Millisecond)
	ctx, meter := pgcall.WithMeter(ctx)
	_, err := db.Read(ctx,
		pgcall.Statement{SQL: `SELECT pg_sleep(0.4)`, Timeout: 10 * time.Second},
		pgcall.Statement{SQL: `SELECT pg_sleep(0.4)`, Timeout: 10 * time.Second},
	)
	if p := problem.From(err); err == nil || p.Code != problem.Timeout {
		t.Fatalf("two 400 ms statements under a 600 ms budget: err %v after %v of database time; want a timeout before 600 ms",
			err, meter.DB())
	}
}

// Each statement of a read under a Budget runs under what the statements
// before it left, within its own timeout: after a 200 ms statement under a
// 5 s budget, the next one gets at most 4.8 s, and one whose own
// timeout is 100 ms keeps it. (Under a 600 ms budget, a busy host's
// scheduling alone spent what the third statement had left.)
func TestReadStatementsShareTheBudget(t *testing.T) {
	t.Parallel()
	db := &pgcall.DB{Pool: readPool(t, 1)}
	ctx, budget := pgcall.WithBudget(t.Context())
	budget.Set(5 * time.Second)
	var left, own string
	show := `SELECT current_setting('statement_timeout')`
	if _, err := db.Read(ctx,
		pgcall.Statement{SQL: `SELECT pg_sleep(0.2)`, Timeout: 10 * time.Second},
		pgcall.Statement{SQL: show, Timeout: 10 * time.Second, Scan: pgcall.One(&left)},
		pgcall.Statement{SQL: show, Timeout: 100 * time.Millisecond, Scan: pgcall.One(&own)},
	); err != nil {
		t.Fatal(err)
	}
	if d, err := time.ParseDuration(left); err != nil || d > 4800*time.Millisecond || d <= 0 {
		t.Errorf("statement_timeout after 200 ms of a 5 s budget: %q, want at most 4.8s", left)
	}
	if own != "100ms" {
		t.Errorf("statement_timeout of a 100 ms statement with budget left: %q, want its own 100ms", own)
	}
}

// A connection a call cannot give back for reuse — its Scan panicked, and
// what it holds is unknown — is closed and out of the pool when the call
// returns, not some time later: the pool's only slot is free for the next
// call at once, and the pool never counts more connections than its
// MaxConns. The pool's BeforeClose hook, slowed here, shows which comes
// first: pgxpool's own release runs it on a goroutine of its own and
// frees the slot after it.
func TestDiscardedConnectionFreesItsSlotBeforeTheCallReturns(t *testing.T) {
	t.Parallel()
	cfg := testenv.PoolConfig(t, testenv.ReadDatabaseURL(t))
	cfg.MaxConns = 1
	var closed atomic.Int32
	cfg.BeforeClose = func(*pgx.Conn) {
		time.Sleep(200 * time.Millisecond)
		closed.Add(1)
	}
	pgcall.Configure(cfg, testenv.CancelWait)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := &pgcall.DB{Pool: pool, AcquireTimeout: time.Second, RetryAfter: 2}

	for i := range 3 {
		_, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second,
			Scan: func(pgx.Rows) error { panic("a scanner's bug") }})
		if err == nil || !strings.Contains(err.Error(), "a scanner's bug") {
			t.Fatalf("call %d: %v, want the Scan's panic", i, err)
		}
		if s := pool.Stat(); s.AcquiredConns() != 0 || s.TotalConns() != 0 || closed.Load() != int32(i+1) {
			t.Fatalf("call %d returned with %d connections acquired, %d in the pool, %d closed; want 0, 0 and %d",
				i, s.AcquiredConns(), s.TotalConns(), closed.Load(), i+1)
		}
	}
	var one int
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second, Scan: pgcall.One(&one)}); err != nil || one != 1 {
		t.Errorf("Read after the timeouts: %d, %v", one, err)
	}
}
