package apikeys

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a monotonic clock that moves only when told to.
type fakeClock struct {
	mu   sync.Mutex
	mono time.Duration
}

func (c *fakeClock) monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mono += d
}

// The keys' age is measured on the ring's clock, which has a monotonic
// reading only (in production, the time since the process started): no
// wall-clock step — an operator, NTP or a resumed virtual machine setting
// it back during a database outage — can make stale keys fresh again (an
// admin key revoked meanwhile would regain its rights), make the age
// negative (the keys would look never loaded), or make fresh keys stale.
func TestRingAgeIgnoresWallClockSteps(t *testing.T) {
	const maxAge = 10 * time.Second
	clock := &fakeClock{mono: time.Hour}
	down := false
	ring := NewRing(func(context.Context) (map[Hash]Key, error) {
		if down {
			return nil, errors.New("database down")
		}
		return map[Hash]Key{HashOf("admin"): {Name: "admin", Tier: "free", Admin: true}}, nil
	}, time.Second, nil)
	ring.MaxAge, ring.clock = maxAge, clock
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	down = true

	check := func(when string, age time.Duration) {
		t.Helper()
		if got := ring.Age(); got != age {
			t.Errorf("%s: Age %s, want %s", when, got, age)
		}
		stale := age > maxAge
		if got := ring.Stale(); got != stale {
			t.Errorf("%s: Stale %t, want %t", when, got, stale)
		}
		if k, ok := ring.Lookup("admin"); !ok || k.Admin == stale {
			t.Errorf("%s: Lookup gives the admin key %+v, %t; want it with Admin %t", when, k, ok, !stale)
		}
	}
	clock.advance(5 * time.Second)
	check("5s after the load", 5*time.Second)
	if err := ring.Refresh(t.Context()); err == nil {
		t.Fatal("a failed load reported success")
	}
	clock.advance(6 * time.Second)
	check("11s after the load", 11*time.Second)

	// The process's clock: time.Since follows the wall clock, steps and
	// all, unless its start carries a monotonic reading (time.Time's
	// String shows one as its last field, m=±seconds).
	if s := processStart.String(); !strings.Contains(s, " m=") {
		t.Errorf("processStart %s has no monotonic reading: the ring's age would follow the wall clock", s)
	}
	if ring.clock = nil; ring.now() < 0 {
		t.Errorf("the process's clock reads %d ns, before the process started", ring.now())
	}
}
