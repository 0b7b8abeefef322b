package pgcall

import (
	"testing"
	"time"
)

// SetRaceDelay sets raceDelay for the connections made until t ends. A
// test that calls it must not run in parallel.
func SetRaceDelay(t testing.TB, d time.Duration) {
	old := raceDelay
	raceDelay = d
	t.Cleanup(func() { raceDelay = old })
}
