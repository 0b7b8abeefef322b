package serving_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// unique returns a name no other test uses: layer names and fixture
// schemas.
func unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// catalog builds a catalog of layers.
func catalog(t testing.TB, layers ...tiles.Layer) *tiles.Catalog {
	t.Helper()
	c, err := tiles.NewCatalog(layers)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// placesLayer serves the demo places under a name of its own, so that its
// storage is this test's alone.
func placesLayer(name string) tiles.Layer {
	return tiles.Layer{
		Name: name, Table: "geotoll.places", GeometryColumn: "geom_3857", SRID: 3857,
		IDColumn: "id", Properties: []string{"name", "kind", "city", "rank"},
		GeometryKind: tiles.KindPoint, OrderBy: []string{"rank"}, MaxFeatures: 20000,
		// Clustering a whole z0 tile in the query (before prepare) reads
		// every row: on a loaded machine, more than the default 2 s.
		StatementTimeout: 30 * time.Second,
	}
}

// fixture is a schema of this test's own with a copy of part of the demo
// data that the test may change; dropped when the test ends.
type fixture struct {
	owner  *pgxpool.Pool
	schema string
}

func newFixture(t testing.TB, owner *pgxpool.Pool, grant bool) *fixture {
	t.Helper()
	f := &fixture{owner: owner, schema: unique("serving_test_")}
	f.exec(t, `CREATE SCHEMA {s}`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{f.schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop fixture: %v", err)
		}
	})
	f.exec(t, `CREATE TABLE {s}.pts AS SELECT id, name, rank, geom_3857 AS geom FROM geotoll.places WHERE id % 10 = 0`)
	f.exec(t, `CREATE TABLE {s}.polys AS SELECT id, name, population, geom_3857 AS geom FROM geotoll.districts`)
	f.exec(t, `CREATE INDEX ON {s}.pts USING gist (geom)`)
	f.exec(t, `CREATE INDEX ON {s}.polys USING gist (geom)`)
	f.exec(t, `ANALYZE {s}.pts`)
	f.exec(t, `ANALYZE {s}.polys`)
	if grant {
		f.exec(t, `GRANT USAGE ON SCHEMA {s} TO geotoll_reader`)
		f.exec(t, `GRANT SELECT ON {s}.pts, {s}.polys TO geotoll_reader`)
	}
	return f
}

// setup gives a test the owner's pool, a fixture (readable by the read role
// when grant) and a layer name of its own whose storage is dropped at the
// end.
func setup(t testing.TB, grant bool, prefix string) (*pgxpool.Pool, *fixture, string) {
	t.Helper()
	owner := testenv.Pool(t)
	f := newFixture(t, owner, grant)
	name := unique(prefix)
	testenv.ForgetStorage(t, owner, name)
	return owner, f, name
}

func (f *fixture) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	sql = strings.ReplaceAll(sql, "{s}", pgx.Identifier{f.schema}.Sanitize())
	if _, err := f.owner.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("fixture %q: %v", sql, err)
	}
}

// one runs Prepare with one builder (Overview unless o names another) and
// returns its result.
func one(t testing.TB, pool *pgxpool.Pool, l *tiles.Layer, o serving.Options) serving.Result {
	t.Helper()
	if o.Builders == nil {
		o.Builders = []serving.Builder{serving.Overview{}}
	}
	res := prepareResults(t, pool, []*tiles.Layer{l}, o)
	if len(res) != 1 {
		t.Fatalf("Prepare: %d results, want 1 (one builder): %+v", len(res), res)
	}
	return res[0]
}

// prepareResults runs Prepare on layers and returns its results but the
// drop of retired storage (other tests' old storage).
func prepareResults(t testing.TB, pool *pgxpool.Pool, layers []*tiles.Layer, o serving.Options) []serving.Result {
	t.Helper()
	return slices.DeleteFunc(serving.Prepare(t.Context(), pool, layers, o),
		func(r serving.Result) bool { return r.Builder == serving.Retired })
}

