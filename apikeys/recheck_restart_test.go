package apikeys

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestRecheckAcrossARestartOfRun: a Recheck that found Run running asks
// for a reload on the channel Run made; when that Run ends and Run is
// started again, the new Run makes a channel of its own. The Recheck must
// have read the channel it signals under the lock that Run writes it
// under, or its read races with the new Run's write. Run with -race, the
// race detector reports that race, and the test fails ("race detected
// during execution of test"); without -race it only checks that the
// Recheck ends.
//
// No edge of the race detector's may order the Recheck's signal before
// the new Run: the first Run is kept from taking it (its reload hangs, and
// the channel's one place is taken), and the test waits for the Recheck
// only once the new Run has started.
func TestRecheckAcrossARestartOfRun(t *testing.T) {
	t.Parallel()
	key, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	var hang atomic.Bool
	loading := make(chan struct{}, 1)
	r := NewRing(func(ctx context.Context) (map[Hash]Key, error) {
		if hang.Load() {
			signal(loading)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return map[Hash]Key{}, nil
	}, time.Hour, slog.New(slog.DiscardHandler))
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	re := &r.rechecks
	locked := func(f func()) {
		re.mu.Lock()
		defer re.mu.Unlock()
		f()
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		guard := time.Now().Add(10 * time.Second) // against a hang, not a measure
		for {
			var ok bool
			locked(func() { ok = cond() })
			if ok {
				return
			}
			if time.Now().After(guard) {
				t.Fatalf("%s: not within 10 s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.Run(ctx)
		}()
		return func() {
			cancel()
			<-done
		}
	}

	stop := run()
	until("Run started", func() bool { return re.running })
	// Run's next reload hangs (until Run ends), and the place on its
	// channel is taken: nothing takes the Recheck's signal.
	hang.Store(true)
	locked(func() { signal(re.poke) })
	<-loading
	locked(func() { signal(re.poke) })

	checked := make(chan struct{})
	go func() {
		defer close(checked)
		r.Recheck(context.Background(), key)
	}()
	until("Recheck waits for a reload", func() bool { return re.wanted != nil })
	stop()
	stop = run()
	until("Run started again", func() bool { return re.running })
	<-checked // its reload's wait ended when the first Run did
	stop()
}
