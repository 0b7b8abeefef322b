package migrations

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/geotoll/geotoll/internal/testenv"
)

// Replicas started together each migrate, and two that both found a
// migration pending would both apply it, the second failing on what the
// first created. With one pending (in a version table of its own, so
// that the schema's is not touched): Ups wait while another session holds
// the migration lock, and once it is released they apply it once between
// them, none failing.
func TestUpsWaitForTheMigrationLockAndApplyOnce(t *testing.T) {
	pool := testenv.Pool(t)
	ctx := t.Context()
	suffix := time.Now().UnixNano()
	table := fmt.Sprintf("public.geotoll_lock_test_%d", suffix)
	created := fmt.Sprintf("public.geotoll_lock_test_made_%d", suffix)
	fsys := fstest.MapFS{"00001_make.sql": {Data: []byte("-- +goose Up\nCREATE TABLE " + created + " (id int);\n-- +goose Down\nDROP TABLE " + created + ";\n")}}
	t.Cleanup(func() {
		for _, tb := range []string{table, created} {
			if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb); err != nil {
				t.Errorf("drop %s: %v", tb, err)
			}
		}
	})
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		t.Fatal(err)
	}
	const replicas = 3
	applied := make([]int, replicas)
	errs := make(chan error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			db := stdlib.OpenDBFromPool(pool)
			defer db.Close()
			p, err := newProvider(db, fsys, table)
			if err == nil {
				var res []*goose.MigrationResult
				res, err = p.Up(ctx)
				applied[i] = len(res)
			}
			errs <- err
		})
	}
	select {
	case err := <-errs:
		t.Fatalf("an Up returned (%v) while another session held the migration lock", err)
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockID); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("an Up after the lock was released: %v", err)
		}
	}
	if total := applied[0] + applied[1] + applied[2]; total != 1 {
		t.Errorf("the pending migration applied %d times between %d Ups (%v), want once", total, replicas, applied)
	}
}
