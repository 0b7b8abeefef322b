package geofence

import (
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// A pool whose every connection is busy gives a 503 with Retry-After after
// AcquireTimeout, not a wait for as long as the request lives.
func TestStoreAcquireTimeout(t *testing.T) {
	t.Parallel()
	pool, release := testenv.BusyPool(t)
	store := NewStore(pool)
	store.AcquireTimeout, store.RetryAfter = 200*time.Millisecond, 3

	start := time.Now()
	_, _, err := store.Contains(t.Context(), ContainsQuery{Lng: 13.405, Lat: 52.52, Limit: 10, MaxVertices: 1000})
	p := problem.From(err)
	if err == nil || p.Code != problem.Unavailable || p.RetryAfter != 3 {
		t.Fatalf("Contains with the pool exhausted: %v, want %q with Retry-After 3", err, problem.Unavailable)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("gave up after %v, want about the 200 ms acquire timeout", elapsed)
	}
	release()
	if _, _, err := store.Contains(t.Context(), ContainsQuery{Lng: 13.405, Lat: 52.52, Limit: 10, MaxVertices: 1000}); err != nil {
		t.Fatalf("Contains once the connection is free: %v", err)
	}
}
