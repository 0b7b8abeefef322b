package serving_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// secrets adds table {s}.shapes to a fixture: 40 squares (ids 0–39,
// named s0–s39) in one z10 tile, readable by the read role.
func secrets(t *testing.T, f *fixture) {
	t.Helper()
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT i, 's' || i, ST_MakeEnvelope(1000 + (i % 8) * 4500, 1000 + (i / 8) * 4500,
		                                    4000 + (i % 8) * 4500, 4000 + (i / 8) * 4500, 3857)
		FROM generate_series(0, 39) AS i`)
	f.exec(t, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
}

// prepareAll runs Prepare with builders on one layer and returns its
// results, other tests' retired storage aside.
func prepareAll(t *testing.T, owner *pgxpool.Pool, l *tiles.Layer, builders ...serving.Builder) []serving.Result {
	t.Helper()
	return prepareResults(t, owner, []*tiles.Layer{l}, serving.Options{Builders: builders})
}

// readable reports whether the read role may select from relation, a
// table in tiles.ServingSchema.
func readable(t *testing.T, owner *pgxpool.Pool, relation string) bool {
	t.Helper()
	var ok bool
	if err := owner.QueryRow(t.Context(), `SELECT has_table_privilege('geotoll_reader', $1::regclass, 'SELECT')`,
		pgx.Identifier{tiles.ServingSchema, relation}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// wantWithdrawn wants the layer's storage gone from the registry and the
// read role no longer allowed to read any relation of before (its
// storage before the change described by when).
func wantWithdrawn(t *testing.T, owner *pgxpool.Pool, name string, before map[string][3]string, when string) {
	t.Helper()
	if n := len(registry(t, owner, name)); n != 0 {
		t.Errorf("%s: %d relations still recorded", when, n)
	}
	for rel := range before {
		if readable(t, owner, rel) {
			t.Errorf("%s: the read role may still read %s", when, rel)
		}
	}
}

// TestPrepareRefusesRowSecurity: prepare connects as the schema owner,
// whom row-level security does not filter, and the storage it builds is
// readable by the read role: built from a table whose policies hide rows
// from the read role, it would serve them. So prepare builds nothing from
// such a table (Reason RowSecurity), retires the storage it built before
// the policies came and takes the read role's right to read it, and the
// layer's tiles read the table, as the policies allow.
func TestPrepareRefusesRowSecurity(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "rls_")
	secrets(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	reader := testenv.ReadPool(t)
	store := tiles.NewStore(reader)
	tile := maptile.At(orb.Point{0.2, 0.05}, 10)
	builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
	refresh := func() {
		t.Helper()
		if _, err := cat.Refresh(t.Context(), reader); err != nil {
			t.Fatal(err)
		}
	}

	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Built {
			t.Fatalf("before row security: %+v, want built", r)
		}
	}
	before := registry(t, owner, name)
	refresh()
	if src := cat.Layer(name).Source(tile.Z); src.Builder != tiles.BuilderSubdivide {
		t.Fatalf("before row security, z%d reads %q, want the pieces", tile.Z, src.Builder)
	}

	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	f.exec(t, `CREATE POLICY even ON {s}.shapes FOR SELECT TO geotoll_reader USING (id % 2 = 0)`)
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Removed || r.Reason != serving.RowSecurity || r.Err != nil {
			t.Errorf("row security: %+v, want removed, reason %q", r, serving.RowSecurity)
		}
	}
	if n := len(registry(t, owner, name)); n != 0 {
		t.Errorf("row security: %d relations still recorded", n)
	}
	for rel := range before {
		if readable(t, owner, rel) {
			t.Errorf("row security: the read role may still read %s, built from every row", rel)
		}
	}
	refresh()
	if src := cat.Layer(name).Source(tile.Z); src.Builder != "" {
		t.Errorf("row security: z%d reads %q, want the table", tile.Z, src.Builder)
	}
	var want []string
	for i := 0; i < 40; i += 2 {
		want = append(want, "s"+strconv.Itoa(i))
	}
	slices.Sort(want)
	if got := tileNames(t, store, cat.Layer(name), tile); !slices.Equal(got, want) {
		t.Errorf("row security: %v served, want the even ones %v", got, want)
	}
	for _, z := range []maptile.Zoom{3, 7} {
		if src := cat.Layer(name).Source(z); src.Builder != "" {
			t.Errorf("row security: z%d reads %q, want the table", z, src.Builder)
		}
	}

	// Nothing left to retire: the next run skips the layer, for the same reason.
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Skipped || r.Reason != serving.RowSecurity || r.Err != nil {
			t.Errorf("row security, again: %+v, want skipped, reason %q", r, serving.RowSecurity)
		}
	}

	// Forced on the table as on its owner, the policies bind whoever
	// reads: still refused.
	f.exec(t, `ALTER TABLE {s}.shapes FORCE ROW LEVEL SECURITY`)
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Skipped || r.Reason != serving.RowSecurity {
			t.Errorf("forced row security: %+v, want skipped, reason %q", r, serving.RowSecurity)
		}
	}

	// Without row security, storage is built again.
	f.exec(t, `ALTER TABLE {s}.shapes NO FORCE ROW LEVEL SECURITY`)
	f.exec(t, `ALTER TABLE {s}.shapes DISABLE ROW LEVEL SECURITY`)
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Built {
			t.Errorf("row security off: %+v, want built", r)
		}
	}
}

// TestPrepareRefusesEvenAPolicyShowingEveryRow: the check is whether row
// security applies to the read role, not what its policies let it see: a
// policy that shows it every row refuses the table too (grant the read
// role BYPASSRLS, or disable row security, to have storage built).
func TestPrepareRefusesEvenAPolicyShowingEveryRow(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "rlsall_")
	secrets(t, f)
	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	f.exec(t, `CREATE POLICY all_rows ON {s}.shapes FOR SELECT TO geotoll_reader USING (true)`)
	for _, r := range prepareAll(t, owner, catalog(t, shapesLayer(name, f.schema)).Layer(name), serving.Overview{}, serving.Subdivide{}) {
		if r.Status != serving.Skipped || r.Reason != serving.RowSecurity || r.Err != nil {
			t.Errorf("%+v, want skipped, reason %q", r, serving.RowSecurity)
		}
	}
}

// TestPrepareRefusesASecurityInvokerView: the read role reads a view with
// security_invoker through its own rights and the row security of the
// view's tables, which storage prepare builds as the schema owner would
// not apply: prepare builds nothing from it (Reason InvokerView).
func TestPrepareRefusesASecurityInvokerView(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "invoker_")
	secrets(t, f)
	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	f.exec(t, `CREATE POLICY even ON {s}.shapes FOR SELECT TO geotoll_reader USING (id % 2 = 0)`)
	f.exec(t, `CREATE VIEW {s}.shapes_view WITH (security_invoker = true) AS SELECT * FROM {s}.shapes`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_view TO geotoll_reader`)
	wantViewSkipped(t, owner, f, name, "shapes_view", serving.InvokerView)
}

