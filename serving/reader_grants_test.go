package serving_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// mayRead reports whether role may select from relation, a table in
// tiles.ServingSchema.
func mayRead(t *testing.T, owner *pgxpool.Pool, role, relation string) bool {
	t.Helper()
	var ok bool
	if err := owner.QueryRow(t.Context(), `SELECT has_table_privilege($1::text, $2::regclass, 'SELECT')`,
		role, pgx.Identifier{tiles.ServingSchema, relation}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPrepareRefusesATableInASchemaTheReaderMayNotUse: a role without
// USAGE on a schema reads none of its tables, whatever their grants.
// prepare builds nothing from such a table — the storage would show the
// read role a table it cannot reach — and withdraws what it built before
// the schema was closed to the role.
func TestPrepareRefusesATableInASchemaTheReaderMayNotUse(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "nousage_")
	secrets(t, f)
	l := catalog(t, shapesLayer(name, f.schema)).Layer(name)
	builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
	for _, r := range prepareAll(t, owner, l, builders...) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	before := registry(t, owner, name)
	f.exec(t, `REVOKE USAGE ON SCHEMA {s} FROM geotoll_reader`)
	if _, err := testenv.ReadPool(t).Exec(t.Context(), `SELECT FROM `+pgx.Identifier{f.schema, "shapes"}.Sanitize()); err == nil {
		t.Fatal("the read role reads the table: the test shows nothing")
	}
	for _, r := range prepareAll(t, owner, l, builders...) {
		if r.Status != serving.Failed || r.Err == nil {
			t.Errorf("schema closed to the read role: %+v, want failed", r)
		}
	}
	wantWithdrawn(t, owner, name, before, "schema closed to the read role")
}

// TestStorageIsReadableByItsReadRoleAlone: prepare -reader-role grants
// what it builds to that role, which it checked may read the table; the
// default read role, which it did not check (and which here may not read
// the table at all), may not read it. Storage built for the role and
// granted to the default read role too (as it was by default before)
// loses that grant at the next run, which finds it current, and is no
// longer readable by either once the table is refused.
func TestStorageIsReadableByItsReadRoleAlone(t *testing.T) {
	t.Parallel()
	role := unique("geotoll_tiles_")
	admin := testenv.Pool(t)
	if _, err := admin.Exec(t.Context(), `CREATE ROLE `+role+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the fixture's schema is dropped
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Only the relations the role may read: a REVOKE on every table of
		// the schema would race other tests' grants on theirs ("tuple
		// concurrently updated").
		if _, err := admin.Exec(ctx, `DO $$
			DECLARE r regclass;
			BEGIN
				FOR r IN SELECT c.oid FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
				         WHERE n.nspname = 'geotoll_serving' AND has_table_privilege('`+role+`', c.oid, 'SELECT') LOOP
					EXECUTE format('REVOKE ALL ON %s FROM %I', r, '`+role+`');
				END LOOP;
			END $$; DROP ROLE `+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	owner, f, name := setup(t, true, "tilesrole_")
	secrets(t, f)
	f.exec(t, `GRANT USAGE ON SCHEMA {s} TO `+role)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO `+role)
	f.exec(t, `REVOKE SELECT ON {s}.shapes FROM geotoll_reader`)
	l := catalog(t, shapesLayer(name, f.schema)).Layer(name)
	o := serving.Options{ReaderRole: role, Builders: []serving.Builder{serving.Subdivide{}}}
	for _, r := range prepareResults(t, owner, []*tiles.Layer{l}, o) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	built := registry(t, owner, name)
	for rel := range built {
		if !mayRead(t, owner, role, rel) {
			t.Errorf("%s may not read %s, built for it", role, rel)
		}
		if mayRead(t, owner, serving.DefaultReaderRole, rel) {
			t.Errorf("%s may read %s, built for %s from a table it may not read", serving.DefaultReaderRole, rel, role)
		}
		f.exec(t, `GRANT SELECT ON `+pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()+` TO geotoll_reader`)
	}
	// Storage granted to the default read role too, as every relation was
	// by default before: a run that finds it current takes that away.
	for _, r := range prepareResults(t, owner, []*tiles.Layer{l}, o) {
		if r.Status != serving.Unchanged || r.Err != nil {
			t.Fatalf("again: %+v, want unchanged", r)
		}
	}
	for rel := range built {
		if mayRead(t, owner, serving.DefaultReaderRole, rel) {
			t.Errorf("%s may still read %s, current storage built for %s", serving.DefaultReaderRole, rel, role)
		}
		f.exec(t, `GRANT SELECT ON `+pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()+` TO geotoll_reader`)
	}

	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	for _, r := range prepareResults(t, owner, []*tiles.Layer{l}, o) {
		if r.Status != serving.Removed || r.Reason != serving.RowSecurity {
			t.Errorf("row security: %+v, want removed, reason %q", r, serving.RowSecurity)
		}
	}
	for rel := range built {
		for _, who := range []string{role, serving.DefaultReaderRole} {
			if mayRead(t, owner, who, rel) {
				t.Errorf("row security: %s may still read %s", who, rel)
			}
		}
	}
}

// TestRegistryRowInASchemaTheReaderMayNotUseFailsNoRead: the registry
// names each storage's source table; to_regclass fails on a name in a
// schema the reader may not use, and one such row failed the whole
// registry read, so that every layer read its tables. The row matches no
// layer of the reader's, and the others' storage is read.
func TestRegistryRowInASchemaTheReaderMayNotUseFailsNoRead(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "regusage_")
	secrets(t, f)
	closed, _, other := setup(t, true, "regusage_closed_")
	hidden := newFixture(t, closed, true)
	secrets(t, hidden)
	layer, hiddenLayer := shapesLayer(name, f.schema), shapesLayer(other, hidden.schema)
	cat := catalog(t, layer, hiddenLayer)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	for _, r := range prepareResults(t, owner, []*tiles.Layer{cat.Layer(name), cat.Layer(other)}, o) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	hidden.exec(t, `REVOKE USAGE ON SCHEMA {s} FROM geotoll_reader`)
	if _, err := cat.Refresh(t.Context(), testenv.ReadPool(t)); err != nil {
		t.Fatalf("the registry read fails: %v", err)
	}
	if src := cat.Layer(name).Source(12); src.Builder != tiles.BuilderSubdivide {
		t.Errorf("z12 of %s reads %q, want its pieces", name, src.Builder)
	}
	if src := cat.Layer(other).Source(12); src.Builder != "" {
		t.Errorf("z12 of the layer in the closed schema reads %q, want its table", src.Builder)
	}
}
