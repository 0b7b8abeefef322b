package serving

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/tiles"
)

// TestBuildSnapshotIsTakenOnceItsTableIsLocked: the build's transaction
// takes its snapshot only once it holds its table's lock, so it copies
// what a transaction holding the table then committed. Here a
// transaction truncates the table and fills it again (TRUNCATE holds
// ACCESS EXCLUSIVE, and is not MVCC-safe: an older snapshot sees the
// table empty) while the build waits for its lock: the build copies every
// row. It failed when the build's first statement (a SELECT setting jit
// off) took the snapshot before the lock: 0 rows built.
func TestBuildSnapshotIsTakenOnceItsTableIsLocked(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	l := catalogLayer(t, base)
	o := Options{Builders: []Builder{Overview{}}}.withDefaults()
	table := l.TableIdent().Sanitize()
	var rows int64
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&rows); err != nil || rows == 0 {
		t.Fatalf("fixture rows: %d, %v", rows, err)
	}
	cols := append(l.Columns(), l.GeometryColumn)
	src, err := inspect(t.Context(), owner, l, o.ReaderRole, cols)
	if err != nil {
		t.Fatal(err)
	}

	reload, err := owner.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reload.Rollback(context.Background()) }()
	for _, sql := range []string{
		`CREATE TEMPORARY TABLE kept ON COMMIT DROP AS SELECT * FROM ` + table,
		`TRUNCATE ` + table,
		`INSERT INTO ` + table + ` SELECT * FROM kept`,
	} {
		if _, err := reload.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var r Result
		targets := Overview{}.Targets(l, tiles.KindPoint)
		err := withLayerLock(t.Context(), owner, l.Name, func(conn *pgxpool.Conn) error {
			return pgx.BeginTxFunc(t.Context(), conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
				return buildTx(t.Context(), tx, l, tiles.KindPoint, Overview{}, targets, &src, cols, o, &r)
			})
		})
		done <- outcome{r, err}
	}()
	// The build waits for the table's lock, behind the reload.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := owner.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE NOT granted AND relation = $1::regclass)`, table).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("the build ended before the reload committed: %+v, %v", o.r, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the build never waited for the table's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := reload.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.r.Status != Built {
		t.Fatalf("build: %+v, %v", got.r, got.err)
	}
	var z0 string
	if err := owner.QueryRow(t.Context(), `SELECT relation FROM geotoll_serving.storage
		WHERE layer = $1 AND left(relation, length($2) + 2) = $2 || '_v'`, l.Name, RelationName(l.Name, "ov_z0")).Scan(&z0); err != nil {
		t.Fatal(err)
	}
	var counted int64
	if err := owner.QueryRow(t.Context(), `SELECT coalesce(sum(point_count), 0) FROM `+pgx.Identifier{tiles.ServingSchema, z0}.Sanitize()).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != rows {
		t.Errorf("the z0 overview counts %d points, want the table's %d (committed before the build held its lock)", counted, rows)
	}
}
