package pgcall_test

import (
	"context"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// A Share of one call: while one call of the share runs, another of it
// waits for the slot and is a 503 after AcquireTimeout, though the pool
// has free connections — which a call outside the share gets at once. The
// slot is given back with the connection.
func TestReadUnderShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, detail string
		share        *pgcall.Share
	}{
		{"anonymous callers'", "the database connections shared by callers without an API key are all busy; try again later, or use an API key", pgcall.NewShare(1)},
		{"a key's own", "this API key's statements already use every database connection it may hold at once (database.key_max_conns); try again later",
			pgcall.NewShares(1, time.Minute).Of("k:1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			readUnderShare(t, tc.share, tc.detail)
		})
	}
}

// readUnderShare: a call of share waits for its one slot, and gets a
// busy 503 with detail once acquire_timeout passes; a call outside it does
// not wait; a call of it once the slot is free runs.
func readUnderShare(t *testing.T, share *pgcall.Share, detail string) {
	db := &pgcall.DB{Pool: readPool(t, 3), AcquireTimeout: 200 * time.Millisecond, RetryAfter: 2}
	in := func() context.Context {
		ctx, budget := pgcall.WithBudget(t.Context())
		budget.Join(share)
		return ctx
	}
	first := make(chan error, 1)
	go func() {
		_, err := db.Read(in(), pgcall.Statement{SQL: `SELECT pg_sleep(2)`, Timeout: 10 * time.Second})
		first <- err
	}()
	eventually(t, 5*time.Second, "the first call holds the share's slot", func() bool { return share.InUse() == 1 })
	_, err := db.Read(in(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second})
	if p := problem.From(err); p.Code != problem.Unavailable || p.RetryAfter != 2 || p.Detail != detail {
		t.Errorf("a second call of the share: %q %q Retry-After %d (%v); want busy, 503, Retry-After 2, %q", p.Code, p.Detail, p.RetryAfter, err, detail)
	}
	if _, err := db.Read(t.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second}); err != nil {
		t.Errorf("a call outside the share: %v", err)
	}
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the first call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first call did not end in 10 s")
	}
	if n := share.InUse(); n != 0 {
		t.Fatalf("%d slots held after the call ended", n)
	}
	if _, err := db.Read(in(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second}); err != nil {
		t.Errorf("a call of the share once its slot is free: %v", err)
	}
}
