package density

import "context"

// Slots bounds how many builds run at once among the refreshers (and Build
// calls) whose Options share it: each build reads a whole relation, and
// the pool it reads through is shared with other work.
//
// A build waits for its slot under its caller's context, and only then
// starts its own deadline (statement timeout + pgcall.AnswerGrace): were the
// wait under that deadline, a build queued behind others for longer would be
// given up on before it sent anything — and, queued the same way every
// cycle, never be built.
type Slots struct{ sem chan struct{} }

// NewSlots lets n builds run at once (at least 1).
func NewSlots(n int) *Slots { return &Slots{sem: make(chan struct{}, max(n, 1))} }

// Cap is how many builds s lets run at once.
func (s *Slots) Cap() int { return cap(s.sem) }

// acquire waits for a slot until ctx ends, and returns what gives it back;
// a nil s bounds nothing.
func (s *Slots) acquire(ctx context.Context) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
