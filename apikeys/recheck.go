package apikeys

import (
	"context"
	"sync"
	"time"
)

// Bounds of Ring.Recheck.
const (
	// RecheckWait is the longest Recheck waits for a reload.
	RecheckWait = 500 * time.Millisecond
	// RecheckSpacing is the least time between two reloads that Recheck
	// asks for: however many unknown keys arrive, they make the database
	// reload the keys at most once per RecheckSpacing.
	RecheckSpacing = 100 * time.Millisecond
)

// rechecks is the Ring's bookkeeping for Recheck.
type rechecks struct {
	mu      sync.Mutex
	running bool          // Run is reloading keys
	poke    chan struct{} // made by Run: a caller wants a reload
	wanted  chan struct{} // closed when the next reload to start has ended; nil while nobody waits
	last    time.Time     // when the last reload started
}

// Recheck is for a key that Lookup did not find. It waits for a reload of
// the keys that starts after the call — one reload shared by every caller
// waiting at that moment — and looks key up again. A key created a moment
// ago is then found on its first request, even when the database's
// announcement of it has not been acted on yet (the notification leaves
// at commit, but on a busy machine the reload it triggers may come after
// the new key's first request).
//
// It waits at most RecheckWait, or until ctx ends, and not at all while
// Run is not running or when key cannot be a key of Generate's making: a
// request never makes the database reload the keys more than once per
// RecheckSpacing, whatever it presents.
func (r *Ring) Recheck(ctx context.Context, key string) (Key, bool) {
	if !generated(key) {
		return Key{}, false
	}
	re := &r.rechecks
	re.mu.Lock()
	if !re.running {
		re.mu.Unlock()
		return Key{}, false
	}
	if re.wanted == nil {
		re.wanted = make(chan struct{})
	}
	done := re.wanted
	re.mu.Unlock()
	signal(re.poke)

	t := time.NewTimer(RecheckWait)
	defer t.Stop()
	select {
	case <-done:
		return r.Lookup(key)
	case <-ctx.Done():
	case <-t.C:
	}
	return Key{}, false
}

// generated reports whether key has the shape of a key Generate makes.
func generated(key string) bool {
	return len(key) == len(keyPrefix)+43 && key[:len(keyPrefix)] == keyPrefix
}

// startRechecks marks Run as running and returns the channel on which
// Recheck asks for a reload; stopRechecks undoes it and releases the
// callers still waiting.
func (r *Ring) startRechecks() <-chan struct{} {
	re := &r.rechecks
	re.mu.Lock()
	defer re.mu.Unlock()
	re.running, re.poke = true, make(chan struct{}, 1)
	return re.poke
}

func (r *Ring) stopRechecks() {
	re := &r.rechecks
	re.mu.Lock()
	defer re.mu.Unlock()
	re.running = false
	if re.wanted != nil {
		close(re.wanted)
		re.wanted = nil
	}
}

// beginReload takes the callers waiting for a reload that starts now and
// returns what ends their wait once it has run.
func (r *Ring) beginReload() (end func()) {
	re := &r.rechecks
	re.mu.Lock()
	done := re.wanted
	re.wanted, re.last = nil, time.Now()
	re.mu.Unlock()
	return func() {
		if done != nil {
			close(done)
		}
	}
}

// spaced waits until RecheckSpacing has passed since the last reload
// began, or ctx ends.
func (r *Ring) spaced(ctx context.Context) {
	r.rechecks.mu.Lock()
	wait := RecheckSpacing - time.Since(r.rechecks.last)
	r.rechecks.mu.Unlock()
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
