package pricing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/density"
)

// errNoStatements is what every statement of a fakePool transaction answers.
var errNoStatements = errors.New("fake pool: no statements")

// fakePool is a database of conns connections (as a *pgxpool.Pool says
// through Config) on which a transaction takes begin to open — bounded by
// its context, as a pool's acquire and BEGIN are — and holds its
// connection for exec before its first statement fails. It counts the
// transactions open at once.
type fakePool struct {
	conns       int32
	begin, exec time.Duration
	open, most  atomic.Int32
}

type fakeTx struct {
	pgx.Tx
	pool *fakePool
	done sync.Once
}

func (p *fakePool) Config() *pgxpool.Config { return &pgxpool.Config{MaxConns: p.conns} }

func (p *fakePool) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	select {
	case <-time.After(p.begin):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n := p.open.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return &fakeTx{pool: p}, nil
}

func (t *fakeTx) Exec(ctx context.Context, _ string, _ ...any) (pgconn.CommandTag, error) {
	select {
	case <-time.After(t.pool.exec):
		return pgconn.CommandTag{}, errNoStatements
	case <-ctx.Done():
		return pgconn.CommandTag{}, ctx.Err()
	}
}

func (t *fakeTx) Rollback(context.Context) error {
	t.done.Do(func() { t.pool.open.Add(-1) })
	return nil
}

func (t *fakeTx) Commit(ctx context.Context) error { return t.Rollback(ctx) }

// trackFake makes models track n relations of fakePool.
func trackFake(t *testing.T, models *Models, n int) {
	t.Helper()
	for i := range n {
		rel := density.Relation{Table: pgx.Identifier{"fake", fmt.Sprintf("t%02d", i)}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}
		if _, err := models.Track(rel); err != nil {
			t.Fatal(err)
		}
	}
}

// runModels runs models until every model's build has ended at least once
// and then for at least d, and stops them.
func runModels(t *testing.T, models *Models, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); models.Run(ctx) }()
	defer func() { cancel(); <-done }()
	until := time.Now().Add(d)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ended := 0
		for _, st := range models.Status() {
			if !st.LastAttempt.IsZero() {
				ended++
			}
		}
		if ended == len(models.Status()) && time.Now().After(until) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d builds ended in 30 s", ended, len(models.Status()))
		}
	}
}

// A build queued behind others for a slot gets its whole deadline once it
// holds one: 20 builds, 4 at once (5 rounds), each taking 1 s of its
// 1.5 s (statement timeout 1 s + the grace) to open its transaction,
// all reach their first statement — where the wait for a slot counted
// against the deadline, the fourth round and on timed out before they sent
// anything, every cycle.
func TestQueuedBuildGetsItsWholeDeadline(t *testing.T) {
	t.Parallel()
	db := &fakePool{conns: 16, begin: time.Second}
	models := NewModels(db, density.Options{StatementTimeout: time.Second, RetryInterval: time.Hour})
	trackFake(t, models, 20)
	runModels(t, models, 0)
	for _, st := range models.Status() {
		if st.Failures != 1 || !strings.Contains(st.LastError, errNoStatements.Error()) {
			t.Errorf("%s: %d failures, last %q; want its first statement to fail (%v)", st.Relation, st.Failures, st.LastError, errNoStatements)
		}
	}
	if most := db.most.Load(); most > Builds {
		t.Errorf("%d builds at once, want at most %d", most, Builds)
	}
}

// Builds leave a connection of the pool they read through to the other
// work that shares it (API keys' reloads above all): on a pool of 2, one
// build at a time; of 3, two; of 16, Builds. And each gives its slot back.
func TestBuildsLeaveTheirPoolAConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		conns int32
		want  int32
	}{{2, 1}, {3, 2}, {16, Builds}} {
		t.Run(fmt.Sprint(tc.conns), func(t *testing.T) {
			t.Parallel()
			db := &fakePool{conns: tc.conns, exec: 30 * time.Millisecond}
			models := NewModels(db, density.Options{RetryInterval: time.Millisecond})
			trackFake(t, models, 8)
			runModels(t, models, 500*time.Millisecond)
			if most := db.most.Load(); most != tc.want {
				t.Errorf("pool of %d: %d builds at once, want %d", tc.conns, most, tc.want)
			}
			if open := db.open.Load(); open != 0 {
				t.Errorf("%d transactions still open", open)
			}
		})
	}
}

func TestBuildsOn(t *testing.T) {
	t.Parallel()
	for conns, want := range map[int32]int{-1: Builds, 0: Builds, 1: 1, 2: 1, 3: 2, 4: 3, 5: 4, 6: 4, 100: 4} {
		if got := BuildsOn(conns); got != want {
			t.Errorf("BuildsOn(%d) = %d, want %d", conns, got, want)
		}
	}
	if got := NewModels((*pgxpool.Pool)(nil), density.Options{}).Builds(); got != Builds {
		t.Errorf("a nil pool: %d builds, want %d", got, Builds)
	}
	if got := NewModels(&fakePool{conns: 2}, density.Options{Slots: density.NewSlots(3)}).Builds(); got != 3 {
		t.Errorf("Options.Slots of 3: %d builds", got)
	}
}
