package pgcall

import (
	"context"
	"sync/atomic"
	"time"
)

// Budget caps the database time of the calls made under a context: the
// time a request paid for. Each call runs under at most the Budget as a
// whole, and a call's statements under at most what is left of it (each
// one's statement_timeout shortened to what the statements before it left
// of the call's), so a request whose price was far too low — a single
// layer's or a composite's, of many statements — is cut at the bound it
// paid for, not at its layers' timeouts. Set it once the price is known,
// before the first call.
//
// It also carries the Share, if any, whose slots the calls take.
type Budget struct {
	ns    atomic.Int64
	share atomic.Pointer[Share]
}

type budgetKey struct{}

// WithBudget returns ctx carrying a new, unset Budget, and the Budget.
func WithBudget(ctx context.Context) (context.Context, *Budget) {
	b := &Budget{}
	return context.WithValue(ctx, budgetKey{}, b), b
}

// Set caps the calls at d (0 lifts the cap).
func (b *Budget) Set(d time.Duration) { b.ns.Store(int64(max(d, 0))) }

// Limit is the cap, 0 when none is set.
func (b *Budget) Limit() time.Duration { return time.Duration(b.ns.Load()) }

// Join makes the calls take a slot of s (nil: none) while they run.
func (b *Budget) Join(s *Share) { b.share.Store(s) }

// ShareOf is the Share the calls under ctx take a slot of, if any: work
// started under it must not be waited for by callers outside it.
func ShareOf(ctx context.Context) *Share {
	if b, _ := ctx.Value(budgetKey{}).(*Budget); b != nil {
		return b.share.Load()
	}
	return nil
}

// capped is a call's budget under ctx's Budget, if any.
func capped(ctx context.Context, budget time.Duration) time.Duration {
	if b, _ := ctx.Value(budgetKey{}).(*Budget); b != nil {
		if l := b.Limit(); l > 0 && l < budget {
			return l
		}
	}
	return budget
}
