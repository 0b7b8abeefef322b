package pgcall

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Each caller has a Share of its own, of the one size: a caller whose
// slots are all held waits (here: its context ends, errShareBusy), while
// another caller still takes one.
func TestSharesAreEachCallers(t *testing.T) {
	s := NewShares(2, time.Minute)
	a, b := s.Of("k:1"), s.Of("k:2")
	if a != s.Of("k:1") || a == b || a.Size() != 2 || s.Size() != 2 {
		t.Fatalf("k:1 %p and again %p, k:2 %p, size %d", a, s.Of("k:1"), b, a.Size())
	}
	ctx := context.Background()
	for range 2 {
		if err := a.take(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.take(done); !errors.Is(err, errOwnShareBusy) {
		t.Fatalf("a third call of k:1: %v, want it to wait for a slot", err)
	}
	// A free slot is taken at once; the bound only turns a hang into an
	// error should it not be.
	free, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := b.take(free); err != nil {
		t.Fatalf("k:2 beside a full k:1: %v", err)
	}
	a.give()
	if err := a.take(free); err != nil {
		t.Fatalf("k:1 after a slot came back: %v", err)
	}
}

// Idle Shares are forgotten when the map has doubled; one whose slot is
// held, or handed out within Idle, is kept — and still the caller's.
func TestSharesForgetIdleCallers(t *testing.T) {
	now := time.Unix(1e9, 0)
	s := NewShares(1, time.Minute)
	s.now = func() time.Time { return now }
	held := s.Of("held")
	if err := held.take(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 62 {
		s.Of(fmt.Sprint("old", i))
	}
	now = now.Add(2 * time.Minute)
	recent := s.Of("recent") // 64 remembered: the next new caller sweeps
	now = now.Add(30 * time.Second)
	s.Of("new")
	if n := s.Len(); n != 3 {
		t.Fatalf("%d Shares remembered after the sweep, want held, recent and new", n)
	}
	if s.Of("held") != held || s.Of("recent") != recent {
		t.Fatal("a Share in use, or handed out within Idle, was forgotten")
	}
	// Once its slot is back and Idle has passed, it goes too.
	held.give()
	now = now.Add(2 * time.Minute)
	for i := range 64 {
		s.Of(fmt.Sprint("more", i))
	}
	if s.Of("held") == held {
		t.Fatal("an idle Share was kept")
	}
}
