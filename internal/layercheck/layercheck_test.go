package layercheck_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/layercheck"
	"github.com/geotoll/geotoll/internal/testenv"
)

// fixture creates, as the schema owner, a schema of tables that fit or
// break layers in every way the check knows, readable by the read role
// as each case needs, and beside it a schema the read role may not use;
// both are dropped when the test ends. It returns their names.
func fixture(t *testing.T) (s, closed string) {
	t.Helper()
	closed = testenv.Schema(t, "lc_closed_", func(closed string) []string {
		return []string{
			"CREATE TABLE " + closed + ".t (id int, geom geometry(Point, 3857))",
			"GRANT SELECT ON " + closed + ".t TO geotoll_reader",
		}
	})
	s = testenv.Schema(t, "lc_", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".good (id bigint PRIMARY KEY, name text, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".wgs (id int, geom geometry(Point, 4326))",
			"CREATE TABLE " + s + ".loose (id int, geom geometry)",
			"INSERT INTO " + s + ".loose VALUES (1, ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326))",
			"CREATE TABLE " + s + ".textgeom (id int, geom text)",
			"CREATE TABLE " + s + ".textid (id text, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".hidden (id int, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".partial (id int, secret text, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".checked (id int, geom geometry CHECK (ST_SRID(geom) = 4326))",
			"CREATE TABLE " + s + ".twogeom (id int, geom geometry(Point, 3857), centre geometry(Point, 4326))",
			// Two views no check may read: one sleeps a minute, the other
			// fails every read.
			"CREATE VIEW " + s + ".sleepy AS SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(0, 0), 3857) AS geom FROM pg_sleep(60)",
			"CREATE FUNCTION " + s + ".refuse() RETURNS boolean LANGUAGE plpgsql VOLATILE AS " +
				"$$BEGIN RAISE EXCEPTION 'a row of the layer was read'; END$$",
			"CREATE VIEW " + s + ".refusing AS SELECT 1::bigint AS id, ST_SetSRID(ST_MakePoint(0, 0), 3857) AS geom WHERE " + s + ".refuse()",
			"GRANT USAGE ON SCHEMA " + s + " TO geotoll_reader",
			"GRANT SELECT ON " + s + ".good, " + s + ".wgs, " + s + ".loose, " + s + ".textgeom, " + s + ".textid, " +
				s + ".checked, " + s + ".twogeom, " + s + ".sleepy, " + s + ".refusing TO geotoll_reader",
			"GRANT SELECT (id, geom) ON " + s + ".partial TO geotoll_reader",
		}
	})
	return s, closed
}

