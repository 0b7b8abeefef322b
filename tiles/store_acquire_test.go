package tiles_test

import (
	"context"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// A pool whose every connection is busy gives a 503 with Retry-After after
// AcquireTimeout, not a wait for as long as the request lives.
func TestStoreAcquireTimeout(t *testing.T) {
	t.Parallel()
	pool, release := testenv.BusyPool(t)
	store := tiles.NewStore(pool)
	store.AcquireTimeout, store.RetryAfter = 200*time.Millisecond, 3
	layers := resolve(t, demoCatalog(t), "places")
	tile := maptile.At(berlin, 14)

	took, err := testenv.CallWithin(t, 5*time.Second, func(ctx context.Context) error {
		_, err := store.Tile(ctx, layers, tile)
		return err
	})
	p := problem.From(err)
	if err == nil || p.Code != problem.Unavailable || p.RetryAfter != 3 {
		t.Fatalf("Tile with the pool exhausted: %v, want %q with Retry-After 3", err, problem.Unavailable)
	}
	if took < store.AcquireTimeout || took > 5*store.AcquireTimeout {
		t.Fatalf("gave up after %v, want the %v acquire timeout (at most 5×)", took, store.AcquireTimeout)
	}
	release()
	if _, err := store.Tile(t.Context(), layers, tile); err != nil {
		t.Fatalf("Tile once the connection is free: %v", err)
	}
}
