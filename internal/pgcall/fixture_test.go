package pgcall_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
)

// fixture is a schema of its own for one test, readable by the read role
// and dropped when the test ends. Its name also marks the test's
// statements in pg_stat_activity.
type fixture struct {
	owner  *pgxpool.Pool
	schema string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	f := &fixture{owner: testenv.Pool(t), schema: "pgcall_test_" + hex.EncodeToString(b[:])}
	f.exec(t, `CREATE SCHEMA {s}`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // t.Context() is done by now
		defer cancel()
		if _, err := f.owner.Exec(ctx, f.sql(`DROP SCHEMA {s} CASCADE`)); err != nil {
			t.Errorf("drop fixture schema: %v", err)
		}
	})
	f.exec(t, `GRANT USAGE ON SCHEMA {s} TO geotoll_reader`)
	return f
}

// sql replaces {s} with the quoted schema.
func (f *fixture) sql(q string) string {
	return strings.ReplaceAll(q, "{s}", pgx.Identifier{f.schema}.Sanitize())
}

func (f *fixture) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := f.owner.Exec(t.Context(), f.sql(q), args...); err != nil {
		t.Fatalf("fixture %q: %v", q, err)
	}
}

// hugePolygon stores {s}.huge: one valid star-shaped polygon of n
// vertices, readable by the read role.
func (f *fixture) hugePolygon(t *testing.T, n int) {
	t.Helper()
	f.exec(t, `CREATE TABLE {s}.huge AS
		SELECT ST_SetSRID(ST_MakePolygon(ST_AddPoint(l, ST_StartPoint(l))), 3857) AS g FROM (
			SELECT ST_MakeLine(ST_MakePoint(r * cos(a), r * sin(a)) ORDER BY i) AS l FROM (
				SELECT i, 2 * pi() * i / $1 AS a,
				       1000000 + 200000 * sin(i * 0.37) + 100000 * ((i::bigint * 7919) % 13) / 13.0 AS r
				FROM generate_series(0, $1 - 1) i) p) q`, n)
	f.exec(t, `GRANT SELECT ON {s}.huge TO geotoll_reader`)
}

// lockFor takes an ACCESS EXCLUSIVE lock on {s}.table and releases it
// held later, its transaction committed by a goroutine of its own, which
// the test waits for before it ends (and before the fixture is dropped).
func (f *fixture) lockFor(t *testing.T, table string, held time.Duration) {
	t.Helper()
	tx, err := f.owner.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), f.sql(`LOCK TABLE {s}.`+table+` IN ACCESS EXCLUSIVE MODE`)); err != nil {
		_ = tx.Rollback(context.Background())
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(held)
		_ = tx.Commit(context.Background()) // a failed commit ends the lock too
	}()
	t.Cleanup(func() { <-released })
}

// stuckSQL cuts the huge polygon into pieces of at most 256 vertices. The
// first cut of a 150,000-vertex polygon runs for seconds without looking at
// interrupts: neither statement_timeout nor a cancel request stops it
// before it is done (measured on PostGIS 3.3: about 4 s on 2 cores).
func (f *fixture) stuckSQL() string {
	return f.sql(`SELECT count(*) FROM {s}.huge, ST_Subdivide(g, 256)`)
}

// running counts the backends of other sessions running one of the
// fixture's statements right now.
func (f *fixture) running(t *testing.T) int {
	t.Helper()
	var n int
	err := f.owner.QueryRow(t.Context(), `
		SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, f.schema).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// readPool is a pool of the read role with max connections, set up as
// serve sets up its own (pgcall.Configure).
func readPool(t *testing.T, max int32) *pgxpool.Pool {
	t.Helper()
	return poolAt(t, testenv.ReadDatabaseURL(t), max, testenv.CancelWait)
}

func poolAt(t *testing.T, url string, max int32, cancelWait time.Duration) *pgxpool.Pool {
	t.Helper()
	cfg := testenv.PoolConfig(t, url)
	cfg.MaxConns = max
	pgcall.Configure(cfg, cancelWait)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// observer records a DB's outcomes.
type observer struct {
	mu        sync.Mutex
	calls     map[string]int
	outliving int
}

func (o *observer) Call(c string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[string]int{}
	}
	o.calls[c]++
}

func (o *observer) Outliving(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outliving += d
}

func (o *observer) get(c string) (calls, outliving int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[c], o.outliving
}

// eventually polls cond every 20 ms until it holds, for at most limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
