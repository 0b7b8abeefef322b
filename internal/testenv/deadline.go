package testenv

import (
	"context"
	"testing"
	"time"
)

// Patience is how long a test waits for something that should happen at
// once (a goroutine it released, a value it was promised) before it fails:
// a test that waits never hangs until go test's own timeout.
const Patience = 5 * time.Second

// Receive returns the next value from ch, failing the test if none arrives
// within Patience. what says what the test was waiting for.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Patience):
		t.Fatalf("waited %v for %s", Patience, what)
		var zero T
		return zero
	}
}

// CallWithin runs call on a context that ends after limit and returns how
// long call took and its error. A call that outlives its context by more
// than a second fails the test instead of hanging it: whatever the code
// under test ignores, the test still ends.
func CallWithin(t testing.TB, limit time.Duration, call func(context.Context) error) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit + time.Second):
		t.Fatalf("the call had not returned %v after its %v context ended", time.Second, limit)
		return 0, nil
	}
}
