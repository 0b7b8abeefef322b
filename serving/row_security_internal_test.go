package serving

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/tiles"
)

// TestBuildChecksRowSecurityInItsSnapshot: a run checked the table before
// it took the layer's lock, and row security was enabled on it since. The
// build's transaction checks again, in the snapshot it would copy from:
// it builds nothing, and withdraws the storage built before (retired, and
// no longer readable by the read role).
func TestBuildChecksRowSecurityInItsSnapshot(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	l := catalogLayer(t, base)
	o := Options{Builders: []Builder{Overview{}}}.withDefaults()
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Fatalf("first build: %+v", r)
	}
	before, _ := layerRelations(t, owner, l.Name)
	cols := append(l.Columns(), l.GeometryColumn)
	src, err := inspect(t.Context(), owner, l, o.ReaderRole, cols) // the check before the lock
	if err != nil || src.rowSecurity {
		t.Fatalf("inspect: %+v, %v", src, err)
	}
	if _, err := owner.Exec(t.Context(), "ALTER TABLE "+l.TableIdent().Sanitize()+" ENABLE ROW LEVEL SECURITY"); err != nil {
		t.Fatal(err)
	}
	var r Result
	targets := Overview{}.Targets(l, tiles.KindPoint)
	err = withLayerLock(t.Context(), owner, l.Name, func(conn *pgxpool.Conn) error {
		return pgx.BeginTxFunc(t.Context(), conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			return buildTx(t.Context(), tx, l, tiles.KindPoint, Overview{}, targets, &src, cols, o, &r)
		})
	})
	if err != nil || r.Status != Removed || r.Reason != RowSecurity || r.Err != nil {
		t.Errorf("build after row security was enabled: %+v, %v; want removed, reason %q", r, err, RowSecurity)
	}
	if after, retired := layerRelations(t, owner, l.Name); len(after) != 0 || retired != len(before) {
		t.Errorf("the registry holds %v (%d retired), want none and %d retired", after, retired, len(before))
	}
	for rel := range before {
		var readable bool
		if err := owner.QueryRow(t.Context(), `SELECT has_table_privilege($1, $2::regclass, 'SELECT')`,
			o.ReaderRole, pgx.Identifier{tiles.ServingSchema, rel}.Sanitize()).Scan(&readable); err != nil || readable {
			t.Errorf("%s readable by %s: %v, %v", rel, o.ReaderRole, readable, err)
		}
	}
}

