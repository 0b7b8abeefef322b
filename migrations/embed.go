// Package migrations holds geotoll's schema as numbered SQL files, embedded
// into the binary and applied by pressly/goose (`geotoll migrate`).
//
// Each file is one goose migration ("-- +goose Up" / "-- +goose Down").
// Migrations create the PostGIS extension, the demo tables, the restricted
// read role (README, "PostgreSQL-side enforcement"), the fence writer role,
// the API keys and the trigger that announces their changes, the fences'
// pieces and the trigger that cuts them, the serving schema that
// `geotoll prepare` builds into, and the fences' revisions (the fence
// admin's ETags) and the trigger that draws them.
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

func provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		// Schema-qualified: with an unqualified name, a role named like a
		// schema ("$user" in search_path) would find a different table once
		// migration 1 created that schema.
		goose.WithTableName("public.geotoll_schema_migrations"))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
