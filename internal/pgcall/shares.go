package pgcall

import (
	"sync"
	"time"
)

// Shares gives each caller a Share of its own, all of one size: however
// many requests one caller sends, its calls hold at most that many
// connections at once, and the others find the rest. geotoll gives every
// API key one (database.key_max_conns), one less than the pool, so that
// no key — with statements that ignore cancellation, say — holds every
// connection.
//
// A caller's Share is forgotten once it has been idle for a while (no slot
// held, not handed out for Idle), checked when the map has doubled since
// it was last swept; memory stays bounded by the callers of the last few
// minutes. Idle must outlast the time between handing a Share out and its
// call taking a slot (a request's lifetime): a Share forgotten in between
// would let that caller hold twice the size for a moment.
type Shares struct {
	size int
	idle time.Duration
	now  func() time.Time // the clock; tests set it

	mu      sync.Mutex
	m       map[string]*callerShare
	sweepAt int
}

type callerShare struct {
	share *Share
	used  time.Time // handed out last
}

// NewShares makes Shares of n calls at once each (at least 1), forgotten
// after idle.
func NewShares(n int, idle time.Duration) *Shares {
	return &Shares{size: max(n, 1), idle: idle, now: time.Now, m: map[string]*callerShare{}, sweepAt: 64}
}

// Size is the calls each caller's Share allows at once.
func (s *Shares) Size() int { return s.size }

// Of is the caller's Share.
func (s *Shares) Of(caller string) *Share {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[caller]
	if c == nil {
		if len(s.m) >= s.sweepAt {
			s.sweepLocked(now)
		}
		c = &callerShare{share: newShare(s.size, true)}
		s.m[caller] = c
	}
	c.used = now
	return c.share
}

// Len is how many callers' Shares are remembered.
func (s *Shares) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// sweepLocked forgets the idle Shares; the next sweep comes when the map
// has doubled again.
func (s *Shares) sweepLocked(now time.Time) {
	for k, c := range s.m {
		if c.share.InUse() == 0 && now.Sub(c.used) >= s.idle {
			delete(s.m, k)
		}
	}
	s.sweepAt = max(64, 2*len(s.m))
}
