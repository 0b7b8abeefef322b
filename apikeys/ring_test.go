package apikeys

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a machine's two clocks: advance moves both, as time passing
// does; step moves the wall clock alone, as an operator, NTP or a resumed
// virtual machine setting it does.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	mono time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), mono: time.Hour}
}

func (c *fakeClock) wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now, c.mono = c.now.Add(d), c.mono+d
}

func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The keys' age is measured on the monotonic clock: setting the wall clock
// back during a database outage neither makes stale keys fresh again (an
// admin key revoked meanwhile would regain its rights) nor makes the age
// negative (the keys would look never loaded); setting it forward does not
// make fresh keys stale.
func TestRingAgeIgnoresWallClockSteps(t *testing.T) {
	const maxAge = 10 * time.Second
	for _, tc := range []struct {
		name string
		step time.Duration
	}{
		{"back", -time.Hour},
		{"back by less than the age", -3 * time.Second},
		{"forward", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
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
				when += " (wall clock " + clock.wall().Format(time.TimeOnly) + ")"
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
			clock.step(tc.step)
			check("the wall clock stepped", 5*time.Second)
			if err := ring.Refresh(t.Context()); err == nil {
				t.Fatal("a failed load reported success")
			}
			clock.advance(6 * time.Second)
			check("11s after the load", 11*time.Second)
		})
	}
}