// wantViewSkipped prepares a layer of view in f and wants both builders
// skipped for reason, nothing recorded.
func wantViewSkipped(t *testing.T, owner *pgxpool.Pool, f *fixture, name, view, reason string) {
	t.Helper()
	l := shapesLayer(name, f.schema)
	l.Table = view
	for _, r := range prepareAll(t, owner, catalog(t, l).Layer(name), serving.Overview{}, serving.Subdivide{}) {
		if r.Status != serving.Skipped || r.Reason != reason || r.Err != nil {
			t.Errorf("%+v, want skipped, reason %q", r, reason)
		}
	}
	if n := len(registry(t, owner, name)); n != 0 {
		t.Errorf("%d relations recorded for the refused view %s", n, view)
	}
}

// TestPrepareRefusesAViewOverASecurityInvokerView: a view with
// security_invoker read through a view without it still reads its own
// relations with the rights of the role that queries: the read role may
// not read through it what prepare, as the schema owner, may. prepare
// builds nothing from a view that reads such a view (Reason InvokerView).
func TestPrepareRefusesAViewOverASecurityInvokerView(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "invokerouter_")
	secrets(t, f)
	f.exec(t, `REVOKE SELECT ON {s}.shapes FROM geotoll_reader`)
	f.exec(t, `CREATE VIEW {s}.shapes_invoker WITH (security_invoker = true) AS SELECT * FROM {s}.shapes`)
	f.exec(t, `CREATE VIEW {s}.shapes_view AS SELECT * FROM {s}.shapes_invoker`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_invoker, {s}.shapes_view TO geotoll_reader`)
	if _, err := testenv.ReadPool(t).Exec(t.Context(), `SELECT FROM `+pgx.Identifier{f.schema, "shapes_view"}.Sanitize()); err == nil {
		t.Fatal("the read role reads the view: the test shows nothing")
	}
	wantViewSkipped(t, owner, f, name, "shapes_view", serving.InvokerView)
}

// TestPrepareRetiresWhatTheReaderMayNoLongerRead: once the read role may
// no longer read the layer's table, prepare fails the layer (naming the
// role) and its storage built before goes with it: retired, and no longer
// readable by the read role, so that the layer's tiles read the table.
func TestPrepareRetiresWhatTheReaderMayNoLongerRead(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "revoked_")
	secrets(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Built {
			t.Fatalf("%+v, want built", r)
		}
	}
	before := registry(t, owner, name)
	f.exec(t, `REVOKE SELECT ON {s}.shapes FROM geotoll_reader`)
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Failed || r.Err == nil {
			t.Errorf("after the revoke: %+v, want failed", r)
		}
	}
	wantWithdrawn(t, owner, name, before, "after the revoke")
}

// TestPrepareRefusesAViewOverRowSecurity: the read role reads a view
// without security_invoker with the view owner's rights, but the row
// security of the tables it reads still applies, and current_user in a
// policy is the role that reads the view: prepare, reading as the schema
// owner, sees other rows than the read role does. So prepare builds
// nothing from a view that reads a table with row security enabled,
// directly or through other views (Reason ViewRowSecurity), retires what
// it built before, and the layer's tiles read the view. A materialized
// view holds the rows computed when it was refreshed, which the read role
// reads whole: it is built.
func TestPrepareRefusesAViewOverRowSecurity(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "viewrls_")
	secrets(t, f)
	f.exec(t, `ALTER TABLE {s}.shapes ADD COLUMN tenant text`)
	f.exec(t, `UPDATE {s}.shapes SET tenant = CASE WHEN id < 5 THEN 'geotoll_reader' ELSE current_user END`)
	f.exec(t, `CREATE VIEW {s}.shapes_view AS SELECT * FROM {s}.shapes`)
	f.exec(t, `CREATE VIEW {s}.shapes_outer AS SELECT v.* FROM {s}.shapes_view AS v`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_view, {s}.shapes_outer TO geotoll_reader`)
	l := shapesLayer(name, f.schema)
	l.Table = "shapes_view"
	cat := catalog(t, l)
	reader := testenv.ReadPool(t)
	store := tiles.NewStore(reader)
	tile := maptile.At(orb.Point{0.2, 0.05}, 10)
	builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Built {
			t.Fatalf("before row security: %+v, want built", r)
		}
	}
	before := registry(t, owner, name)

	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	f.exec(t, `ALTER TABLE {s}.shapes FORCE ROW LEVEL SECURITY`)
	f.exec(t, `CREATE POLICY tenant ON {s}.shapes FOR SELECT USING (tenant = current_user)`)
	view := pgx.Identifier{f.schema, "shapes_view"}.Sanitize()
	for _, c := range []struct {
		pool *pgxpool.Pool
		want int
	}{{owner, 35}, {reader, 5}} {
		var n int
		if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+view).Scan(&n); err != nil || n != c.want {
			t.Fatalf("the view shows %d rows (%v), want %d", n, err, c.want)
		}
	}
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Removed || r.Reason != serving.ViewRowSecurity || r.Err != nil {
			t.Errorf("row security under the view: %+v, want removed, reason %q", r, serving.ViewRowSecurity)
		}
	}
	wantWithdrawn(t, owner, name, before, "row security under the view")
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	if src := cat.Layer(name).Source(tile.Z); src.Builder != "" {
		t.Errorf("row security under the view: z%d reads %q, want the view", tile.Z, src.Builder)
	}
	if got, want := tileNames(t, store, cat.Layer(name), tile), []string{"s0", "s1", "s2", "s3", "s4"}; !slices.Equal(got, want) {
		t.Errorf("row security under the view: %v served, want the read role's %v", got, want)
	}

	// A view over that view: the same.
	outer := shapesLayer(unique("viewrls_outer_"), f.schema)
	testenv.ForgetStorage(t, owner, outer.Name)
	outer.Table = "shapes_outer"
	for _, r := range prepareAll(t, owner, catalog(t, outer).Layer(outer.Name), builders...) {
		if r.Status != serving.Skipped || r.Reason != serving.ViewRowSecurity || r.Err != nil {
			t.Errorf("a view over the view: %+v, want skipped, reason %q", r, serving.ViewRowSecurity)
		}
	}

	// A materialized view is read whole: built.
	f.exec(t, `CREATE MATERIALIZED VIEW {s}.shapes_mat AS SELECT * FROM {s}.shapes`)
	f.exec(t, `GRANT SELECT ON {s}.shapes_mat TO geotoll_reader`)
	mat := shapesLayer(unique("viewrls_mat_"), f.schema)
	testenv.ForgetStorage(t, owner, mat.Name)
	mat.Table = "shapes_mat"
	for _, r := range prepareAll(t, owner, catalog(t, mat).Layer(mat.Name), builders...) {
		if r.Status != serving.Built || r.Err != nil {
			t.Errorf("a materialized view: %+v, want built", r)
		}
	}
}

