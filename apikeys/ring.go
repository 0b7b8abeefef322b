package apikeys

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ring is the in-memory set of active keys. Lookups never touch the
// database; Run reloads the keys in the background.
//
// Configure the exported fields before Run; NewRing sets the usual ones.
type Ring struct {
	// Load reads the active keys (usually Store.Active).
	Load func(context.Context) (map[Hash]Key, error)
	// Interval is how often Run reloads the keys.
	Interval time.Duration
	// Timeout bounds one load; 0 means Interval, at most DefaultLoadTimeout.
	// A load that hangs (a database that accepts connections but never
	// answers) must not stop the reloads behind it.
	Timeout time.Duration
	// MaxAge is how old the keys may get (0 means 6 × Interval). Beyond it
	// they are stale — the reloads have failed for that long, so revocations
	// may have been missed — and Lookup grants no admin rights: an admin
	// key revoked during a database outage must not keep its power.
	// Ordinary keys keep working, or an outage would lock out every client.
	MaxAge time.Duration
	// Connect, when set, opens a dedicated connection (Store.Connect) on
	// which Run LISTENs for key changes (Channel) and reloads at once when
	// one is announced; the periodic reload stays as the fallback.
	Connect func(context.Context) (*pgx.Conn, error)
	Logger  *slog.Logger

	keys atomic.Pointer[map[Hash]Key]
	// loadedFrom is when the last successful load began, as a reading of
	// clock (0 if never): the keys are those of that moment or later, and
	// their age counts from it.
	loadedFrom atomic.Int64
	clock      clock       // nil: systemClock
	stale      atomic.Bool // as last reported by Run, to log transitions once
	listening  atomic.Bool // a LISTEN is in place
	rechecks   rechecks    // see Recheck
}

// DefaultLoadTimeout is the longest one load takes when Ring.Timeout is 0.
const DefaultLoadTimeout = 5 * time.Second

// NewRing returns a Ring that loads keys with load every interval.
func NewRing(load func(context.Context) (map[Hash]Key, error), interval time.Duration, log *slog.Logger) *Ring {
	return &Ring{Load: load, Interval: interval, Logger: log}
}

// Refresh loads the keys now, bounded by the ring's Timeout.
func (r *Ring) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	began := r.now()
	keys, err := r.Load(ctx)
	if err != nil {
		return err
	}
	r.keys.Store(&keys)
	r.loadedFrom.Store(max(began, 1))
	return nil
}

// Run reloads the keys every Interval until ctx ends, with Connect
// whenever the database announces a change, and when Recheck asks (at most
// once per RecheckSpacing). A failed load keeps the previous keys (a
// database blip must not lock every client out) and is logged; so is the
// moment the keys turn stale, and when they are fresh again. Loads never
// overlap: changes announced during one are covered by one more.
func (r *Ring) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	poked := r.startRechecks()
	defer r.stopRechecks()
	changed := make(chan struct{}, 1)
	if r.Connect != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			r.listen(ctx, changed)
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		case <-poked:
			r.spaced(ctx)
		}
		end := r.beginReload()
		r.reload(ctx)
		end()
	}
}

// Listening reports whether the ring is notified of key changes (a LISTEN
// is in place); when not, changes are seen at the next periodic reload.
func (r *Ring) Listening() bool { return r.listening.Load() }

// reload refreshes the keys and logs what changed.
func (r *Ring) reload(ctx context.Context) {
	err := r.Refresh(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		r.logger().Warn("API key refresh failed; keeping the previous keys", "err", err, "age", r.Age().Round(time.Millisecond))
	}
	stale := r.Stale()
	if r.stale.Swap(stale) == stale {
		return
	}
	if stale {
		r.logger().Error("API keys are stale: admin keys are refused until they reload", "age", r.Age().Round(time.Millisecond), "max_age", r.maxAge())
	} else {
		r.logger().Warn("API keys reloaded: admin keys work again")
	}
}

// Lookup returns the active key whose plaintext is key. While the keys are
// stale (see MaxAge) a key's Admin is false.
func (r *Ring) Lookup(key string) (Key, bool) {
	m := r.keys.Load()
	if m == nil || len(key) == 0 || len(key) > MaxKeyLength {
		return Key{}, false
	}
	k, ok := (*m)[HashOf(key)]
	if ok && k.Admin && r.Stale() {
		k.Admin = false
	}
	return k, ok
}

// Len is the number of active keys loaded (0 before the first load).
func (r *Ring) Len() int {
	if m := r.keys.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Age is how long ago the last successful load began (-1 if never): the
// keys are as of then, however long the load took — a revocation made
// while a slow load ran may be missing from them. It is measured on the
// monotonic clock, so setting the system's clock changes neither it nor
// Stale.
func (r *Ring) Age() time.Duration {
	at := r.loadedFrom.Load()
	if at == 0 {
		return -1
	}
	return time.Duration(r.now() - at)
}

// Stale reports whether the loaded keys are older than MaxAge.
func (r *Ring) Stale() bool { return r.Age() > r.maxAge() }

// StaleAfter is how old the keys may get before they are stale: MaxAge, or
// its default.
func (r *Ring) StaleAfter() time.Duration { return r.maxAge() }

func (r *Ring) maxAge() time.Duration {
	if r.MaxAge > 0 {
		return r.MaxAge
	}
	return 6 * r.Interval
}

// A clock is where a Ring reads the time when it measures the keys' age.
// Its readings come from a monotonic clock: the wall clock is no measure of
// elapsed time, since an operator, NTP or a virtual machine resumed from a
// snapshot may set it back or forward at any moment.
type clock interface {
	// monotonic is the time elapsed since an arbitrary moment fixed when
	// the process started; it never goes back.
	monotonic() time.Duration
}

// systemClock reads the process's monotonic clock.
type systemClock struct{}

// processStart carries the monotonic reading from which systemClock counts.
var processStart = time.Now()

func (systemClock) monotonic() time.Duration { return time.Since(processStart) }

// now is a reading of the ring's clock, in nanoseconds.
func (r *Ring) now() int64 {
	if r.clock != nil {
		return int64(r.clock.monotonic())
	}
	return int64(systemClock{}.monotonic())
}

func (r *Ring) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return min(max(r.Interval, time.Millisecond), DefaultLoadTimeout)
}

func (r *Ring) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
