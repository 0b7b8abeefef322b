package throttle

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestLeaseDebitQueuedBehindItsAsk: a debit queued while the admit that
// asks for a lease is still unsent takes the ask back (no lease), so the
// debit meets the debt floor with the tokens the lease would have taken.
func TestLeaseDebitQueuedBehindItsAsk(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second})
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("lease-debit-behind-ask"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		one := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
		big := Request{Bucket: b, Cost: 70, Debt: 3, MaxInFlight: 8}
		z, zm := mustAdmit(t, s, one), mustAdmit(t, mem, one) // 79, no lease (bucket unseen)
		x, xm := mustAdmit(t, s, big), mustAdmit(t, mem, big) // 9, no lease (9 < 10)
		if st := s.Stats(); st.Leases != 0 {
			t.Fatalf("setup: %+v", st)
		}
		gate := make(chan struct{})
		g.gate.Store(&gate)
		z.Ticket.Settle(1) // a finish alone: its call holds the lane
		zm.Ticket.Settle(1)
		<-g.sent
		g.gate.Store(nil)
		done := make(chan Admission, 1)
		go func() { done <- mustAdmit(t, s, one) }() // queued [p, ask] behind the busy lane
		time.Sleep(50 * time.Millisecond)
		x.Ticket.Settle(80) // debit 10, queued after the ask
		close(gate)
		p := <-done
		pm := mustAdmit(t, mem, one)
		xm.Ticket.Settle(80)
		p.Ticket.Settle(1)
		pm.Ticket.Settle(1)
		t.Logf("stats %+v", s.Stats())
		sameBucket(t, s, mem, b)
	})
}

// TestLeaseRefusalWhileItsGiveBackIsOnItsWay: a request Redis refuses
// while the lease's give-back is queued, not yet applied, is asked again
// and admitted when the lease's tokens pay it — also when they pay it
// exactly (76.5: the bucket's 70 and the 6.5 the lease gives back).
func TestLeaseRefusalWhileItsGiveBackIsOnItsWay(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, cost := range []float64{75, 76.5} {
			g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
			s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseHold: testLeaseHold})
			mem := NewMemoryStore(MemoryOptions{})
			b := Bucket{Key: f.key(fmt.Sprint("lease-giveback-on-way-", cost)), Limit: Limit{Rate: 1e-6, Capacity: 80}}
			r, rm := withBusyLease(t, s, mem, b) // Redis 70, lease 7, r runs on it
			req := Request{Bucket: b, Cost: cost, Debt: 3, MaxInFlight: 8}
			gate := make(chan struct{})
			g.gate.Store(&gate)
			done := make(chan Admission, 1)
			go func() { done <- mustAdmit(t, s, req) }()
			<-g.sent // the big admit is on its way
			g.gate.Store(nil)
			am := mustAdmit(t, mem, req) // in-process: 77 hold it
			r.Ticket.Settle(1.5)         // a debit: the lease is done, its give-back queued
			close(gate)
			a := <-done
			rm.Ticket.Settle(1.5)
			if a.Allowed != am.Allowed || !am.Allowed {
				t.Errorf("cost %v: leased store allowed=%v (%+v), in-process allowed=%v", cost, a.Allowed, a.Result, am.Allowed)
			}
			a.Ticket.Settle(cost)
			am.Ticket.Settle(cost)
			sameBucket(t, s, mem, b)
		}
	})
}

// TestLeaseShadowRetryKeepsItsSlot: a shadow admission asked again for
// the lease's tokens comes back with a slot it holds, even when its
// context ends early.
func TestLeaseShadowRetryKeepsItsSlot(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("lease-shadow-ctx"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, f.store, nil, b)
		defer r.Ticket.Settle(1)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		a, err := f.store.Admit(ctx, Request{Bucket: b, Cost: 75, Debt: 3, MaxInFlight: 8, Shadow: true})
		if err == nil && a.Allowed && a.Ticket.finished.Load() {
			t.Errorf("admitted (shadow=%v) with its ticket already finished: its slot is not held", a.Shadow)
		}
	})
}

