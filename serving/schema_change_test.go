package serving

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// builtLayer builds the overviews of a lockFixture layer and returns the
// owner's pool, the layer (in a catalog of its own) and the catalog.
func builtLayer(t *testing.T) (*pgxpool.Pool, *tiles.Layer, *tiles.Catalog) {
	t.Helper()
	owner, base := lockFixture(t)
	cat, err := tiles.NewCatalog([]tiles.Layer{base})
	if err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(base.Name)
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Fatalf("first build: %+v", r)
	}
	return owner, l, cat
}

// TestPrepareRebuildsAfterAColumnChangeThatWritesNoRow: a schema change
// that changes what the layer's column holds without writing a row —
// the column renamed and another added under its name with a DEFAULT
// (stored once in the catalog), or dropped and added again — leaves the
// count and every xmin as they were. prepare rebuilds the storage all
// the same (the signature's columns' fingerprint moved), the overviews
// hold the new values, and the run after finds them current.
func TestPrepareRebuildsAfterAColumnChangeThatWritesNoRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change []string
		want   string // every row's name after the change ("" for NULL)
	}{
		{"renamed, and added with a default", []string{
			`ALTER TABLE {t} RENAME COLUMN name TO name_old`,
			`ALTER TABLE {t} ADD COLUMN name text DEFAULT 'NEW'`,
		}, "NEW"},
		{"dropped and added again", []string{
			`ALTER TABLE {t} DROP COLUMN name`,
			`ALTER TABLE {t} ADD COLUMN name text`,
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			owner, l, cat := builtLayer(t)
			table := l.TableIdent().Sanitize()
			for _, s := range append(tc.change, `GRANT SELECT ON {t} TO geotoll_reader`) {
				if _, err := owner.Exec(t.Context(), strings.ReplaceAll(s, "{t}", table)); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
				t.Fatalf("after the change: %s %q %v, want built", r.Status, r.Reason, r.Err)
			}
			if _, err := cat.Refresh(t.Context(), testenv.ReadPool(t)); err != nil {
				t.Fatal(err)
			}
			src := l.Source(0)
			if src.Builder != tiles.BuilderOverview {
				t.Fatalf("z0 reads %q (%v), want the overview", src.Builder, src.Relation)
			}
			// c1 holds the layer's first property, name (Params.SourceColumns).
			var stale, rows int
			if err := owner.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE coalesce(c1, '') <> $1), count(*) FROM `+src.Relation.Sanitize(),
				tc.want).Scan(&stale, &rows); err != nil {
				t.Fatal(err)
			}
			if rows == 0 || stale > 0 {
				t.Errorf("z0's overview %v: %d of %d rows hold a name other than %q", src.Relation, stale, rows, tc.want)
			}
			if r := prepareOne(t, owner, l, Options{}); r.Status != Unchanged || r.Err != nil {
				t.Errorf("the run after: %s %q %v, want unchanged", r.Status, r.Reason, r.Err)
			}
		})
	}
}

// TestPrepareRebuildsStorageRecordedInAnOlderSignatureForm: storage
// recorded with the signature of an older prepare ("rows:newest:writers",
// before the columns' fingerprint) cannot tell a column change: prepare
// compares forms as written and rebuilds it, once.
func TestPrepareRebuildsStorageRecordedInAnOlderSignatureForm(t *testing.T) {
	t.Parallel()
	owner, l, _ := builtLayer(t)
	tag, err := owner.Exec(t.Context(), `UPDATE geotoll_serving.storage
		SET source_signature = regexp_replace(source_signature, ':[^:]*$', '') WHERE layer = $1`, l.Name)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("old form: %v, %d rows", err, tag.RowsAffected())
	}
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Errorf("storage of the old form: %s %q %v, want built", r.Status, r.Reason, r.Err)
	}
	var sigs []string
	rows, err := owner.Query(t.Context(), `SELECT source_signature FROM geotoll_serving.storage WHERE layer = $1`, l.Name)
	if err == nil {
		sigs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sigs {
		if strings.Count(s, ":") != 3 {
			t.Errorf("recorded %q, want rows:newest:writers:columns", s)
		}
	}
	if r := prepareOne(t, owner, l, Options{}); r.Status != Unchanged || r.Err != nil {
		t.Errorf("the run after: %s %q %v, want unchanged", r.Status, r.Reason, r.Err)
	}
}

// TestPrepareRebuildsStorageWhoseRelationIsGone: a registry row whose
// relation was dropped (by hand, or lost by a restore) names nothing to
// serve. prepare finds the storage not current and builds it again; the
// run after finds it current.
func TestPrepareRebuildsStorageWhoseRelationIsGone(t *testing.T) {
	t.Parallel()
	owner, l, cat := builtLayer(t)
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	gone := l.Source(0).Relation
	if _, err := owner.Exec(t.Context(), `DROP TABLE `+gone.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Fatalf("after %v was dropped: %s %q %v, want built", gone, r.Status, r.Reason, r.Err)
	}
	rels, _ := layerRelations(t, owner, l.Name)
	for rel := range rels {
		var exists bool
		if err := owner.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()).Scan(&exists); err != nil || !exists {
			t.Errorf("the registry names %s: exists %v, %v", rel, exists, err)
		}
	}
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	if src := l.Source(0); src.Builder != tiles.BuilderOverview || src.Relation.Sanitize() == gone.Sanitize() {
		t.Errorf("z0 reads %q %v, want the overview built again", src.Builder, src.Relation)
	}
	if r := prepareOne(t, owner, l, Options{}); r.Status != Unchanged || r.Err != nil {
		t.Errorf("the run after: %s %q %v, want unchanged", r.Status, r.Reason, r.Err)
	}
}

// TestPrepareOnAnUnmigratedDatabaseSaysToMigrate: a layer that fails
// before any builder runs (here: neither its table nor the registry
// exists, in a database the migrations never set up) is logged as an
// error, as a builder's failure is, so that `prepare -every` under a log
// collector shows it; the error, and the drop of retired storage's,
// says to run `geotoll migrate` first.
func TestPrepareOnAnUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	cfg := testenv.PoolConfig(t, testenv.DatabaseURL(t))
	cfg.ConnConfig.Database = "postgres" // the server's own: no migration ran there
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var absent bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass('geotoll_serving.storage') IS NULL`).Scan(&absent); err != nil || !absent {
		if testenv.Required() {
			t.Fatalf("database postgres is no unmigrated database here (registry absent %v, %v)", absent, err)
		}
		t.Skipf("database postgres: registry absent %v, %v", absent, err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	l := catalogLayer(t, tiles.Layer{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", Properties: []string{"name"}})
	results := Prepare(context.Background(), pool, []*tiles.Layer{l}, Options{Logger: log})
	if len(results) != 2 {
		t.Fatalf("results %+v, want the layer's and the drop's", results)
	}
	for _, r := range results {
		if r.Status != Failed || r.Err == nil || !strings.Contains(r.Err.Error(), "run `geotoll migrate` first") {
			t.Errorf("%s %s: %s %v, want failed, saying to migrate", r.Layer, r.Builder, r.Status, r.Err)
		}
	}
	var line string
	for _, s := range strings.Split(logged.String(), "\n") {
		if strings.Contains(s, "layer=places") {
			line = s
		}
	}
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "status=failed") || !strings.Contains(line, "geotoll migrate") {
		t.Errorf("the layer's failure logged %q, want an error saying to migrate; log:\n%s", line, logged.String())
	}
}

// TestRefusedLayerWithAGoneRelationIsWithdrawn: a layer whose table is
// refused (row security) has its storage withdrawn, its read role's
// grants revoked; a relation of it that is gone has no grant to take,
// and does not fail the withdrawal.
func TestRefusedLayerWithAGoneRelationIsWithdrawn(t *testing.T) {
	t.Parallel()
	owner, l, cat := builtLayer(t)
	if _, err := cat.Refresh(t.Context(), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`DROP TABLE ` + l.Source(0).Relation.Sanitize(),
		`ALTER TABLE ` + l.TableIdent().Sanitize() + ` ENABLE ROW LEVEL SECURITY`,
	} {
		if _, err := owner.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if r := prepareOne(t, owner, l, Options{}); r.Status != Removed || r.Reason != RowSecurity || r.Err != nil {
		t.Errorf("refused: %s %q %v, want removed (row security)", r.Status, r.Reason, r.Err)
	}
	if rels, _ := layerRelations(t, owner, l.Name); len(rels) != 0 {
		t.Errorf("the registry still names %v", rels)
	}
}