// The check, as the read role, of layers that fit their tables and of
// layers broken in each way it knows: every broken layer is named with
// what is wrong, and a fitting one is not named at all.
func TestCheck(t *testing.T) {
	t.Parallel()
	s, closed := fixture(t)
	reader := testenv.ReadPool(t)
	spec := func(table, geom string, srid int, id string, props ...string) layercheck.Spec {
		return layercheck.Spec{Layer: "layer " + table, Table: pgx.Identifier{s, table}, Geometry: geom, SRID: srid, ID: id, Properties: props}
	}
	for _, tc := range []struct {
		name string
		spec layercheck.Spec
		want string // "" when the layer fits
	}{
		{"fits", spec("good", "geom", 3857, "id", "name"), ""},
		{"fits without an id", spec("good", "geom", 3857, ""), ""},
		{"missing table", spec("nope", "geom", 3857, "id"), `table "` + s + `"."nope" does not exist`},
		{"missing schema", layercheck.Spec{Layer: "layer x", Table: pgx.Identifier{s + "_gone", "t"}, Geometry: "geom"}, "does not exist"},
		{"unqualified, not on the search path", layercheck.Spec{Layer: "layer good", Table: pgx.Identifier{"good"}, Geometry: "geom"},
			`table "good" does not exist (or is not on the search path of role "geotoll_reader")`},
		{"wrong geometry column", spec("good", "geom_3857", 3857, "id"), `geometry_column "geom_3857": no such column in "` + s + `"."good"`},
		{"wrong id column", spec("good", "geom", 3857, "gid"), `id_column "gid": no such column`},
		{"wrong property", spec("good", "geom", 3857, "id", "name", "colour"), `properties: column "colour": no such column`},
		{"wrong SRID", spec("wgs", "geom", 3857, "id"), `geometry_column "geom" has SRID 4326, not 3857`},
		{"SRID of a CHECK constraint", spec("checked", "geom", 3857, "id"), `geometry_column "geom" has SRID 4326, not 3857`},
		{"SRID of a CHECK constraint that fits", spec("checked", "geom", 4326, "id"), ""},
		{"undeclared SRID is not read from the rows", spec("loose", "geom", 3857, "id"), ""},
		{"a view that sleeps is not read", spec("sleepy", "geom", 3857, "id"), ""},
		{"a view whose every read fails is not read", spec("refusing", "geom", 3857, "id"), ""},
		{"not a geometry", spec("textgeom", "geom", 3857, "id"), `geometry_column "geom" is of type text, not geometry`},
		{"id not an integer", spec("textid", "geom", 3857, "id"), `id_column "id" is of type text; a feature id must be`},
		{"order_by of a missing column", layercheck.Spec{Layer: "layer good", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 3857, ID: "id",
			Properties: []string{"name"}, Order: []string{"name", "rank"}}, `order_by: column "rank": no such column`},
		{"order_by of a geometry", layercheck.Spec{Layer: "layer twogeom", Table: pgx.Identifier{s, "twogeom"}, Geometry: "geom", SRID: 3857, ID: "id",
			Order: []string{"centre"}}, ""},
		// A geofence layer answers a geometry property as GeoJSON.
		{"another geometry as a property", spec("twogeom", "geom", 3857, "id", "centre"), ""},
		{"no SELECT right", spec("hidden", "geom", 3857, "id"),
			`role "geotoll_reader" may not SELECT from "` + s + `"."hidden" (GRANT SELECT ON "` + s + `"."hidden" TO "geotoll_reader")`},
		{"columns granted, not the one named", spec("partial", "geom", 3857, "id", "secret"), `properties: column "secret": role "geotoll_reader" may not SELECT it`},
		{"columns granted, the ones named", spec("partial", "geom", 3857, "id"), ""},
		{"no USAGE on the schema", layercheck.Spec{Layer: "layer t", Table: pgx.Identifier{closed, "t"}, Geometry: "geom", SRID: 3857},
			`role "geotoll_reader" may not use schema "` + closed + `" (GRANT USAGE ON SCHEMA`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A check that read the sleeping view would run into this
			// deadline (or the reader's statement timeout) and fail.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := layercheck.New(tc.spec).Check(ctx, reader)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("a fitting layer: %v", err)
				}
				return
			}
			if !layercheck.IsMismatch(err) {
				t.Fatalf("error %v, want a mismatch", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.spec.Layer+": ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q, want it to name %q and say %q", msg, tc.spec.Layer, tc.want)
			}
		})
	}
}

// Several broken layers are all reported, each on its own line, and the
// fitting ones are not.
func TestCheckReportsEveryBrokenLayer(t *testing.T) {
	t.Parallel()
	s, _ := fixture(t)
	c := layercheck.New(
		layercheck.Spec{Layer: "a", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 3857, ID: "id"},
		layercheck.Spec{Layer: "b", Table: pgx.Identifier{s, "nope"}, Geometry: "geom"},
		layercheck.Spec{Layer: "c", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 4326, ID: "gid"},
	)
	err := c.Check(t.Context(), testenv.ReadPool(t))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "b: ") || !strings.HasPrefix(lines[1], "c: ") ||
		!strings.Contains(lines[1], "; ") {
		t.Fatalf("report %q: want b, then c with both of its faults", err)
	}
	if c.Len() != 3 {
		t.Errorf("Len %d", c.Len())
	}
}

// A database that cannot be asked is an error, not a verdict.
func TestCheckUnasked(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := layercheck.New(layercheck.Spec{Layer: "a", Table: pgx.Identifier{"t"}, Geometry: "g"}).Check(ctx, testenv.ReadPool(t))
	if err == nil || layercheck.IsMismatch(err) {
		t.Fatalf("a cancelled check: %v, want an error that is not a mismatch", err)
	}
}

// The recheck of a layer that is a view over a minute's sleep starts no
// statement that reads it: checked again and again, concurrently, every
// check answers, and no backend is left running a statement that names
// the view.
func TestRecheckStartsNoReadOfTheLayer(t *testing.T) {
	t.Parallel()
	s, _ := fixture(t)
	owner := testenv.Pool(t)
	t.Cleanup(func() { terminate(t, owner, s) })
	c := layercheck.New(layercheck.Spec{Layer: "sleepy", Table: pgx.Identifier{s, "sleepy"}, Geometry: "geom", SRID: 3857, ID: "id"})
	reader := testenv.ReadPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 4 {
		wg.Go(func() {
			for range 5 {
				errs <- c.Check(ctx, reader)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a recheck of the sleeping view: %v", err)
		}
	}
	if n := running(t, owner, s+".sleepy", s+`"."sleepy`); n > 0 {
		t.Fatalf("%d statements reading the view still run after the checks", n)
	}
}

// Checks that come while one runs start nothing of their own: they wait
// for its verdict. Their queries never overlap, and each runs under the
// checker's statement timeout.
func TestCheckOneAtATime(t *testing.T) {
	t.Parallel()
	s, _ := fixture(t)
	q := &watched{pool: testenv.ReadPool(t), release: make(chan struct{})}
	c := layercheck.New(layercheck.Spec{Layer: "nope", Table: pgx.Identifier{s, "nope"}, Geometry: "geom"})
	c.Timeout = 1500 * time.Millisecond
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- c.Check(t.Context(), q) })
	}
	// Let the first check in, give the others time to come, then let it
	// finish: the others must all have waited for it.
	deadline := time.Now().Add(10 * time.Second)
	for q.begun.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(q.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !layercheck.IsMismatch(err) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("check: %v, want the missing table", err)
		}
	}
	if n := q.begun.Load(); n < 1 || q.most.Load() != 1 {
		t.Errorf("%d transactions begun, at most %d at once; want one at a time", n, q.most.Load())
	}
	if got := q.timeout.Load(); got == nil || *got != "1500ms" {
		t.Errorf("statement_timeout in the check %v, want 1500ms", got)
	}
}