// TestLeaseSlotOutlivesItsRequests: a request admitted on a lease as late
// as its hold may run for the whole request TTL, so the lease's slot in
// Redis is kept open at least a hold longer than the request TTL from the
// call that asked for it (the in-flight cap's sweep cannot drop it under
// its request) — and its give-back still lands.
func TestLeaseSlotOutlivesItsRequests(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("lease-ttl"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		const ttl = 600 * time.Millisecond // a hold of 300 ms (TTL/2)
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8, TTL: ttl}
		mustAdmit(t, f.store, req).Ticket.Settle(1)
		mustAdmit(t, mem, req).Ticket.Settle(1)
		before := f.redisClock().ms()
		mustAdmit(t, f.store, req).Ticket.Settle(1) // asks for the lease
		mustAdmit(t, mem, req).Ticket.Settle(1)
		f.store.mu.Lock()
		ls := f.store.leases[b.Key]
		f.store.mu.Unlock()
		if ls == nil {
			t.Fatal("no lease taken")
		}
		rec, ok := f.state(b.Key).open[ls.id]
		if want := before + (ttl + ttl/2).Milliseconds(); !ok || rec.expiresMS < want {
			t.Fatalf("the lease's slot %+v (open %v) expires before %d, the call's time + TTL + hold", rec, ok, want)
		}
		r, rm := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if f.store.Stats().Local != 1 {
			t.Fatal("the request was not admitted on a lease")
		}
		r.Ticket.Settle(1)
		rm.Ticket.Settle(1)
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseAdmitsNothingOverDebt: once a debit the busy lease paid only in
// part has taken the bucket into debt, the lease admits nothing the
// bucket and the lease together could not pay.
func TestLeaseAdmitsNothingOverDebt(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("lease-over-debt"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b) // Redis 70, lease 7
		big := Request{Bucket: b, Cost: 70, Debt: 3, MaxInFlight: 8}
		x, xm := mustAdmit(t, f.store, big), mustAdmit(t, mem, big)
		x.Ticket.Settle(80) // debit 10: 7 from the lease, 3 to Redis (-3)
		xm.Ticket.Settle(80)
		time.Sleep(100 * time.Millisecond) // the debit lands; the lease stays (busy)
		r.Ticket.Settle(0)                 // refund 1 to the lease
		rm.Ticket.Settle(0)
		one := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
		got, want := mustAdmit(t, f.store, one), mustAdmit(t, mem, one)
		if got.Allowed != want.Allowed {
			t.Errorf("leased store allowed=%v remaining %v (local %d); in-process allowed=%v remaining %v",
				got.Allowed, got.Result.Remaining, f.store.Stats().Local, want.Allowed, want.Result.Remaining)
		}
		got.Ticket.Settle(1)
		want.Ticket.Settle(1)
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseRefusalBehindAFailover: behind a Failover (its call timeout,
// 100 ms by default) a request Redis refuses for the tokens a busy lease
// holds is admitted at once, however long the lease's request runs.
func TestLeaseRefusalBehindAFailover(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		fo := &Failover{Primary: f.store, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Timeout: 100 * time.Millisecond}
		b := Bucket{Key: f.key("lease-failover-wait"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b) // Redis 70, lease 7
		time.AfterFunc(300*time.Millisecond, func() { r.Ticket.Settle(1) })
		req := Request{Bucket: b, Cost: 75, Debt: 3, MaxInFlight: 8}
		start := time.Now()
		got, err := fo.Admit(context.Background(), req)
		want := mustAdmit(t, mem, req)
		if err != nil || got.Allowed != want.Allowed {
			t.Errorf("after %v: failover(leased) allowed=%v err=%v remaining %v; in-process allowed=%v",
				time.Since(start).Round(time.Millisecond), got.Allowed, err, got.Result.Remaining, want.Allowed)
		}
		time.Sleep(350 * time.Millisecond)
		rm.Ticket.Settle(1)
		got.Ticket.Release()
		want.Ticket.Release()
	})
}
