package throttle

import (
	"math"
	"testing"
	"time"
)

// An admit queued beside a busy lease, whose lease hands its tokens back
// (a move) while the admit's call is on its way, answers the bucket as it
// is: Redis applied the admit before the move, so its reply lacks what the
// lease held, and the admission adds what the lease handed back. It added
// what the lease held after the move, nothing: the admission's Remaining —
// the budget headers, and what a Failover keeps for budget reads — read low
// by a lease's worth until the next answer.
func TestAdmitAnsweredBeforeItsLeasesMoveCountsTheLease(t *testing.T) {
	t.Parallel()
	// settle: the lease's request settles at 0.1 while the call is out
	// too, and the lease, moved already, gives back its refund: two
	// hand-backs behind the admit, both lacking from its reply (the last
	// alone was counted by a first version of the fix).
	for _, settle := range []bool{false, true} {
		t.Run(map[bool]string{false: "a move", true: "a move and a give-back"}[settle], func(t *testing.T) {
			t.Parallel()
			forEachRedis(t, func(t *testing.T, f *redisFixture) { admitBesideAMovedLease(t, f, settle) })
		})
	}
}

func admitBesideAMovedLease(t *testing.T, f *redisFixture, settle bool) {
	b := Bucket{Key: f.key("lease-reading"), Limit: Limit{Rate: 0.001, Capacity: 800}}
	g := &slowScripter{Scripter: f.rdb, key: b.Key, sent: make(chan struct{}, 1)}
	s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, LeaseHold: testLeaseHold})
	req := func(c float64) Request { return Request{Bucket: b, Cost: c, Debt: 3, MaxInFlight: 8} }
	mustAdmit(t, s, req(100))            // Redis 700
	mustAdmit(t, s, req(12.5))           // and a lease of 100: Redis 587.5
	onLease := mustAdmit(t, s, req(0.5)) // on the lease: it is busy
	if st := s.Stats(); st.Local != 1 || st.Leases != 1 {
		t.Fatalf("not on a lease: %+v", st)
	}
	g.slow(500 * time.Millisecond)
	got := make(chan Admission, 1)
	go func() { // to Redis, beside the busy lease
		a, err := s.Admit(t.Context(), req(10))
		if err != nil {
			t.Error(err)
		}
		got <- a
	}()
	<-g.sent // its call is on its way
	s.mu.Lock()
	ls := s.leases[b.Key]
	s.mu.Unlock()
	s.retire(ls) // a move: queued behind the call
	spent := 0.5
	if settle {
		onLease.Ticket.Settle(0.1) // a refund of 0.4: the moved lease gives it back
		spent = 0.1
	}
	a := <-got
	if a.Ticket == nil {
		t.Fatal("not admitted")
	}
	// 800 - 100 - 12.5 - the lease's request - 10, and a few thousandths
	// of refill.
	if want := 800 - 100 - 12.5 - spent - 10; math.Abs(a.Result.Remaining-want) > 0.05 {
		t.Errorf("the admission: %v remaining; want %v", a.Result.Remaining, want)
	}
	a.Ticket.Settle(10)
	if !settle {
		onLease.Ticket.Settle(0.5)
	}
}
