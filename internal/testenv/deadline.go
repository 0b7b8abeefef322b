package testenv

import (
	"context"
	"testing"
	"time"
)

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
