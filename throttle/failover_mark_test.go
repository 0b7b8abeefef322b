package throttle

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// settleFirstStore is a real store whose next Admit first runs before: a
// request of the caller that finishes on another goroutine after the
// Failover took its mark for the admission but before the admission's
// operation joined the caller's lane.
type settleFirstStore struct {
	Store
	before func()
}

func (s *settleFirstStore) Admit(ctx context.Context, req Request) (Admission, error) {
	if f := s.before; f != nil {
		s.before = nil
		f()
	}
	return s.Store.Admit(ctx, req)
}

// A debit settled after an admission's mark but queued ahead of the
// admission reaches Redis before it: Redis's answer holds it already, and
// what the Failover knows must not take it a second time. Else the caller
// is refused in process, with no call, for a request the bucket can pay.
func TestFailoverDebitQueuedAheadOfTheAdmissionCountsOnce(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s := NewRedisStore(fx.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		p := &settleFirstStore{Store: s}
		f := &Failover{Primary: p, Mode: FailClosed, Timeout: 10 * time.Second, ProbeInterval: time.Hour,
			Logger: slog.New(slog.DiscardHandler)}
		b := Bucket{Key: fx.key("mark-debit"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 4, Debt: 10}) // 6 left
		p.before = func() { a.Ticket.Settle(6) }                    // it cost 6: 2 more, 4 left
		if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5, Debt: 10}); r.Allowed {
			t.Fatalf("5 of 4 tokens admitted: %+v", r.Result)
		}
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got < 3.99 || got > 4.01 {
			t.Fatalf("Redis holds %.3f tokens, want 4", got)
		}
		free := f.FreeRefusals()
		if r := mustAdmit(t, f, Request{Bucket: b, Cost: 3, Debt: 10}); !r.Allowed {
			t.Fatalf("a request of 3 with 4 in the bucket: refused with %.3f tokens (%d free refusals): the debit counted twice",
				r.Result.Remaining, f.FreeRefusals()-free)
		} else {
			r.Ticket.Release()
		}
	})
}

// A refund settled after an admission's mark but queued ahead of the
// admission is in Redis's answer already: counted again, what the
// Failover knows holds tokens the bucket does not, and fail_mode local,
// seeded from it, admits what the shared bucket refused.
func TestFailoverRefundQueuedAheadOfTheAdmissionCountsOnce(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s := NewRedisStore(fx.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		fl := &flakyStore{Store: s}
		p := &settleFirstStore{Store: fl}
		f := &Failover{Primary: p, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 1,
			Timeout: 10 * time.Second, ProbeInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
		b := Bucket{Key: fx.key("mark-refund"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 6}) // 4 left
		p.before = func() { a.Ticket.Settle(3) }          // it cost 3: 3 back, 7 left
		r := mustAdmit(t, f, Request{Bucket: b, Cost: 6}) // 1 left
		if !r.Allowed {
			t.Fatalf("6 of 7 tokens refused: %+v", r.Result)
		}
		r.Ticket.Release()
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got < 0.99 || got > 1.01 {
			t.Fatalf("Redis holds %.3f tokens, want 1", got)
		}
		fl.set(true) // Redis fails: the local bucket starts from what Redis last said
		if l := mustAdmit(t, f, Request{Bucket: b, Cost: 3}); l.Allowed {
			t.Fatalf("Redis down, its bucket last at 1: a local admission of 3 admitted (%.3f left): the refund counted twice",
				l.Result.Remaining)
		}
	})
}
