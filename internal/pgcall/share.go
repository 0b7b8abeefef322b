package pgcall

import (
	"context"
	"errors"
)

// Share bounds how many calls one class of callers makes at once: a share
// of the pool, so that however many such callers there are and however
// fast they ask, the others always find a connection — and the database
// CPU they need — without waiting behind them. geotoll gives the
// anonymous callers one, all together (each of them has a budget of its
// own, but a crawl from many addresses adds those budgets up), and each
// API key one of its own (Shares). A call waits for a slot as it waits
// for a connection (within DB.AcquireTimeout, a 503 after) and holds it
// until its connection is back in the pool.
type Share struct {
	slots chan struct{}
	own   bool // one caller's (Shares), not a class's: its 503 says so
}

// NewShare makes a share of n calls at once (at least 1).
func NewShare(n int) *Share { return newShare(n, false) }

func newShare(n int, own bool) *Share { return &Share{slots: make(chan struct{}, max(n, 1)), own: own} }

// Size is the calls the share allows at once.
func (s *Share) Size() int { return cap(s.slots) }

// InUse is the calls holding a slot now.
func (s *Share) InUse() int { return len(s.slots) }

var (
	errShareBusy    = errors.New("every connection of the callers' share is busy")
	errOwnShareBusy = errors.New("every connection of the caller's own share is busy")
)

func (s *Share) take(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		if s.own {
			return errors.Join(errOwnShareBusy, ctx.Err())
		}
		return errors.Join(errShareBusy, ctx.Err())
	}
}

func (s *Share) give() { <-s.slots }
