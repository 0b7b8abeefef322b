package serving_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// onSearchPath connects to url with schema first on its search_path (then
// public, where PostGIS is); the pool is closed when the test ends.
func onSearchPath(t *testing.T, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg := testenv.PoolConfig(t, url)
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize() + ", public"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestUnqualifiedTableServesOnlyStorageOfTheTablePrepareRead: a layer's
// table named without its schema is resolved by prepare under the schema
// owner's search_path and by serve under the read role's, which may name
// another table. The registry records the table prepare read, with its
// schema, and serve reads the storage only if its own table is that one.
// A row recorded without a schema (by an older prepare) does not say
// which table was read: serve reads the table, and the next prepare
// rebuilds the storage and records it with its schema.
func TestUnqualifiedTableServesOnlyStorageOfTheTablePrepareRead(t *testing.T) {
	t.Parallel()
	owner, a, name := setup(t, true, "path_")
	b := newFixture(t, owner, true)
	shapes(t, a)
	b.exec(t, `CREATE TABLE {s}.shapes AS SELECT * FROM `+pgx.Identifier{a.schema}.Sanitize()+`.shapes WHERE id = 3`)
	b.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, "")
	cat := catalog(t, layer)
	prep := onSearchPath(t, testenv.DatabaseURL(t), a.schema)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	if r := one(t, prep, cat.Layer(name), o); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	var recorded string
	if err := owner.QueryRow(t.Context(), `SELECT source_table FROM geotoll_serving.storage WHERE layer = $1`, name).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if want := (pgx.Identifier{a.schema, "shapes"}).Sanitize(); recorded != want {
		t.Errorf("source_table %s, want %s: the table prepare read", recorded, want)
	}

	// The read role's search_path names the other schema's table.
	if _, err := cat.Refresh(t.Context(), onSearchPath(t, testenv.ReadDatabaseURL(t), b.schema)); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != "" {
		t.Errorf("serve on %s.shapes reads %s (builder %q), built from %s.shapes", b.schema, src.Relation.Sanitize(), src.Builder, a.schema)
	}
	// The same table: the storage is read.
	onA := onSearchPath(t, testenv.ReadDatabaseURL(t), a.schema)
	if _, err := cat.Refresh(t.Context(), onA); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != tiles.BuilderSubdivide {
		t.Errorf("serve on %s.shapes reads %q, want its pieces", a.schema, src.Builder)
	}

	// A row recorded without the schema, as an older prepare did.
	if _, err := owner.Exec(t.Context(), `UPDATE geotoll_serving.storage SET source_table = '"shapes"' WHERE layer = $1`, name); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Refresh(t.Context(), onA); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != "" {
		t.Errorf("storage recorded without a schema: z12 reads %q, want the table", src.Builder)
	}
	if r := one(t, prep, cat.Layer(name), o); r.Status != serving.Built {
		t.Errorf("prepare after a row recorded without a schema: %+v, want built", r)
	}
	if _, err := cat.Refresh(t.Context(), onA); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != tiles.BuilderSubdivide {
		t.Errorf("rebuilt: z12 reads %q, want the pieces", src.Builder)
	}
	if r := one(t, prep, cat.Layer(name), o); r.Status != serving.Unchanged {
		t.Errorf("prepare again: %+v, want unchanged", r)
	}
}
