package pgcall

import (
	"context"
	"sync/atomic"
	"time"
)

// Meter adds up the database time (Timing.DB) of every call made under a
// context, including the part of a call that outlives its answer: once the
// request's handler has returned (after Respond waited), the sum is final.
// A render shared by several requests is metered to the request that
// started it.
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

func meterOf(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}
