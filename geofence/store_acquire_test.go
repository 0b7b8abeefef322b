package geofence

import (
	"context"
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

	took, err := testenv.CallWithin(t, 5*time.Second, func(ctx context.Context) error {
		_, _, err := store.Contains(ctx, ContainsQuery{Lng: 13.405, Lat: 52.52, Limit: 10, MaxVertices: 1000})
		return err
	})
	p := problem.From(err)
	if err == nil || p.Code != problem.Unavailable || p.RetryAfter != 3 {
		t.Fatalf("Contains with the pool exhausted: %v, want %q with Retry-After 3", err, problem.Unavailable)
	}
	if took < store.AcquireTimeout || took > 5*store.AcquireTimeout {
		t.Fatalf("gave up after %v, want the %v acquire timeout (at most 5×)", took, store.AcquireTimeout)
	}
	release()
	if _, _, err := store.Contains(t.Context(), ContainsQuery{Lng: 13.405, Lat: 52.52, Limit: 10, MaxVertices: 1000}); err != nil {
		t.Fatalf("Contains once the connection is free: %v", err)
	}
}
