// Package testenv gives integration tests the real PostgreSQL/PostGIS and
// Redis that `make test` starts.
//
// The services are named by environment variables:
//
//	GEOTOLL_TEST_DATABASE_URL   a migrated and seeded PostGIS database (owner role)
//	GEOTOLL_TEST_READ_DATABASE_URL  the same database as the read-only role
//	GEOTOLL_TEST_REDIS_URL      a Redis server the tests may write to
//	GEOTOLL_TEST_REDIS_CLUSTER_ADDRS  comma-separated seed addresses of a
//	                            Redis Cluster the tests may write to
//	                            (scripts/services.sh cluster-up)
//
// When a variable is unset, the test is skipped — unless
// GEOTOLL_REQUIRE_SERVICES=1 or CI=true, in which case it fails. `make test`
// sets GEOTOLL_REQUIRE_SERVICES=1, so in CI a missing service is a failure,
// never a silent skip. A developer running plain `go test ./...` without
// services gets skips.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/pgcall"
)

// Required reports whether missing services must fail tests instead of
// skipping them.
func Required() bool {
	return os.Getenv("GEOTOLL_REQUIRE_SERVICES") == "1" || os.Getenv("CI") == "true"
}

func missing(t testing.TB, what string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is not set, and services are required (GEOTOLL_REQUIRE_SERVICES=1 or CI=true); run `make test`", what)
	}
	t.Skipf("%s is not set; run `make test` to start PostGIS and Redis", what)
}

// Tool returns the path of the program name, or fails the test when
// services are required (make test, CI) and skips it otherwise; what says
// what needs the program.
func Tool(t testing.TB, name, what string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s needs %s, which is not on PATH", what, name)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// DatabaseURL returns the test database URL or skips/fails the test.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("GEOTOLL_TEST_DATABASE_URL")
	if u == "" {
		missing(t, "GEOTOLL_TEST_DATABASE_URL")
	}
	return u
}

// ReadDatabaseURL returns the test database URL of the restricted read role
// (GEOTOLL_TEST_READ_DATABASE_URL) or skips/fails the test.
func ReadDatabaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("GEOTOLL_TEST_READ_DATABASE_URL")
	if u == "" {
		missing(t, "GEOTOLL_TEST_READ_DATABASE_URL")
	}
	return u
}

// RedisURL returns the test Redis URL or skips/fails the test.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("GEOTOLL_TEST_REDIS_URL")
	if u == "" {
		missing(t, "GEOTOLL_TEST_REDIS_URL")
	}
	return u
}

// Pool connects to the test database; the pool is closed when the test ends.
// A database that does not answer within 10 s fails the test.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return connect(t, DatabaseURL(t))
}

// ReadPool connects to the test database as the restricted read role
// (GEOTOLL_TEST_READ_DATABASE_URL: read-only by default, with its own
// statement_timeout), the role `serve` uses. The pool is closed when the test
// ends; a database that does not answer within 10 s fails the test.
func ReadPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return connect(t, ReadDatabaseURL(t))
}

// CancelWait is how long the test pools wait for a cancelled statement
// to stop before closing its connection (see pgcall.Configure).
const CancelWait = time.Minute

// PoolConfig parses url into a pool configuration set up as `serve` sets
// up its own: a cancelled statement is stopped with a cancel request and
// its connection kept until it has (pgcall.Configure).
func PoolConfig(t testing.TB, url string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testenv: parse database URL: %v", err)
	}
	pgcall.Configure(cfg, CancelWait)
	return cfg
}

func connect(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, PoolConfig(t, url))
	if err != nil {
		t.Fatalf("testenv: connect PostgreSQL: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("testenv: ping PostgreSQL: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Redis connects to the test Redis; the client is closed when the test ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("testenv: parse GEOTOLL_TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("testenv: ping Redis: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// RedisClusterAddrs returns the seed addresses of the test Redis Cluster
// (GEOTOLL_TEST_REDIS_CLUSTER_ADDRS) or skips/fails the test.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for _, a := range strings.Split(os.Getenv("GEOTOLL_TEST_REDIS_CLUSTER_ADDRS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		missing(t, "GEOTOLL_TEST_REDIS_CLUSTER_ADDRS")
	}
	return addrs
}

// RedisCluster connects to the test Redis Cluster; the client is closed when
// the test ends. A cluster whose every master does not answer within 10 s
// fails the test.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: RedisClusterAddrs(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	})
	if err != nil {
		rdb.Close()
		t.Fatalf("testenv: ping Redis Cluster: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Prefix returns a unique key prefix for one test, so tests sharing one Redis
// never see each other's buckets.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "geotoll-test-" + hex.EncodeToString(b[:])
}

// BusyPool returns a one-connection pool on the read role's database whose
// only connection is held, and the function that releases it: every Acquire
// waits until then. The pool is closed when the test ends.
func BusyPool(t testing.TB) (*pgxpool.Pool, func()) {
	t.Helper()
	cfg := PoolConfig(t, ReadDatabaseURL(t))
	cfg.MaxConns = 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("testenv: acquire the pool's only connection: %v", err)
	}
	var once sync.Once
	release := func() { once.Do(held.Release) }
	t.Cleanup(release)
	return pool, release
}

// ForgetStorage drops, when the test ends, the serving storage `geotoll
// prepare` built for the named layers (tables in geotoll_serving), served
// or retired, and their registry rows, through owner (the schema owner).
func ForgetStorage(t testing.TB, owner *pgxpool.Pool, layers ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range layers {
			rows, err := owner.Query(ctx, `WITH s AS (DELETE FROM geotoll_serving.storage WHERE layer = $1 RETURNING relation),
				r AS (DELETE FROM geotoll_serving.retired WHERE layer = $1 RETURNING relation)
				SELECT relation FROM s UNION SELECT relation FROM r`, name)
			if err != nil {
				t.Errorf("testenv: forget the storage of %s: %v", name, err)
				continue
			}
			rels, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Errorf("testenv: forget the storage of %s: %v", name, err)
			}
			for _, r := range rels {
				if _, err := owner.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{"geotoll_serving", r}.Sanitize()); err != nil {
					t.Errorf("testenv: drop %s: %v", r, err)
				}
			}
		}
	})
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Schema creates a schema of the test database, named after prefix and
// unique to the test, runs the statements stmts returns for its name as
// the owner, and drops it (CASCADE) when the test ends. It returns the
// schema's name.
func Schema(t testing.TB, prefix string, stmts func(schema string) []string) string {
	t.Helper()
	owner := Pool(t)
	schema := prefix + strings.TrimPrefix(Prefix(t), "geotoll-test-")
	t.Cleanup(func() {
		_, _ = owner.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	for _, stmt := range append([]string{"CREATE SCHEMA " + schema}, stmts(schema)...) {
		if _, err := owner.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("testenv: %s: %v", stmt, err)
		}
	}
	return schema
}
