package geofence

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// A pool whose every connection is busy gives a 503 with Retry-After after
// AcquireTimeout, not a wait for as long as the request lives.
func TestStoreAcquireTimeout(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	held, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(pool)
	store.AcquireTimeout, store.RetryAfter = 200*time.Millisecond, 3

	start := time.Now()
	_, err = store.Contains(t.Context(), 13.405, 52.52, 10)
	p := problem.From(err)
	if err == nil || p.Code != problem.Unavailable || p.RetryAfter != 3 {
		t.Fatalf("Contains with the pool exhausted: %v, want %q with Retry-After 3", err, problem.Unavailable)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("gave up after %v, want about the 200 ms acquire timeout", elapsed)
	}
	held.Release()
	if _, err := store.Contains(t.Context(), 13.405, 52.52, 10); err != nil {
		t.Fatalf("Contains once the connection is free: %v", err)
	}
}