// TestPrepareRevokesStorageRetiredBefore: a rebuild retires the storage
// it replaces, which stays readable for Options.Retain so that a server
// that has not re-read the registry is not disturbed. Once the table's
// row security filters the read role, the storage retired before holds
// rows it must not see as much as the storage served: both are no longer
// readable by it.
func TestPrepareRevokesStorageRetiredBefore(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "rlsretired_")
	secrets(t, f)
	l := catalog(t, shapesLayer(name, f.schema)).Layer(name)
	build := func() map[string][3]string {
		t.Helper()
		for _, r := range prepareAll(t, owner, l, serving.Subdivide{}) {
			if r.Status != serving.Built {
				t.Fatalf("%+v, want built", r)
			}
		}
		return registry(t, owner, name)
	}
	first := build()
	f.exec(t, `INSERT INTO {s}.shapes VALUES (40, 's40', ST_MakeEnvelope(1000, 30000, 4000, 33000, 3857))`)
	second := build()
	for rel := range first {
		if _, ok := second[rel]; ok {
			t.Fatalf("%s served after the rebuild", rel)
		}
		if !readable(t, owner, rel) {
			t.Fatalf("%s, retired by the rebuild, is not readable: the test shows nothing", rel)
		}
	}

	f.exec(t, `ALTER TABLE {s}.shapes ENABLE ROW LEVEL SECURITY`)
	f.exec(t, `CREATE POLICY even ON {s}.shapes FOR SELECT TO geotoll_reader USING (id % 2 = 0)`)
	for _, r := range prepareAll(t, owner, l, serving.Subdivide{}) {
		if r.Status != serving.Removed || r.Reason != serving.RowSecurity || r.Err != nil {
			t.Errorf("row security: %+v, want removed, reason %q", r, serving.RowSecurity)
		}
	}
	for _, gen := range []map[string][3]string{first, second} {
		for rel := range gen {
			if readable(t, owner, rel) {
				t.Errorf("row security: the read role may still read %s, built from every row", rel)
			}
		}
	}
}