// watched is a Querier that counts the transactions begun and how many
// were open at once, holds the first until release is closed, and reads
// the statement timeout its caller's first query runs under.
type watched struct {
	pool    *pgxpool.Pool
	release chan struct{}

	begun, open, most atomic.Int32
	timeout           atomic.Pointer[string]
}

func (w *watched) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if w.begun.Add(1) == 1 {
		<-w.release
	}
	n := w.open.Add(1)
	for m := w.most.Load(); n > m && !w.most.CompareAndSwap(m, n); m = w.most.Load() {
	}
	tx, err := w.pool.BeginTx(ctx, opts)
	if err != nil {
		w.open.Add(-1)
		return nil, err
	}
	return &watchedTx{Tx: tx, w: w}, nil
}

type watchedTx struct {
	pgx.Tx
	w *watched
}

func (x *watchedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	var timeout string
	if err := x.Tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err == nil {
		x.w.timeout.CompareAndSwap(nil, &timeout)
	}
	return x.Tx.Query(ctx, sql, args...)
}

func (x *watchedTx) Rollback(ctx context.Context) error {
	defer x.w.open.Add(-1)
	return x.Tx.Rollback(ctx)
}

// running counts the backends running a statement that contains any of
// names.
func running(t *testing.T, owner *pgxpool.Pool, names ...string) int {
	t.Helper()
	var n int
	err := owner.QueryRow(t.Context(), `
		SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND pid <> pg_backend_pid() AND query ILIKE ANY ($1)`, likeAny(names)).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

func likeAny(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "%" + n + "%"
	}
	return out
}

// terminate ends every backend still running a statement of schema, so
// that a failed test leaves nothing running.
func terminate(t *testing.T, owner *pgxpool.Pool, schema string) {
	_, err := owner.Exec(context.WithoutCancel(t.Context()), `
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND strpos(query, $1) > 0`, schema)
	if err != nil {
		t.Errorf("terminate: %v", err)
	}
}

// Each spec's Verdict holds the last check that reached the database: the
// reasons of a layer that does not match, "" for one that does; a check
// that could not ask leaves them as they were.
func TestCheckRecordsVerdicts(t *testing.T) {
	t.Parallel()
	s, _ := fixture(t)
	var good, broken layercheck.Verdict
	specs := []layercheck.Spec{
		{Layer: "a", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 3857, ID: "id", Verdict: &good},
		{Layer: "c", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 4326, ID: "gid", Verdict: &broken},
	}
	if err := layercheck.New(specs...).Check(t.Context(), testenv.ReadPool(t)); !layercheck.IsMismatch(err) {
		t.Fatalf("check: %v, want a mismatch", err)
	}
	if good.Misfit() != "" || !strings.Contains(broken.Misfit(), "4326") || !strings.Contains(broken.Misfit(), "; ") {
		t.Fatalf("verdicts %q and %q: want none, then both of c's faults", good.Misfit(), broken.Misfit())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := layercheck.New(specs...).Check(ctx, testenv.ReadPool(t)); err == nil || layercheck.IsMismatch(err) {
		t.Fatalf("a cancelled check: %v", err)
	}
	if broken.Misfit() == "" {
		t.Error("a check that could not ask the database cleared a verdict")
	}
	specs[1].SRID = 3857
	specs[1].ID = "id"
	if err := layercheck.New(specs...).Check(t.Context(), testenv.ReadPool(t)); err != nil {
		t.Fatalf("check: %v", err)
	}
	if broken.Misfit() != "" {
		t.Errorf("a layer that matches again keeps %q", broken.Misfit())
	}
	var never *layercheck.Verdict
	if never.Misfit() != "" {
		t.Error("a nil Verdict (a layer never checked) misfits")
	}
}
