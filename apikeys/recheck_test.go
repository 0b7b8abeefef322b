package apikeys_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/testenv"
)

// runRing loads ring's keys, as serve does before it runs the ring, and
// runs it until the test ends.
func runRing(t *testing.T, ring *apikeys.Ring) {
	t.Helper()
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ring.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for !ring.RechecksRunning() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// keyName is a key name unique to the test; its keys are deleted when the
// test ends.
func keyName(t *testing.T) string {
	t.Helper()
	name := strings.ReplaceAll(testenv.Prefix(t), "geotoll-test-", "k")
	t.Cleanup(func() {
		_, _ = testenv.Pool(t).Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name = $1", name)
	})
	return name
}

// A key created after the ring's last reload, with no announcement of it
// acted on (no LISTEN, a periodic reload an hour away), is found by
// Recheck on its first use.
func TestRecheckFindsANewKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	owner := apikeys.NewStore(testenv.Pool(t))
	name := keyName(t)
	ring := apikeys.NewRing(apikeys.NewStore(testenv.ReadPool(t)).Active, time.Hour, nil)
	runRing(t, ring)

	plain, k, err := owner.Create(ctx, name, "pro", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ring.Lookup(plain); ok {
		t.Fatal("found before any reload: the test proves nothing")
	}
	got, ok := ring.Recheck(ctx, plain)
	if !ok || got.ID != k.ID {
		t.Fatalf("Recheck of a key created a moment ago: %+v %v", got, ok)
	}
	other, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ring.Recheck(ctx, other); ok {
		t.Fatal("Recheck found a key that was never created")
	}
}

// countingRing is a ring over a fake Load that counts loads and can hold
// them until released.
type countingRing struct {
	*apikeys.Ring
	loads   atomic.Int32
	holding atomic.Bool   // loads wait for release
	release chan struct{} // closed to let held loads end
	mu      sync.Mutex
	keys    map[apikeys.Hash]apikeys.Key
}

func newCountingRing() *countingRing {
	c := &countingRing{keys: map[apikeys.Hash]apikeys.Key{}, release: make(chan struct{})}
	c.Ring = apikeys.NewRing(func(ctx context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		c.loads.Add(1)
		if c.holding.Load() {
			select {
			case <-c.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		out := make(map[apikeys.Hash]apikeys.Key, len(c.keys))
		for h, k := range c.keys {
			out[h] = k
		}
		return out, nil
	}, time.Hour, nil)
	return c
}

func (c *countingRing) add(t *testing.T, id int64) string {
	t.Helper()
	plain, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.keys[apikeys.HashOf(plain)] = apikeys.Key{ID: id, Name: "k", Tier: "pro"}
	c.mu.Unlock()
	return plain
}

// However many unknown keys arrive at once, they share reloads: 50
// concurrent rechecks cost at most two loads (the one they all wait for,
// and at most one more asked for while it ran).
func TestRecheckSharesReloads(t *testing.T) {
	t.Parallel()
	c := newCountingRing()
	runRing(t, c.Ring)
	base := c.loads.Load()
	plain := c.add(t, 7)
	var (
		wg    sync.WaitGroup
		found atomic.Int32
	)
	for range 50 {
		wg.Go(func() {
			if k, ok := c.Recheck(t.Context(), plain); ok && k.ID == 7 {
				found.Add(1)
			}
		})
	}
	wg.Wait()
	if found.Load() != 50 {
		t.Errorf("%d of 50 rechecks found the key", found.Load())
	}
	if n := c.loads.Load() - base; n < 1 || n > 2 {
		t.Errorf("50 concurrent rechecks made %d loads, want 1 or 2", n)
	}
}

// Reloads asked for by Recheck start at least RecheckSpacing apart.
func TestRecheckSpacesReloads(t *testing.T) {
	t.Parallel()
	c := newCountingRing()
	runRing(t, c.Ring)
	start := time.Now()
	for range 3 {
		unknown, err := apikeys.Generate() // one of its own each: a key missed once is not asked again
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Recheck(t.Context(), unknown); ok {
			t.Fatal("an unknown key was found")
		}
	}
	// The first recheck may reload at once; the next two wait their turn.
	if took := time.Since(start); took < 2*apikeys.RecheckSpacing {
		t.Errorf("3 rechecks in a row took %s: reloads closer than %s apart", took, apikeys.RecheckSpacing)
	}
}

// A key a reload did not find (revoked, or a guess) makes the ring reload
// once, however often it is presented: its later rechecks neither load
// nor wait. A key created since is found by its own first recheck.
func TestRecheckAsksOncePerMissingKey(t *testing.T) {
	t.Parallel()
	c := newCountingRing()
	runRing(t, c.Ring)
	base := c.loads.Load()
	unknown, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, ok := c.Recheck(t.Context(), unknown); ok {
			t.Fatal("an unknown key was found")
		}
	}
	if n := c.loads.Load() - base; n != 1 {
		t.Errorf("20 rechecks of one missing key made %d loads, want 1", n)
	}
	plain := c.add(t, 9)
	if k, ok := c.Recheck(t.Context(), plain); !ok || k.ID != 9 {
		t.Fatalf("a key created after another was missed: %+v %v", k, ok)
	}
	c.holding.Store(true) // the next load hangs: a miss it cannot vouch for is not kept
	other, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	before := c.loads.Load()
	if _, ok := c.Recheck(t.Context(), other); ok {
		t.Fatal("found through a load that never ended")
	}
	close(c.release)
	c.holding.Store(false)
	for c.loads.Load() == before { // the hanging load has begun, and now ends
		time.Sleep(time.Millisecond)
	}
	time.Sleep(apikeys.RecheckSpacing)
	before = c.loads.Load()
	if _, ok := c.Recheck(t.Context(), other); ok {
		t.Fatal("an unknown key was found")
	}
	if c.loads.Load() == before {
		t.Error("a key whose only recheck timed out was not asked again")
	}
}

// Recheck never waits, and never loads, for a string that is not a
// generated key, nor when the ring is not running; a load that hangs costs
// a caller at most RecheckWait.
func TestRecheckBounds(t *testing.T) {
	t.Parallel()
	c := newCountingRing()
	plain := c.add(t, 1)
	if _, ok := c.Recheck(t.Context(), plain); ok {
		t.Error("Recheck found a key while the ring was not running")
	}
	if c.loads.Load() != 0 {
		t.Errorf("Recheck loaded keys without Run: %d loads", c.loads.Load())
	}

	runRing(t, c.Ring)
	base := c.loads.Load()
	if _, ok := c.Recheck(t.Context(), "not-a-generated-key"); ok {
		t.Error("found a string that is not a key")
	}
	if n := c.loads.Load() - base; n != 0 {
		t.Errorf("a string that cannot be a key made %d loads", n)
	}

	c.holding.Store(true) // every load hangs from now on
	defer close(c.release)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan bool, 1)
	go func() {
		_, ok := c.Recheck(ctx, plain)
		done <- ok
	}()
	select {
	case ok := <-done:
		if ok {
			t.Error("found a key through a load that never ended")
		}
	case <-ctx.Done():
		t.Fatal("Recheck waited 10 s on a hanging load")
	}
}

// A name is free again once its key is revoked; while a key of that name
// is active, Create refuses it.
func TestNameReusableOnceRevoked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := apikeys.NewStore(testenv.Pool(t))
	name := keyName(t)
	_, first, err := store.Create(ctx, name, "free", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Create(ctx, name, "free", false); !errors.Is(err, apikeys.ErrNameTaken) {
		t.Fatalf("second active key of one name: %v, want ErrNameTaken", err)
	}
	if err := store.Revoke(ctx, name); err != nil {
		t.Fatal(err)
	}
	_, second, err := store.Create(ctx, name, "pro", false)
	if err != nil {
		t.Fatalf("create after revoke: %v", err)
	}
	if second.ID == first.ID {
		t.Fatal("the revoked key was reused")
	}
	list, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var revoked, active int
	for _, k := range list {
		switch {
		case k.Name != name:
		case k.RevokedAt != nil && k.ID == first.ID:
			revoked++
		case k.RevokedAt == nil && k.ID == second.ID:
			active++
		}
	}
	if revoked != 1 || active != 1 {
		t.Fatalf("List: %d revoked and %d active keys named %q, want 1 and 1", revoked, active, name)
	}
}