// TestPrepareRefusesAViewThatDependsOnItsReader: a view may filter by
// who reads it without row security — by CURRENT_USER and its kin, a
// privilege check, a setting, or a function of its own that may do any
// of these. prepare reads it as the schema owner: storage would show the
// read role the owner's rows. It builds nothing from such a view, or a
// view over one (Reason RoleDependentView), retires what it built before
// the view changed, and the layer's tiles read the view. A view naming a
// column "user", a string 'CURRENT_USER' or an extension's function is
// built.
func TestPrepareRefusesAViewThatDependsOnItsReader(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "viewrole_")
	secrets(t, f)
	f.exec(t, `ALTER TABLE {s}.shapes ADD COLUMN tenant text, ADD COLUMN "user" text`)
	f.exec(t, `UPDATE {s}.shapes SET tenant = CASE WHEN id < 5 THEN 'geotoll_reader' ELSE current_user END`)
	f.exec(t, `CREATE FUNCTION {s}.tenant() RETURNS text LANGUAGE sql STABLE AS 'SELECT current_user::text'`)
	views := map[string]string{
		"by_current_user": `WHERE tenant = CURRENT_USER`,
		"by_session_user": `WHERE tenant = session_user`,
		"by_user":         `WHERE tenant = user`,
		"by_privilege":    `WHERE has_table_privilege('{s}.shapes', 'UPDATE')`,
		"by_setting":      `WHERE tenant = current_setting('geotoll.tenant', true)`,
		"by_function":     `WHERE tenant = {s}.tenant()`,
		"by_quoted_name":  `WHERE tenant = "current_user"()`,
		"by_settings":     `WHERE tenant IN (SELECT setting FROM pg_settings WHERE name = 'application_name')`,
		"by_search_path":  `WHERE tenant = current_schema()`,
		"by_schema":       `WHERE tenant = current_schema`,
		"apostrophe":      `WHERE tenant IN (SELECT o."owner's" FROM (SELECT CURRENT_USER::text AS "owner's") AS o)`,
		"plain":           `WHERE "user" IS DISTINCT FROM 'CURRENT_USER' AND name <> 'ADMIN USER' AND ST_Area(geom) > 0`,
	}
	for v, where := range views {
		f.exec(t, `CREATE VIEW {s}.`+v+` AS SELECT id, name, geom, "user" FROM {s}.shapes `+where)
		f.exec(t, `GRANT SELECT ON {s}.`+v+` TO geotoll_reader`)
	}
	f.exec(t, `CREATE VIEW {s}.over_function AS SELECT * FROM {s}.by_function`)
	f.exec(t, `GRANT SELECT ON {s}.over_function TO geotoll_reader`)
	for _, c := range []struct {
		pool *pgxpool.Pool
		want int
	}{{owner, 35}, {testenv.ReadPool(t), 5}} {
		var n int
		if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{f.schema, "by_current_user"}.Sanitize()).Scan(&n); err != nil || n != c.want {
			t.Fatalf("the view shows %d rows (%v), want %d: the test shows nothing", n, err, c.want)
		}
	}
	for v := range views {
		if v == "plain" {
			continue
		}
		t.Run(v, func(t *testing.T) {
			l := unique("viewrole_" + v + "_")
			testenv.ForgetStorage(t, owner, l)
			wantViewSkipped(t, owner, f, l, v, serving.RoleDependentView)
		})
	}
	t.Run("over_function", func(t *testing.T) {
		l := unique("viewrole_over_")
		testenv.ForgetStorage(t, owner, l)
		wantViewSkipped(t, owner, f, l, "over_function", serving.RoleDependentView)
	})

	l := shapesLayer(name, f.schema)
	l.Table = "plain"
	cat := catalog(t, l)
	builders := []serving.Builder{serving.Overview{}, serving.Subdivide{}}
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Built || r.Err != nil {
			t.Fatalf("a view of no role: %+v, want built", r)
		}
	}
	before := registry(t, owner, name)
	f.exec(t, `CREATE OR REPLACE VIEW {s}.plain AS SELECT id, name, geom, "user" FROM {s}.shapes WHERE tenant = current_user`)
	for _, r := range prepareAll(t, owner, cat.Layer(name), builders...) {
		if r.Status != serving.Removed || r.Reason != serving.RoleDependentView || r.Err != nil {
			t.Errorf("the view filtering by current_user: %+v, want removed, reason %q", r, serving.RoleDependentView)
		}
	}
	wantWithdrawn(t, owner, name, before, "the view filtering by current_user")
}
