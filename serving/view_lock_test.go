package serving_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/serving"
)

// A view whose owner may read its table by column grants only — which a
// read, and so prepare, is content with — cannot be locked (LOCK asks for
// table privileges, the view owner's on every table the view reads): the
// build goes on without the lock, as it did before there was one, and the
// layer's storage is built.
func TestPrepareBuildsAViewItCannotLock(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "viewlock_")
	role := unique("serving_test_role_")
	var me string
	if err := owner.QueryRow(t.Context(), `SELECT current_user`).Scan(&me); err != nil {
		t.Fatal(err)
	}
	quoted := pgx.Identifier{role}.Sanitize()
	f.exec(t, `CREATE ROLE `+quoted+` NOLOGIN`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, sql := range []string{`GRANT ` + quoted + ` TO ` + pgx.Identifier{me}.Sanitize(), `DROP OWNED BY ` + quoted + ` CASCADE`, `DROP ROLE ` + quoted} {
			if _, err := owner.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	f.exec(t, `GRANT `+quoted+` TO `+pgx.Identifier{me}.Sanitize())
	f.exec(t, `GRANT USAGE, CREATE ON SCHEMA {s} TO `+quoted)
	f.exec(t, `GRANT SELECT ON {s}.polys TO `+quoted)
	// The table belongs to the other role, which lets the schema owner
	// read its columns, not the table.
	err := pgx.BeginFunc(t.Context(), owner, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`SET LOCAL ROLE ` + quoted,
			`CREATE TABLE ` + pgx.Identifier{f.schema, "held"}.Sanitize() + ` AS SELECT id, name, geom FROM ` + pgx.Identifier{f.schema, "polys"}.Sanitize(),
			`GRANT SELECT (id, name, geom) ON ` + pgx.Identifier{f.schema, "held"}.Sanitize() + ` TO ` + pgx.Identifier{me}.Sanitize(),
		} {
			if _, err := tx.Exec(t.Context(), sql); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// No longer a member: the schema owner holds the column grants only.
	f.exec(t, `REVOKE `+quoted+` FROM `+pgx.Identifier{me}.Sanitize())
	f.exec(t, `CREATE VIEW {s}.held_view AS SELECT id, name, geom FROM {s}.held`)
	f.exec(t, `GRANT SELECT ON {s}.held_view TO geotoll_reader`)
	l := shapesLayer(name, f.schema)
	l.Table = "held_view"
	for _, r := range prepareAll(t, owner, catalog(t, l).Layer(name), serving.Overview{}, serving.Subdivide{}) {
		if r.Status != serving.Built || r.Err != nil {
			t.Errorf("%s: %+v, want built", r.Builder, r)
		}
	}
}
