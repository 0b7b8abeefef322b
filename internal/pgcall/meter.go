package pgcall

import (
	"context"
	"sync/atomic"
	"time"
)

// Meter adds up the database time (Timing.Server, or Timing.DB for a call
// that did not read it) of every call made under a context, including the
// part of a call that outlives its answer: once the request's handler has
// returned (after Respond waited), the sum is final.
// Work done for a request under a context of its own (a render shared by
// several requests) is added with AddTo.
type Meter struct {
	ns   atomic.Int64
	used atomic.Bool
	busy atomic.Bool
}

type meterKey struct{}

// WithMeter returns ctx carrying a new Meter, and the Meter.
func WithMeter(ctx context.Context) (context.Context, *Meter) {
	m := &Meter{}
	return context.WithValue(ctx, meterKey{}, m), m
}

// DB is the database time metered so far.
func (m *Meter) DB() time.Duration { return time.Duration(m.ns.Load()) }

// Used reports whether the database worked for the meter's request: a
// call was made under its context (from the moment it is sent, so that a
// call still running counts), or work was added with AddTo. A request
// that only waited for a render another request paid for, or found its
// tile cached after all, used none.
func (m *Meter) Used() bool { return m.used.Load() }

// Busy reports whether a call under the meter's context found every
// connection it may use busy (a 503), or MarkBusy said a render it waited
// for did. The database did no work for it; toll charges the request its
// estimate all the same — asked again at once, it must not be free — and
// the global database budget its base.
func (m *Meter) Busy() bool { return m.busy.Load() }

// MarkBusy records on the Meter of ctx, if it carries one, that its
// request was answered a busy 503.
func MarkBusy(ctx context.Context) {
	if m := meterOf(ctx); m != nil {
		m.busy.Store(true)
	}
}

func (m *Meter) add(d time.Duration) {
	m.used.Store(true)
	m.ns.Add(int64(d))
}

// AddTo adds d to the Meter of ctx, if it carries one: database time spent
// on ctx's behalf under another context.
func AddTo(ctx context.Context, d time.Duration) {
	if m := meterOf(ctx); m != nil {
		m.add(d)
	}
}

// metered is the time a call adds to its meter: the database's own time
// when the call read it (Timing.Server), else — a call cut short, a write
// — the time from sending it to its last answer.
func (t Timing) metered() time.Duration {
	if t.Server > 0 {
		return t.Server
	}
	return t.DB
}

func meterOf(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}
