// Package migrations holds geotoll's schema as numbered SQL files, embedded
// into the binary and applied by pressly/goose (`geotoll migrate`).
//
// Each file is one goose migration ("-- +goose Up" / "-- +goose Down").
// Migrations create the PostGIS extension, the demo tables, the restricted
// read role (README, "PostgreSQL-side enforcement"), the fence writer role,
// the API keys and the trigger that announces their changes, the fences'
// pieces and the trigger that cuts them, the serving schema that
// `geotoll prepare` builds into (its registry, its list of retired
// storage, and the read role's grants on it), the fences' revisions (the
// fence admin's ETags) and the trigger that draws them, and the
// functions geotoll.density_transform and geotoll.tile_transform, with
// which price-model builds and tiles take rows a projection cannot.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// FS returns the migration files.
func FS() fs.FS { return files }

// Result is one applied migration.
type Result struct {
	Version int64
	Source  string
}

// Up applies every pending migration through pool (which must connect as
// the schema owner) and returns what it applied.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		out = append(out, Result{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// Version returns the newest applied migration (0 when none).
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

// lockID is the advisory lock `geotoll migrate` holds while it migrates
// ("geotoll" in ASCII; another program's goose in the same
// database uses its own).
const lockID int64 = 0x67656f746f6c6c

func provider(db *sql.DB) (*goose.Provider, error) {
	// Schema-qualified: with an unqualified name, a role named like a
	// schema ("$user" in search_path) would find a different table once
	// migration 1 created that schema.
	return newProvider(db, files, "public.geotoll_schema_migrations")
}

// newProvider migrates db with the migrations in fsys, recording them in
// table.
func newProvider(db *sql.DB, fsys fs.FS, table string) (*goose.Provider, error) {
	// One migration at a time: replicas started together each run migrate,
	// and two that both found migration n pending would both apply it (the
	// second failing on what the first created). The second waits, then
	// finds nothing pending. A lock held longer than 10 minutes fails the
	// wait.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID), lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName(table), goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
