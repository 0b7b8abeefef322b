package throttle

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// The replica that holds an idle lease reads its caller's bucket, run to
// the floor less the lease by another replica's debit, as its next
// admission finds it: that admission gives the lease back first, and the
// bucket is no deeper than the floor. PeekFloor read the floor less what
// the lease spent.
func TestPeekFloorOfTheLeaseHolder(t *testing.T) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := f.store
		b := Bucket{Key: f.key("holder"), Limit: Limit{Rate: 0.001, Capacity: 100}}
		const debt = 10
		req := Request{Bucket: b, Cost: 1, Debt: debt}
		mustAdmit(t, s, req).Ticket.Release() // seen
		mustAdmit(t, s, req).Ticket.Release() // asks for a lease
		for range 6 {                         // spent on it
			a := mustAdmit(t, s, req)
			if !a.inProcess {
				t.Fatalf("not admitted on the lease: %+v", a)
			}
			a.Ticket.Release()
		}
		// Another replica's request, settled far above its price.
		sh := shapeOf(req)
		f.run(b.Key, sh, []op{{kind: opAdmit, id: "other", amount: micro}})
		f.run(b.Key, sh, []op{{kind: opFinish, id: "other", amount: 500 * micro}})
		got, err := s.PeekFloor(t.Context(), b, debt, 0)
		if err != nil {
			t.Fatal(err)
		}
		adm := mustAdmit(t, s, req)
		defer adm.Ticket.Release()
		if d := got.Remaining - adm.Result.Remaining; d < -0.01 || d > 0.01 || adm.Allowed {
			t.Errorf("PeekFloor read %v; the admission found %v (allowed %v)", got.Remaining, adm.Result.Remaining, adm.Allowed)
		}
		flushWithin(t, s)
	})
}

// A read queued before an admit that asks for a lease is answered in a
// batch of its own: answered beside the admit, ahead of it, it read the
// bucket without the lease and then had the lease granted in the same
// reply added (58 where the bucket held 50 before the call and 49 after).
func TestPeekFloorQueuedBeforeALeaseAsk(t *testing.T) {
	fx := newRedisFixture(t, testenv.Redis(t))
	b := Bucket{Key: fx.key("peeklease"), Limit: Limit{Rate: 0.001, Capacity: 100}}
	g := &slowScripter{Scripter: fx.rdb, key: b.Key, sent: make(chan struct{}, 1)}
	s := NewRedisStore(g, RedisOptions{Timeout: 5 * time.Second, ClockSkew: 10 * time.Second, LeaseHold: testLeaseHold})
	a := mustAdmit(t, s, Request{Bucket: b, Cost: 50})
	a.Ticket.Settle(50) // the bucket at 50
	flushWithin(t, s)
	for _, peek := range []struct {
		name string
		read func() (Result, error)
	}{
		{"PeekFloor", func() (Result, error) { return s.PeekFloor(context.Background(), b, 0, 0) }},
		{"Peek", func() (Result, error) { return s.Peek(context.Background(), b) }},
	} {
		before, err := peek.read()
		if err != nil {
			t.Fatal(err)
		}
		g.slow(time.Second)
		first := make(chan error, 1)
		go func() { _, err := peek.read(); first <- err }()
		<-g.sent // the lane's call is on its way
		second := make(chan Result, 1)
		go func() { r, _ := peek.read(); second <- r }()
		queued(t, s, b.Key, 1)
		adm := make(chan Admission, 1)
		go func() { adm <- mustAdmit(t, s, Request{Bucket: b, Cost: 1}) }()
		queued(t, s, b.Key, 2)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		r, ad := <-second, <-adm
		if r.Remaining > before.Remaining+0.01 {
			t.Errorf("%s queued before a lease's ask read %v; the bucket held %v before (%v after the admission)", peek.name, r.Remaining, before.Remaining, ad.Result.Remaining)
		}
		ad.Ticket.Release()
		flushWithin(t, s)
	}
}

// A read of an aggregate bucket (an anonymous IPv6 caller's /48) that the
// Failover answers from what it learnt counts what this replica spent
// through the aggregate since: the read it kept lacked this replica's own
// admissions and settlements (100 where the store held 40, then -80).
func TestFailoverAggregateReadCountsOwnSpending(t *testing.T) {
	mem := NewMemoryStore(MemoryOptions{})
	f := &Failover{Primary: mem, Mode: FailClosed, ProbeInterval: time.Hour, PeekReuse: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler)}
	agg := Bucket{Key: "{n}:agg", Limit: Limit{Rate: 0.001, Capacity: 100}}
	own := Bucket{Key: "{n}:agg:one", Limit: Limit{Rate: 0.001, Capacity: 100}}
	ctx := context.Background()
	same := func(when string) {
		t.Helper()
		r, err1 := f.PeekFloor(ctx, agg, 80, 1)
		m, err2 := mem.PeekFloor(ctx, agg, 80, 1)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if d := r.Remaining - m.Remaining; d < -0.1 || d > 0.1 {
			t.Errorf("%s: the /48 reads %v through the Failover, %v in the store", when, r.Remaining, m.Remaining)
		}
	}
	same("before")
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: &agg, Cost: 60, Debt: 80})
	if !a.Allowed {
		t.Fatalf("%+v", a)
	}
	same("admitted")
	a.Ticket.Settle(200)
	same("settled")
}
