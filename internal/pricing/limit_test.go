package pricing

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type countingDB struct{ open, most atomic.Int32 }

type countingTx struct {
	pgx.Tx
	db   *countingDB
	done sync.Once
}

func (db *countingDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	n := db.open.Add(1)
	for m := db.most.Load(); n > m && !db.most.CompareAndSwap(m, n); m = db.most.Load() {
	}
	return &countingTx{db: db}, nil
}

func (t *countingTx) Rollback(context.Context) error {
	t.done.Do(func() { t.db.open.Add(-1) })
	return nil
}

func (t *countingTx) Commit(context.Context) error { return t.Rollback(context.Background()) }

// However many models are built at once, at most Builds transactions run
// together, and each gives its slot back when it ends, committed or not.
func TestBuildsRunAtMostBuildsAtOnce(t *testing.T) {
	db := &countingDB{}
	l := limitedDB{db: db, sem: make(chan struct{}, Builds)}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			tx, err := l.BeginTx(t.Context(), pgx.TxOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(2 * time.Millisecond)
			if i%2 == 0 {
				_ = tx.Commit(t.Context())
			}
			_ = tx.Rollback(t.Context()) // after a commit too, as deferred rollbacks do
		})
	}
	wg.Wait()
	if most := db.most.Load(); most > Builds || most < 2 {
		t.Fatalf("%d transactions at once, want 2..%d", most, Builds)
	}
	if len(l.sem) != 0 {
		t.Fatalf("%d slots still held", len(l.sem))
	}
	// A caller that gives up waiting gets its context's error.
	for range Builds {
		l.sem <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.BeginTx(ctx, pgx.TxOptions{}); err == nil {
		t.Fatal("BeginTx with every slot held did not give up")
	}
}
