package pgcall

import (
	"context"
	"sync/atomic"
	"time"
)

// Meter adds up the database time (Timing.DB) of every call made under a
// context, including the part of a call that outlives its answer: once the
// request's handler has returned (after Respond waited), the sum is final.
// Work done for a request under a context of its own (a render shared by
// several requests) is added with AddTo.
type Meter struct{ ns atomic.Int64 }

type meterKey struct{}

// WithMeter returns ctx carrying a new Meter, and the Meter.
func WithMeter(ctx context.Context) (context.Context, *Meter) {
	m := &Meter{}
	return context.WithValue(ctx, meterKey{}, m), m
}

// DB is the database time metered so far.
func (m *Meter) DB() time.Duration { return time.Duration(m.ns.Load()) }

func (m *Meter) add(d time.Duration) { m.ns.Add(int64(d)) }

// AddTo adds d to the Meter of ctx, if it carries one: database time spent
// on ctx's behalf under another context.
func AddTo(ctx context.Context, d time.Duration) {
	if m := meterOf(ctx); m != nil {
		m.add(d)
	}
}

func meterOf(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}