// served returns the table (in tiles.ServingSchema) the registry names
// for a layer's relation of stable name rel (serving.RelationName).
func served(t *testing.T, pool *pgxpool.Pool, layer, rel string) string {
	t.Helper()
	var table string
	err := pool.QueryRow(t.Context(), `SELECT relation FROM geotoll_serving.storage
		WHERE layer = $1 AND left(relation, length($2) + 2) = $2 || '_v'`, layer, rel).Scan(&table)
	if err != nil {
		t.Fatalf("the table of %s: %v", rel, err)
	}
	return table
}

// registry reads a layer's registry rows: relation → (built_at, checked_at,
// table oid).
func registry(t *testing.T, pool *pgxpool.Pool, layer string) map[string][3]string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT relation, built_at::text, checked_at::text, to_regclass(format('%I.%I', 'geotoll_serving', relation))::oid::text
		FROM geotoll_serving.storage WHERE layer = $1`, layer)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	var rel string
	var v [3]string
	if _, err := pgx.ForEachRow(rows, []any{&rel, &v[0], &v[1], &v[2]}, func() error { out[rel] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrepareIsIdempotentAndSeesChanges: a second run with nothing changed
// builds nothing (same tables, same built_at, a newer checked_at); an
// insert, an update and a delete in the source each make the next run
// rebuild; so does a change of the layer's settings.
func TestPrepareIsIdempotentAndSeesChanges(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "pts_")
	base := tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
		Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}}
	l := catalog(t, base).Layer(name)

	r := one(t, owner, l, serving.Options{})
	if r.Status != serving.Built || r.Relations != 13 || r.Rows == 0 || r.SourceRows != 24000 || r.Err != nil { // z0–z12
		t.Fatalf("first run: %+v", r)
	}
	before := registry(t, owner, name)
	if len(before) != 13 {
		t.Fatalf("registry holds %d relations, want 13: %v", len(before), before)
	}

	r = one(t, owner, l, serving.Options{})
	after := registry(t, owner, name)
	if r.Status != serving.Unchanged || r.Err != nil {
		t.Fatalf("second run: %+v, want unchanged", r)
	}
	for rel, b := range before {
		a := after[rel]
		if a[0] != b[0] || a[2] != b[2] || a[1] <= b[1] {
			t.Errorf("%s: built_at %s → %s, checked_at %s → %s, oid %s → %s: want the same table, checked again",
				rel, b[0], a[0], b[1], a[1], b[2], a[2])
		}
	}

	// The same order spelt otherwise is the same build: nothing to do.
	respelt := base
	respelt.OrderBy = []string{"rank ASC", "id"}
	if r := one(t, owner, catalog(t, respelt).Layer(name), serving.Options{}); r.Status != serving.Unchanged || r.Err != nil {
		t.Errorf("order_by %q after %q: %+v, want unchanged", respelt.OrderBy, base.OrderBy, r)
	}

	for _, change := range []string{
		`INSERT INTO {s}.pts SELECT 99999999, 'new', 1, ST_SetSRID(ST_MakePoint(0, 0), 3857)`,
		`UPDATE {s}.pts SET rank = rank + 1 WHERE id = 10`,
		`DELETE FROM {s}.pts WHERE id = 20`,
	} {
		f.exec(t, change)
		if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
			t.Errorf("after %q: %+v, want built", change, r)
		}
		if r := one(t, owner, l, serving.Options{}); r.Status != serving.Unchanged {
			t.Errorf("after %q, a second run: %+v, want unchanged", change, r)
		}
	}

	// Other settings, other overviews: a finer cluster grid rebuilds.
	finer := base
	finer.Generalize.ClusterPixels = 2
	if r := one(t, owner, catalog(t, finer).Layer(name), serving.Options{}); r.Status != serving.Built {
		t.Errorf("after a settings change: %+v, want built", r)
	}
	// Overviews turned off: the storage goes.
	off := base
	off.Overviews.Off = true
	if r := one(t, owner, catalog(t, off).Layer(name), serving.Options{}); r.Status != serving.Removed || r.Err != nil {
		t.Errorf("overviews off: %+v, want removed", r)
	}
	if n := len(registry(t, owner, name)); n != 0 {
		t.Errorf("%d registry rows left after removal", n)
	}
}

// TestPrepareRefusesWhatTheReaderCannotRead: an overview is readable by
// geotoll_reader, so prepare never copies a table the reader may not read.
func TestPrepareRefusesWhatTheReaderCannotRead(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, false, "hidden_")
	l := catalog(t, tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint}).Layer(name)
	r := one(t, owner, l, serving.Options{})
	if r.Status != serving.Failed || r.Err == nil || !strings.Contains(r.Err.Error(), "geotoll_reader") {
		t.Fatalf("%+v, want a failure naming the read role", r)
	}
	if n := len(registry(t, owner, name)); n != 0 {
		t.Errorf("%d relations recorded for a refused layer", n)
	}
}

// TestPolygonOverviews: every row a polygon in EPSG:3857 that the tile of
// its zoom holding its centre draws as a valid polygon (overviews are not
// repaired: ST_AsMVTGeom is), and the coarser the zoom the fewer (or as
// many) rows; the table's rows all reach z7.
func TestPolygonOverviews(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "polys_")
	l := catalog(t, tiles.Layer{Name: name, Table: f.schema + ".polys", GeometryColumn: "geom",
		Properties: []string{"name"}, OrderBy: []string{"population desc"}}).Layer(name) // kind read from the database
	r := one(t, owner, l, serving.Options{})
	if r.Status != serving.Built || r.Relations != 8 {
		t.Fatalf("%+v", r)
	}
	prev := int64(-1)
	for z := 0; z <= 7; z++ {
		rel := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "ov_z"+string(rune('0'+z))))}.Sanitize()
		var n, invalid, other int64
		err := owner.QueryRow(t.Context(), `
			SELECT count(*), count(*) FILTER (WHERE NOT ST_IsValid(m.g)),
			       count(*) FILTER (WHERE ST_SRID(o.geom) <> 3857 OR GeometryType(o.geom) NOT IN ('POLYGON', 'MULTIPOLYGON'))
			FROM `+rel+` AS o,
			     LATERAL (SELECT ST_Centroid(ST_Envelope(o.geom)) AS c) AS c,
			     LATERAL (SELECT ST_AsMVTGeom(o.geom, ST_TileEnvelope($1::int,
			                 floor((ST_X(c.c) + 20037508.342789244) / (40075016.68557849 / 2 ^ $1::int))::int,
			                 floor((20037508.342789244 - ST_Y(c.c)) / (40075016.68557849 / 2 ^ $1::int))::int)) AS g) AS m`, z).Scan(&n, &invalid, &other)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || invalid != 0 || other != 0 || n < prev {
			t.Errorf("z%d: %d rows (%d drawn invalid, %d not polygons in 3857), z%d had %d", z, n, invalid, other, z-1, prev)
		}
		prev = n
	}
	if prev != 1584 {
		t.Errorf("z7 holds %d districts, want all 1584", prev)
	}
}

// TestRebuildBesideAReader: a rebuild takes no lock a tile query holds or
// waits for. While a reader holds the served overview open (its ACCESS
// SHARE lock, as a running tile query does), a forced rebuild completes
// and names new tables; the old one stays readable and is listed as
// retired from the switch on (not from the build's start). A run past the
// retention leaves it while it is still read, and drops it (and forgets
// it) once the reader is gone.
func TestRebuildBesideAReader(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "gen_")
	l := catalog(t, tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
		Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}, Overviews: tiles.Overviews{MaxZoom: 2}}).Layer(name)
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Fatalf("first build: %+v", r)
	}
	old := served(t, owner, name, serving.RelationName(name, "ov_z1"))
	oldIdent := pgx.Identifier{tiles.ServingSchema, old}.Sanitize()

	reader, err := testenv.ReadPool(t).Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(context.Background()) }()
	var before int64
	if err := reader.QueryRow(t.Context(), `SELECT count(*) FROM `+oldIdent).Scan(&before); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a rebuild waiting for the reader would never end
	defer cancel()
	res := serving.Prepare(ctx, owner, []*tiles.Layer{l}, serving.Options{Force: true, Builders: []serving.Builder{serving.Overview{}}})
	if len(res) == 0 || res[0].Status != serving.Built {
		t.Fatalf("rebuild beside a reader: %+v", res)
	}
	now := served(t, owner, name, serving.RelationName(name, "ov_z1"))
	if now == old {
		t.Fatalf("the rebuild kept table %s", old)
	}
	var after int64
	if err := reader.QueryRow(t.Context(), `SELECT count(*) FROM `+oldIdent).Scan(&after); err != nil || after != before {
		t.Fatalf("the reader's table after the rebuild: %d rows, %v; want %d", after, err, before)
	}
	retired := func() bool {
		t.Helper()
		var n int
		if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM geotoll_serving.retired WHERE relation = $1 AND layer = $2`, old, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	exists := func(rel string) bool {
		t.Helper()
		var ok bool
		if err := owner.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !retired() {
		t.Fatalf("%s is not listed as retired", old)
	}
	var afterBuild bool
	if err := owner.QueryRow(t.Context(), `SELECT r.retired_at > s.built_at FROM geotoll_serving.retired AS r, geotoll_serving.storage AS s
		WHERE r.relation = $1 AND s.relation = $2`, old, now).Scan(&afterBuild); err != nil || !afterBuild {
		t.Errorf("%s retired at the build's start (%v): the grace would shrink by the build's time", old, err)
	}

	// Past the retention (its own rows backdated: the sweep of other
	// tests' storage keeps the default), but still read: left for a later
	// run.
	if _, err := owner.Exec(t.Context(), `UPDATE geotoll_serving.retired SET retired_at = retired_at - interval '1 hour' WHERE layer = $1`, name); err != nil {
		t.Fatal(err)
	}
	run := func(when string) {
		t.Helper()
		for _, r := range serving.Prepare(ctx, owner, []*tiles.Layer{l}, serving.Options{Builders: []serving.Builder{serving.Overview{}}}) {
			if r.Status == serving.Failed && r.Builder != serving.Retired { // other tests' storage is theirs
				t.Fatalf("a run %s failed: %+v", when, r)
			}
		}
	}
	run("beside the reader")
	if !exists(old) || !retired() {
		t.Fatalf("%s was dropped while a reader held it", old)
	}
	if err := reader.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	run("after the reader left")
	if exists(old) || retired() {
		t.Errorf("%s is still there (or listed) after the reader left and the retention passed", old)
	}
	if !exists(now) {
		t.Errorf("the served table %s was dropped", now)
	}
}

