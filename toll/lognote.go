package toll

import (
	"context"
	"sync/atomic"
)

// CallerNote is where the toll writes whom it identified a request as: the
// caller's bucket identity ("ip:…" — the client address, behind trusted
// proxies the one they forwarded —, an IPv6 network, or "k:<id>" for an API
// key; never a key) and tier; and, once the request is settled, what it
// was charged. For the access log, whose remote address is a proxy's
// behind one, and whose line is written once the request is settled,
// where the answer's X-Request-Cost may have gone out before its
// statement stopped (a client that hung up, a 503 whose statement ignored
// its cancel): the charge is the time the statement ran until it stopped.
type CallerNote struct {
	p       atomic.Pointer[noted]
	charged atomic.Pointer[string]
}

type noted struct{ caller, tier string }

type callerNoteKey struct{}

// WithCallerNote returns ctx carrying n, for the toll to write.
func WithCallerNote(ctx context.Context, n *CallerNote) context.Context {
	return context.WithValue(ctx, callerNoteKey{}, n)
}

// Read returns what was noted: "", "" when the request was identified as
// nobody (it asked nothing the toll prices, or was refused before).
func (n *CallerNote) Read() (caller, tier string) {
	if v := n.p.Load(); v != nil {
		return v.caller, v.tier
	}
	return "", ""
}

// note records c in ctx's CallerNote, if it carries one.
func note(ctx context.Context, c Caller) {
	if n, ok := ctx.Value(callerNoteKey{}).(*CallerNote); ok {
		n.p.Store(&noted{caller: c.Identity, tier: c.Tier})
	}
}

// Charged returns what the request's bucket was asked to pay once it was
// settled, as X-Request-Cost writes it — 0 for a shadow admission or one
// without a ticket (fail_mode open), which its bucket does not pay; what
// a bucket at its debt floor takes of it may be less — or "" when it was
// not settled (a refusal, a dry run, a request the toll did not price).
func (n *CallerNote) Charged() string {
	if v := n.charged.Load(); v != nil {
		return *v
	}
	return ""
}

// noteCharged records cost, a settled charge, in ctx's CallerNote, if it
// carries one.
func noteCharged(ctx context.Context, cost float64) {
	if n, ok := ctx.Value(callerNoteKey{}).(*CallerNote); ok {
		s := fmtTokens(cost)
		n.charged.Store(&s)
	}
}
