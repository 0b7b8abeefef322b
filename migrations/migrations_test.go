package migrations_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/migrations"
)

func TestUpIsIdempotent(t *testing.T) {
	pool := testenv.Pool(t)
	ctx := context.Background()
	applied, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Errorf("a migrated database had %d pending migrations", len(applied))
	}
	v, err := migrations.Version(ctx, pool)
	if err != nil || v < 2 {
		t.Fatalf("version %d, %v", v, err)
	}
}

// The read role is the database's own backstop: read-only, time-limited,
// and able to read only the served tables.
func TestReadRoleIsRestricted(t *testing.T) {
	ctx := context.Background()
	conn := readerConn(t)

	for setting, want := range map[string]string{
		"statement_timeout":                   "5s",
		"lock_timeout":                        "1s",
		"idle_in_transaction_session_timeout": "10s",
		"default_transaction_read_only":       "on",
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM geotoll.places").Scan(&n); err != nil || n == 0 {
		t.Fatalf("reader cannot read places: %d %v", n, err)
	}

	// Default transactions are read-only…
	_, err := conn.Exec(ctx, "DELETE FROM geotoll.places WHERE id = -1")
	if got := sqlstate(err); got != "25006" {
		t.Errorf("DELETE in a default transaction: %v (SQLSTATE %s), want 25006 read_only_sql_transaction", err, got)
	}
	// …and a read-write transaction still lacks the privilege.
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM geotoll.places WHERE id = -1")
		return err
	})
	if got := sqlstate(err); got != "42501" {
		t.Errorf("DELETE in a read-write transaction: %v (SQLSTATE %s), want 42501 insufficient_privilege", err, got)
	}
	_, err = conn.Exec(ctx, "SELECT 1 FROM public.geotoll_schema_migrations LIMIT 1")
	if got := sqlstate(err); got != "42501" {
		t.Errorf("reader reads the migrations table: %v", err)
	}
}

// The read role's timeouts and read-only default are defaults, nothing
// more: PostgreSQL lets every session SET its user-settable parameters, and
// lets a role change its own defaults (ALTER ROLE … SET). Whoever holds the
// role can lift them. What does hold for any session of the role: it may
// only SELECT the served tables, and it cannot raise its connection limit.
// (geotoll itself sets statement_timeout and READ ONLY on every transaction
// it runs; the tiles and geofence store tests check that.)
func TestReadRoleDefaultsAreOnlyDefaults(t *testing.T) {
	ctx := context.Background()
	conn := readerConn(t)
	for _, set := range []string{
		"SET statement_timeout = 0",
		"SET lock_timeout = 0",
		"SET idle_in_transaction_session_timeout = 0",
		"SET default_transaction_read_only = off",
	} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Errorf("%s: %v — if PostgreSQL now refuses it, the README can promise more", set, err)
		}
	}
	var timeout string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "0" {
		t.Fatalf("statement_timeout after SET: %q %v", timeout, err)
	}
	// It may even change its own defaults (rolled back here: other tests
	// share the role).
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "ALTER ROLE geotoll_reader SET statement_timeout = 0"); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Errorf("ALTER ROLE geotoll_reader SET by the role itself: %v", err)
	}

	// What holds: privileges, whatever the session set.
	if _, err := conn.Exec(ctx, "DELETE FROM geotoll.places WHERE id = -1"); sqlstate(err) != "42501" {
		t.Errorf("DELETE after lifting read-only: %v, want 42501 insufficient_privilege", err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE geotoll_reader CONNECTION LIMIT 1000"); sqlstate(err) != "42501" {
		t.Errorf("the role raised its own connection limit: %v", err)
	}
}

var errRollback = errors.New("roll back")

// readerConn connects as the read role, as geotoll serve does; the
// connection is closed when the test ends.
func readerConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// sqlstate is the SQLSTATE of a PostgreSQL error, "" for any other.
func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Migration 7 makes a key's name unique among the keys not revoked: two
// revoked keys and an active one may share a name, two active ones may not.
// (The key store's tests show what that means for keys create and revoke.)
func TestKeyNameUniqueAmongActiveKeys(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	if v, err := migrations.Version(ctx, pool); err != nil || v < 7 {
		t.Fatalf("version %d, %v: want migration 7 applied", v, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	insert := "INSERT INTO geotoll.api_keys (name, tier, key_hash, key_prefix, revoked_at) VALUES ($1, 'free', $2, 'gt_', $3)"
	name := fmt.Sprintf("m7-%d", time.Now().UnixNano()) // the transaction is rolled back
	hash := func(i byte) []byte { return bytes.Repeat([]byte{i}, 32) }
	for i, revoked := range []any{"2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", nil} {
		if _, err := tx.Exec(ctx, insert, name, hash(byte(i)), revoked); err != nil {
			t.Fatalf("key %d of the name (revoked %v): %v", i, revoked, err)
		}
	}
	_, err = tx.Exec(ctx, insert, name, hash(9), nil)
	if got := sqlstate(err); got != "23505" {
		t.Fatalf("a second active key of the name: %v, want 23505 unique_violation", err)
	}
}

// Migration 10 gives every fence a revision, the number of the write that
// last changed it: drawn from one sequence by a trigger on every insert
// and update (whatever the writer sent), so it changes on every write, is
// never the same for two writes, and a fence deleted and created anew
// never has an old revision again. The fence writer may draw from it.
func TestMigration10FenceRevisionChangesOnEveryWrite(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	if v, err := migrations.Version(ctx, pool); err != nil || v < 10 {
		t.Fatalf("version %d, %v: want migration 10 applied", v, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const square = "ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 1,0 0)))', 4326)"
	var id, first, other int64
	if err := tx.QueryRow(ctx, "INSERT INTO geotoll.geofences (name, geom, revision) VALUES ('m10', "+square+", 1) RETURNING id, revision").Scan(&id, &first); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "INSERT INTO geotoll.geofences (name, geom) VALUES ('m10 other', "+square+") RETURNING revision").Scan(&other); err != nil {
		t.Fatal(err)
	}
	if first == 1 || other == first {
		t.Errorf("revisions of two new fences: %d and %d (the first sent as 1): want two drawn from the sequence", first, other)
	}
	seen := map[int64]bool{first: true, other: true}
	prev := first
	for i, update := range []string{
		"UPDATE geotoll.geofences SET name = 'm10 v2' WHERE id = $1",
		"UPDATE geotoll.geofences SET name = 'm10 v2' WHERE id = $1", // the same values: still a write
		"UPDATE geotoll.geofences SET geom = " + square + " WHERE id = $1",
		"UPDATE geotoll.geofences SET revision = 1 WHERE id = $1",
	} {
		var rev int64
		if err := tx.QueryRow(ctx, update+" RETURNING revision", id).Scan(&rev); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if rev <= prev || seen[rev] {
			t.Errorf("update %d (%s): revision %d after %d, want a new, greater one", i, update, rev, prev)
		}
		seen[rev], prev = true, rev
	}
	var usage bool
	if err := tx.QueryRow(ctx, "SELECT has_sequence_privilege('geotoll_fence_writer', 'geotoll.geofence_revision_seq', 'USAGE')").Scan(&usage); err != nil || !usage {
		t.Errorf("the fence writer may not draw revisions: %v %v", usage, err)
	}
}
