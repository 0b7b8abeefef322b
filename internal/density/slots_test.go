package density_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/pgcall"
)

// hangingDB never opens a transaction: BeginTx returns when its context
// ends, having recorded how long its context's deadline gave it.
type hangingDB struct {
	mu     sync.Mutex
	waited []time.Duration
	begun  chan struct{}
}

func (db *hangingDB) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	given := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		given = time.Until(dl)
	}
	db.mu.Lock()
	db.waited = append(db.waited, given)
	db.mu.Unlock()
	if db.begun != nil {
		db.begun <- struct{}{}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

var nowhere = density.Relation{Table: pgx.Identifier{"fake", "nowhere"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point}

// A database that does not answer is given up on statement timeout +
// pgcall.AnswerGrace after the build starts, as Build's documentation says.
func TestBuildGivesUpAfterTimeoutAndGrace(t *testing.T) {
	t.Parallel()
	db := &hangingDB{}
	const timeout = 100 * time.Millisecond
	_, err := density.Build(t.Context(), db, nowhere, density.Options{StatementTimeout: timeout})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("build on a database that does not answer: %v, want a deadline", err)
	}
	// The deadline as BeginTx found it: at most the whole allowance, less
	// the moments between the build's start and the call.
	if want, got := timeout+pgcall.AnswerGrace, db.waited[0]; got < want-400*time.Millisecond || got > want {
		t.Errorf("given %v, want %v (statement timeout + pgcall.AnswerGrace)", got, want)
	}
}

// A build waits for a slot under its caller's context, however long, and
// its own deadline starts once it holds one; a caller that gives up
// waiting gets its context's error, and no slot is kept.
func TestBuildWaitsForSlotUnderCallersContext(t *testing.T) {
	t.Parallel()
	slots := density.NewSlots(1)
	db := &hangingDB{begun: make(chan struct{}, 2)}
	const timeout = 50 * time.Millisecond
	opts := density.Options{StatementTimeout: timeout, Slots: slots}
	first := make(chan error, 1)
	go func() { _, err := density.Build(t.Context(), db, nowhere, opts); first <- err }()
	<-db.begun // the first build holds the slot until its deadline
	second := make(chan error, 1)
	go func() { _, err := density.Build(t.Context(), db, nowhere, opts); second <- err }()
	for _, ch := range []chan error{first, second} {
		if err := <-ch; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("build: %v, want its deadline", err)
		}
	}
	if len(db.waited) != 2 {
		t.Fatalf("%d of 2 builds opened a transaction: the second timed out waiting for its slot", len(db.waited))
	}
	<-db.begun // the second's: each step below starts with none left
	want := timeout + pgcall.AnswerGrace
	for i, got := range db.waited {
		if got < want-400*time.Millisecond || got > want {
			t.Errorf("build %d: given %v once it held its slot, want %v", i+1, got, want)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	go func() { _, err := density.Build(t.Context(), db, nowhere, opts); first <- err }()
	<-db.begun
	go func() { _, err := density.Build(ctx, db, nowhere, opts); second <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Errorf("a caller that gave up waiting for a slot: %v, want context.Canceled", err)
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the build holding the slot: %v, want its deadline", err)
	}
	db.mu.Lock()
	began := len(db.waited)
	db.mu.Unlock()
	if began != 3 {
		t.Fatalf("%d transactions opened, want 3: the cancelled build was not still waiting for its slot", began)
	}
	sctx, scancel := context.WithTimeout(t.Context(), time.Second)
	defer scancel()
	go func() { _, err := density.Build(sctx, db, nowhere, opts); first <- err }()
	select {
	case <-db.begun: // the slot is free again
	case <-sctx.Done():
		t.Fatal("the slot was kept")
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a build in the freed slot: %v, want its deadline", err)
	}
}