// TestPrepareSeesAnUpdateCommittedAfterANewerWrite: a run that reads the
// table between the commit of a newer write and the commit of an older
// transaction's UPDATE (an id is taken at the first write, not at commit)
// builds storage without the update; once the update is committed, the
// next run must rebuild, not find the storage current and serve the
// update's absence until some other write.
func TestPrepareSeesAnUpdateCommittedAfterANewerWrite(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "late_")
	l := catalog(t, tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
		Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}, Overviews: tiles.Overviews{MaxZoom: 2}}).Layer(name)
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Fatalf("first build: %+v", r)
	}
	table := pgx.Identifier{f.schema, "pts"}.Sanitize()
	older, err := owner.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = older.Rollback(context.Background()) }()
	// The first in order_by everywhere: its cell's representative at every zoom.
	if _, err := older.Exec(t.Context(), `UPDATE `+table+` SET rank = -1, name = 'late' WHERE id = 10`); err != nil {
		t.Fatal(err)
	}
	f.exec(t, `INSERT INTO {s}.pts SELECT 99999999, 'new', 1, ST_SetSRID(ST_MakePoint(0, 0), 3857)`)
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Fatalf("after the newer insert: %+v, want built", r)
	}
	if err := older.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := one(t, owner, l, serving.Options{})
	z2 := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "ov_z2"))}.Sanitize()
	// The overview stores the layer's columns under the names the tile
	// queries carry them under.
	nameCol := pgx.Identifier{l.CarriedColumns()[slices.Index(l.Columns(), "name")]}.Sanitize()
	var late int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM `+z2+` WHERE `+nameCol+` = 'late'`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if r.Status != serving.Built || late != 1 {
		t.Errorf("after the older UPDATE committed: %+v, and the z2 overview holds %d rows of it; want built, 1", r, late)
	}
}
