package toll

import (
	"context"
	"sync/atomic"
)

// callerNote is where the toll writes who it charged a request to.
type callerNote struct{ caller, tier atomic.Pointer[string] }

type callerNoteKey struct{}

// NoteCaller returns ctx carrying a place where the toll writes who it
// charges the request to, and a function reading it: the caller's bucket
// identity ("ip:…" — the client address, behind trusted proxies the one
// they forwarded —, an IPv6 network, or "k:<id>" for an API key; never a
// key) and tier, both "" while nothing was charged. For the access log,
// whose remote address is a proxy's behind one.
func NoteCaller(ctx context.Context) (context.Context, func() (caller, tier string)) {
	n := &callerNote{}
	return context.WithValue(ctx, callerNoteKey{}, n), func() (string, string) {
		var caller, tier string
		if p := n.caller.Load(); p != nil {
			caller = *p
		}
		if p := n.tier.Load(); p != nil {
			tier = *p
		}
		return caller, tier
	}
}

// note records c in ctx's callerNote, if it carries one.
func note(ctx context.Context, c Caller) {
	if n, ok := ctx.Value(callerNoteKey{}).(*callerNote); ok {
		id, tier := c.Identity, c.Tier
		n.caller.Store(&id)
		n.tier.Store(&tier)
	}
}