// TestBuildChecksAViewInItsSnapshot: as for a table, the build's
// transaction checks a view again in the snapshot it would copy from,
// having locked the view, and with it the tables it reads: row security
// enabled on such a table since the check before the lock refuses the
// view (Reason ViewRowSecurity), and no ALTER TABLE enabling it could
// have committed between the lock and the snapshot.
func TestBuildChecksAViewInItsSnapshot(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	table := pgx.Identifier(strings.Split(base.Table, "."))
	view := pgx.Identifier{table[0], "pts_view"}
	for _, sql := range []string{
		"CREATE VIEW " + view.Sanitize() + " AS SELECT * FROM " + table.Sanitize(),
		"GRANT SELECT ON " + view.Sanitize() + " TO " + DefaultReaderRole,
	} {
		if _, err := owner.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	base.Table = view[0] + "." + view[1]
	l := catalogLayer(t, base)
	o := Options{Builders: []Builder{Overview{}}}.withDefaults()
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Fatalf("first build: %+v", r)
	}
	cols := append(l.Columns(), l.GeometryColumn)
	src, err := inspect(t.Context(), owner, l, o.ReaderRole, cols) // the check before the lock
	if err != nil || src.relkind != "v" || src.viewRowSecurity {
		t.Fatalf("inspect: %+v, %v", src, err)
	}
	if _, err := owner.Exec(t.Context(), "ALTER TABLE "+table.Sanitize()+" ENABLE ROW LEVEL SECURITY"); err != nil {
		t.Fatal(err)
	}
	var r Result
	var locked bool
	targets := Overview{}.Targets(l, tiles.KindPoint)
	err = withLayerLock(t.Context(), owner, l.Name, func(conn *pgxpool.Conn) error {
		return pgx.BeginTxFunc(t.Context(), conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			if err := buildTx(t.Context(), tx, l, tiles.KindPoint, Overview{}, targets, &src, cols, o, &r); err != nil {
				return err
			}
			// Refused, the build read no row: a lock on the table is the view's.
			return tx.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_locks
				WHERE pid = pg_backend_pid() AND relation = $1::regclass AND mode = 'AccessShareLock' AND granted)`,
				table.Sanitize()).Scan(&locked)
		})
	})
	if err != nil || r.Status != Removed || r.Reason != ViewRowSecurity || r.Err != nil {
		t.Errorf("build after row security was enabled under the view: %+v, %v; want removed, reason %q", r, err, ViewRowSecurity)
	}
	if !locked {
		t.Errorf("the build's transaction holds no lock on %s, which the view reads", table.Sanitize())
	}
}

// TestRowSecurityFiltersWhomPostgreSQLFilters: source.rowSecurity follows
// PostgreSQL's rules for the read role: row security on the table filters
// a role that is neither a superuser nor BYPASSRLS, unless it owns the
// table and security is not forced on the owner.
func TestRowSecurityFiltersWhomPostgreSQLFilters(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	l := catalogLayer(t, base)
	cols := append(l.Columns(), l.GeometryColumn)
	var self string
	var bypass bool
	if err := owner.QueryRow(t.Context(), `SELECT rolname, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&self, &bypass); err != nil {
		t.Fatal(err)
	}
	table := l.TableIdent().Sanitize()
	for _, step := range []struct {
		sql            string
		reader, itself bool // rowSecurity for the read role, and for the table's owner as the read role
	}{
		{"", false, false},
		{"ALTER TABLE " + table + " ENABLE ROW LEVEL SECURITY", true, false},
		{"ALTER TABLE " + table + " FORCE ROW LEVEL SECURITY", true, !bypass},
		{"ALTER TABLE " + table + " DISABLE ROW LEVEL SECURITY", false, false},
	} {
		if step.sql != "" {
			if _, err := owner.Exec(t.Context(), step.sql); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			role string
			want bool
		}{{DefaultReaderRole, step.reader}, {self, step.itself}} {
			src, err := inspect(t.Context(), owner, l, c.role, cols)
			if err != nil {
				t.Fatal(err)
			}
			if src.rowSecurity != c.want {
				t.Errorf("after %q, read by %s: row security %v, want %v", step.sql, c.role, src.rowSecurity, c.want)
			}
		}
	}
}

// TestForeignTableIsRefused: the read role reads a foreign table (and the
// foreign partitions or children of a parent) through its own user
// mapping, prepare through the schema owner's: storage is not built from
// one (Reason ForeignTable), though the read role may read its columns; a
// view, read through its owner's mapping whoever reads it, and a table are
// built. (What serving_source.sql reports as foreign is checked by hand
// with postgres_fdw, which the test database cannot install.)
func TestForeignTableIsRefused(t *testing.T) {
	t.Parallel()
	l := &tiles.Layer{Name: "remote", Table: "remote"}
	for _, c := range []struct {
		relkind string
		foreign bool // as sql/serving_source.sql reports it
		want    string
	}{{"f", true, ForeignTable}, {"p", true, ForeignTable}, {"r", true, ForeignTable}, {"v", false, ""}, {"r", false, ""}, {"p", false, ""}, {"m", false, ""}} {
		reason, err := source{relkind: c.relkind, foreign: c.foreign, readable: true}.refusal(l, DefaultReaderRole, []string{"id", "geom"})
		if reason != c.want || err != nil {
			t.Errorf("relkind %s, foreign %t: %q, %v; want %q", c.relkind, c.foreign, reason, err, c.want)
		}
	}
}
