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
	poke    chan struct{} // made by Run (under mu): a caller wants a reload
	wanted  chan struct{} // closed when the next reload to start has ended; nil while nobody waits
	last    time.Time     // when the last reload started
	// missed holds the keys (by hash) that a reload asked for them found
	// no more than Lookup had: a revoked key still built into a deployed
	// app, or a guess of the right shape. Presented again, they are
	// refused at once rather than each waiting for, and asking, another
	// reload. A key can be presented only once it exists, so no key
	// created later is ever in it; bounded by maxMissed.
	missed map[Hash]struct{}
}

// maxMissed bounds rechecks.missed; a full set starts again empty.
const maxMissed = 4096

// Recheck is for a key that Lookup did not find. It waits for a reload of
// the keys that starts after the call — one reload shared by every caller
// waiting at that moment — and looks key up again. A key created a moment
// ago is then found on its first request, even when the database's
// announcement of it has not been acted on yet (the notification leaves
// at commit, but on a busy machine the reload it triggers may come after
// the new key's first request).
//
// It waits at most RecheckWait, or until ctx ends, and not at all while
// Run is not running, when key cannot be a key of Generate's making, or
// when an earlier reload that worked did not find it (a revoked key, a
// guess): a request never makes the database reload the keys more than
// once per RecheckSpacing, whatever it presents, and a key that is not
// there makes it reload once.
func (r *Ring) Recheck(ctx context.Context, key string) (Key, bool) {
	if !Generated(key) {
		return Key{}, false
	}
	h := HashOf(key)
	re := &r.rechecks
	re.mu.Lock()
	if _, missed := re.missed[h]; !re.running || missed {
		re.mu.Unlock()
		return Key{}, false
	}
	if re.wanted == nil {
		re.wanted = make(chan struct{})
	}
	done := re.wanted
	// Before the reload is asked for: the reload that ends the wait
	// begins after this. On the ring's clock, as loadedFrom is.
	asked := r.now()
	poke := re.poke // Run makes it anew each time it starts
	re.mu.Unlock()
	signal(poke)

	t := time.NewTimer(RecheckWait)
	defer t.Stop()
	select {
	case <-done:
		k, ok := r.Lookup(key)
		if !ok && r.loadedFrom.Load() >= asked { // a load that began after the ask, and worked, did not find it
			r.missedKey(h)
		}
		return k, ok
	case <-ctx.Done():
	case <-t.C:
	}
	return Key{}, false
}

// missedKey remembers h as a key a reload did not find.
func (r *Ring) missedKey(h Hash) {
	re := &r.rechecks
	re.mu.Lock()
	defer re.mu.Unlock()
	if re.missed == nil || len(re.missed) >= maxMissed {
		re.missed = make(map[Hash]struct{})
	}
	re.missed[h] = struct{}{}
}

// Generated reports whether key has the shape of a key Generate makes:
// one that may be a key, whether or not it is one.
func Generated(key string) bool {
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
