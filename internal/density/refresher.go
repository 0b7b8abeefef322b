package density

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Refresher keeps a model of one relation current: it builds one, then
// rebuilds it in the background, swapping each new model in atomically.
// A failed build keeps the last good model, and Status says it is Stale
// until a build succeeds again. Until the first build succeeds,
// Model returns nil (callers price without it, by area) or, after Inherit,
// a predecessor's model.
type Refresher struct {
	db      DB
	rel     Relation
	opts    Options
	queries queryText

	model    atomic.Pointer[Model]
	building sync.Mutex    // one build at a time
	nudged   chan struct{} // Nudge's request for a build (one pending at most)

	mu          sync.Mutex // guards the fields below
	lastAttempt time.Time
	checked     time.Time // when the model in use was last built or found current; zero for an inherited one
	lastError   string
	failures    int
}

// Status is a Refresher's state, for readiness detail and metrics.
type Status struct {
	Summary                   // of the model in use, but Relation is always the refresher's own
	Ready       bool          // a model is in use
	Inherited   bool          // the model in use is a predecessor's (see Inherit): its own is not built yet
	Age         time.Duration // since the model in use was built or last found current (Options.Shelf)
	LastAttempt time.Time     // when the latest build ended
	LastError   string        // the latest build's error; empty when it succeeded
	Failures    int           // builds that failed since the last success
	// Stale: a model of its own is in use (Ready, not Inherited), but the
	// refreshes that should keep it current do not: its latest build
	// failed (Failures > 0), or none has succeeded for StaleIntervals ×
	// Options.Interval (builds stuck behind others). Requests are still
	// priced by it — an older picture of the relation, which may have
	// grown since — so it is said, not hidden.
	Stale bool
}

// StaleIntervals is how many refresh intervals a model of its own may go
// without a successful build before its Status says Stale even with no
// failed build (one may be waiting, or running, all that time).
const StaleIntervals = 3

// NewRefresher validates rel and opts and renders the build queries; it
// reads nothing until Refresh or Run.
func NewRefresher(db DB, rel Relation, opts Options) (*Refresher, error) {
	if err := rel.Validate(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	q, err := render(rel)
	if err != nil {
		return nil, err
	}
	return &Refresher{db: db, rel: rel, opts: opts, queries: q, nudged: make(chan struct{}, 1)}, nil
}

// Relation is the relation r models.
func (r *Refresher) Relation() Relation { return r.rel }

// Nudge asks Run for a build soon, the relation having been written: at
// once, or NudgeGap (RetryInterval, if that is less) after the latest
// build ended if that is later, so that a run of writes costs one build
// per NudgeGap at most. It never blocks.
func (r *Refresher) Nudge() {
	select {
	case r.nudged <- struct{}{}:
	default: // one is pending: its build reads this write too
	}
}

// Model is the model in use, or nil before the first successful build.
func (r *Refresher) Model() *Model { return r.model.Load() }

// Inherit makes the model of from r's own until r builds one: a relation
// that replaced another (storage rebuilt under a new name) is estimated by
// its predecessor's model meanwhile, not by area. It does nothing when r
// has a model or from has none.
func (r *Refresher) Inherit(from *Refresher) {
	m := from.Model()
	if m == nil {
		return
	}
	r.model.CompareAndSwap(nil, m)
}

// Refresh builds a model now and swaps it in; on failure it keeps the
// model in use and returns the error.
func (r *Refresher) Refresh(ctx context.Context) error {
	r.building.Lock()
	defer r.building.Unlock()
	m, err := r.queries.build(ctx, r.db, r.rel, r.opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastAttempt = r.opts.Now()
	if err != nil {
		r.failures++
		r.lastError = err.Error()
		return err
	}
	r.model.Store(m)
	r.failures, r.lastError, r.checked = 0, "", r.lastAttempt
	return nil
}

// Run refreshes now, then Interval after each success and RetryInterval
// after each failure — or sooner when nudged (see Nudge) — until ctx is
// done.
func (r *Refresher) Run(ctx context.Context) {
	for {
		wait := r.opts.Interval
		before := r.Status().Failures
		err := r.Refresh(ctx)
		if err != nil {
			wait = r.opts.RetryInterval
		}
		r.logOutcome(ctx, before, err)
		if !r.await(ctx, wait) {
			return
		}
	}
}

// NudgeGap is how long after a build a nudged one waits, at most.
const NudgeGap = 5 * time.Second

// await waits wait, or for a nudge and then what is left of NudgeGap (or
// RetryInterval) since the latest build; it reports false once ctx is
// done.
func (r *Refresher) await(ctx context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-r.nudged:
	}
	gap := min(NudgeGap, r.opts.RetryInterval) - r.opts.Now().Sub(r.Status().LastAttempt)
	if gap <= 0 {
		return true
	}
	t.Reset(gap)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// logOutcome tells Options.Logger of a build that failed after a success
// (once: the failures that follow it are counted in Status and the
// metrics) and of the success that ends a run of failures.
func (r *Refresher) logOutcome(ctx context.Context, failuresBefore int, err error) {
	log := r.opts.Logger
	switch {
	case log == nil || ctx.Err() != nil:
	case err != nil && failuresBefore == 0:
		attrs := []slog.Attr{slog.String("relation", r.rel.String()), slog.Any("err", err)}
		if r.Model() != nil {
			attrs = append(attrs, slog.String("pricing", "from the last model built"))
		}
		log.LogAttrs(ctx, slog.LevelWarn, "price model build failed", attrs...)
	case err == nil && failuresBefore > 0:
		log.LogAttrs(ctx, slog.LevelInfo, "price model built again",
			slog.String("relation", r.rel.String()), slog.Int("failed_builds", failuresBefore))
	}
}

// Status reports the refresher's state.
func (r *Refresher) Status() Status {
	r.mu.Lock()
	s := Status{LastAttempt: r.lastAttempt, LastError: r.lastError, Failures: r.failures}
	checked, m := r.checked, r.Model() // a build stores both under mu
	r.mu.Unlock()
	if m != nil {
		s.Summary, s.Ready = m.summary, true
		if s.Inherited = checked.IsZero(); s.Inherited { // not built here: see Inherit
			checked = m.summary.BuiltAt
		}
		s.Age = r.opts.Now().Sub(checked)
		s.Stale = !s.Inherited && (s.Failures > 0 || s.Age > StaleIntervals*r.opts.Interval)
	}
	s.Relation = r.rel.String()
	return s
}
