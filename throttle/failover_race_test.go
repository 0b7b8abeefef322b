package throttle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An admission whose caller gave up while its call was on its way is
// voided once Redis admits it: its price goes back to the bucket. A
// refusal of the caller that Redis answered in between, for want of that
// price, raced a refund as much as one of a settlement does, and must not
// be kept for free refusals: the caller is refused in process, with no
// call, for requests the bucket holds.
func TestFailoverRefusalBesideAnAbandonedAdmissionIsNotKept(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g, s, f := gatedFailover(fx)
		b := Bucket{Key: fx.key("abandoned-refusal"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		mustPeek(t, s, b) // the script is loaded: each call below is one
		gate1 := make(chan struct{})
		g.gate.Store(&gate1)
		first := make(chan Admission, 1)
		go func() { first <- mustAdmit(t, f, Request{Bucket: b, Cost: 1}) }()
		<-g.sent // its call is on its way
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gone := make(chan error, 1)
		go func() { _, err := f.Admit(ctx, Request{Bucket: b, Cost: 8}); gone <- err }()
		queued(t, s, b.Key, 1)
		refused := make(chan Admission, 1)
		go func() { refused <- mustAdmit(t, f, Request{Bucket: b, Cost: 5}) }()
		queued(t, s, b.Key, 2)
		gate2 := make(chan struct{})
		g.gate.Store(&gate2)
		close(gate1)
		<-g.sent // the batch of the 8 and the 5 is on its way
		g.gate.Store(nil)
		cancel() // the 8's caller hangs up: its admission is abandoned
		if err := <-gone; err == nil {
			t.Fatal("an admission whose caller hung up answered")
		}
		close(gate2)
		(<-first).Ticket.Release()
		if r := <-refused; r.Allowed {
			t.Fatalf("5 behind 1 and 8 of 10: admitted %+v", r.Result)
		}
		flushWithin(t, s) // the void gives the 8 back
		if got := mustPeek(t, s, b).Remaining; got < 8.99 {
			t.Fatalf("Redis holds %.3f tokens after the void, want 9", got)
		}
		free := f.FreeRefusals()
		if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !r.Allowed {
			t.Fatalf("a request of 5 with 9 in the bucket: refused with %.3f tokens (%d free refusals)",
				r.Result.Remaining, f.FreeRefusals()-free)
		} else {
			r.Ticket.Release()
		}
	})
}

// Budget reads are free to their caller (GET /budget, dry runs), and the
// server asks Redis for each. Riding the caller's lane, they take places
// in its queue (MaxPending) that the caller's finishes need: a debit
// settled while reads wait there must still reach the bucket, not be
// dropped — a caller must not buy its requests' overspend back with
// free reads.
func TestFreeReadsDoNotCrowdOutADebit(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g := &gatedScripter{Scripter: fx.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, MaxPending: 2, LeaseRequests: -1})
		b := Bucket{Key: fx.key("reads-crowd-debit"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 2, Debt: 10}) // 8 left
		gate := make(chan struct{})
		g.gate.Store(&gate)
		done := make(chan Admission, 1)
		go func() { done <- mustAdmit(t, s, Request{Bucket: b, Cost: 1, Debt: 10}) }()
		<-g.sent // the caller's call is on its way
		g.gate.Store(nil)
		reads := make(chan error, 2)
		for range 2 {
			go func() { _, err := s.Peek(context.Background(), b); reads <- err }()
		}
		queued(t, s, b.Key, 2) // two reads wait: the queue is at MaxPending
		a.Ticket.Settle(10)    // it cost 10: 8 more
		close(gate)
		(<-done).Ticket.Release()
		for range 2 {
			if err := <-reads; err != nil && !errors.Is(err, ErrBusy) {
				t.Errorf("a read: %v", err)
			}
		}
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got > -0.99 {
			t.Fatalf("after a request that cost 10 of 2 paid, and one of 1: Redis holds %.3f tokens, want -1 (%d operations dropped)",
				got, s.Stats().Dropped)
		}
	})
}
