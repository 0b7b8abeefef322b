package migrations_test

import (
	"context"
	"errors"
	"testing"

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
	conn, err := pgx.Connect(ctx, testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

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

	sqlstate := func(err error) string {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code
		}
		return ""
	}
	// Default transactions are read-only…
	_, err = conn.Exec(ctx, "DELETE FROM geotoll.places WHERE id = -1")
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
