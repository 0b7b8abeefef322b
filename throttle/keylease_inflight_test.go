package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaseSlotTakenAfterAnAdmitDoesNotRefuseIt: an admit queued while
// the caller's lease is still asked for reaches Redis behind the lease's
// grant and ahead of the finish of another request of the caller, whose
// client has meanwhile started its next request in process on the lease.
// Redis counts the finished request and the lease's slot, and refuses the
// admit at an in-flight cap of 2; without the lease the next request would
// have queued behind the admit and the finish, and the admit held one of
// two slots. The refusal is asked again with the lease handed back, and
// admitted; the bucket then holds what the in-process store holds, and no
// slot stays open.
func TestLeaseSlotTakenAfterAnAdmitDoesNotRefuseIt(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseHold: testLeaseHold})
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("inflight-beside-granted-lease"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 2}
		mustAdmit(t, s, req).Ticket.Settle(1) // shows the bucket: the next admit asks for a lease
		mustAdmit(t, mem, req).Ticket.Settle(1)
		flushWithin(t, s) // its finish lands: the next call is y's

		first, second := make(chan struct{}), make(chan struct{})
		g.gate.Store(&first)
		ys := make(chan Admission, 1)
		go func() { ys <- mustAdmit(t, s, req) }() // [finish, y, lease ask]
		<-g.sent
		ym := mustAdmit(t, mem, req)
		xs := make(chan Admission, 1)
		go func() { xs <- mustAdmit(t, s, req) }() // queued beside the lease asked for
		waitQueued(t, s, b.Key, opAdmit, 1)
		xm := mustAdmit(t, mem, req)
		g.gate.Store(&second)
		close(first) // y admitted, the lease granted: 2 slots open
		<-g.sent     // x's call is on its way
		g.gate.Store(nil)
		y := <-ys
		y.Ticket.Settle(1) // its finish queues behind x
		ym.Ticket.Settle(1)
		y2, y2m := mustAdmit(t, s, req), mustAdmit(t, mem, req)
		if st := s.Stats(); !y2.Allowed || st.Leases != 1 || st.Local != 1 {
			t.Fatalf("setup: y's next request admitted %v, stats %+v; want it on the lease", y2.Allowed, st)
		}
		close(second)
		x := <-xs
		if !x.Allowed || !xm.Allowed {
			t.Fatalf("x, one of 2 requests open at an in-flight cap of 2: admitted %v (refusal %v, in process admitted %v); want admitted",
				x.Allowed, x.Refusal, xm.Allowed)
		}
		for _, a := range []Admission{x, xm, y2, y2m} {
			a.Ticket.Settle(1)
		}
		sameBucket(t, s, mem, b)
		if n := f.state(b.Key).b.n; n != 0 {
			t.Fatalf("%d requests open in Redis after every request finished and Flush", n)
		}
	})
}

// waitQueued waits until key's lane holds n operations of kind, not yet
// sent.
func waitQueued(t *testing.T, s *RedisStore, key string, kind opKind, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s.mu.Lock()
		found := 0
		if l := s.lanes[key]; l != nil {
			for _, p := range l.queue {
				if p.op.kind == kind {
					found++
				}
			}
		}
		s.mu.Unlock()
		if found >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %c queued on %s's lane, want %d", found, kind, key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAnAdmitAskedAgainGoesWithoutALeaseStillAskedFor: an admit asked
// again after a refusal the caller's lease may have caused is queued
// behind another request's call that asks for a new lease. That lease
// would take a slot ahead of it once more (an in-flight cap of 2: the
// other request and the lease): its ask, not sent yet, is taken back, or,
// on its way, the lease is given back as soon as it is granted, ahead of
// the admit, and admits nothing. The admit is admitted, as without the
// lease; the bucket then holds what the in-process store holds, and no
// slot stays open.
func TestAnAdmitAskedAgainGoesWithoutALeaseStillAskedFor(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, sent := range []bool{false, true} {
			g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
			s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseHold: testLeaseHold})
			mem := NewMemoryStore(MemoryOptions{})
			b := Bucket{Key: f.key(fmt.Sprint("asked-again-beside-an-ask-", sent)), Limit: Limit{Rate: 1e-6, Capacity: 80}}
			req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 2}
			z, zm := mustAdmit(t, s, req), mustAdmit(t, mem, req) // shows the bucket: the next admit asks for a lease
			zm.Ticket.Settle(1)
			gate := make(chan struct{})
			if sent {
				z.Ticket.Settle(1)
				flushWithin(t, s)
				g.gate.Store(&gate)
			} else {
				g.gate.Store(&gate)
				z.Ticket.Settle(1) // its finish's call holds the lane: the ask waits
				<-g.sent
			}
			cs := make(chan Admission, 1)
			go func() { cs <- mustAdmit(t, s, req) }() // [c, lease ask]
			if sent {
				<-g.sent
			} else {
				waitQueued(t, s, b.Key, opLease, 1)
			}
			cm := mustAdmit(t, mem, req)
			type reply struct {
				a   Admission
				err error
			}
			xs := make(chan reply, 1)
			go func() {
				a, _, err := s.admitRemote(context.Background(), req, shapeOf(req), true)
				xs <- reply{a, err}
			}()
			queued := 1 // x alone behind the call on its way
			if !sent {
				queued = 2 // c, then x
			}
			waitQueued(t, s, b.Key, opAdmit, queued)
			xm := mustAdmit(t, mem, req)
			g.gate.Store(nil)
			close(gate)
			x, c := <-xs, <-cs
			if x.err != nil || !x.a.Allowed || !c.Allowed {
				t.Fatalf("ask sent %v: asked again beside one other request at an in-flight cap of 2: admitted %v (refusal %v, %v); the other admitted %v",
					sent, x.a.Allowed, x.a.Refusal, x.err, c.Allowed)
			}
			if st := s.Stats(); st.Local != 0 {
				t.Fatalf("ask sent %v: %d requests admitted on the lease given up", sent, st.Local)
			}
			for _, a := range []Admission{x.a, c, xm, cm} {
				a.Ticket.Settle(1)
			}
			sameBucket(t, s, mem, b)
			if n := f.state(b.Key).b.n; n != 0 {
				t.Fatalf("ask sent %v: %d requests open in Redis after every request finished and Flush", sent, n)
			}
		}
	})
}

// TestLeaseNeverRefusesACallerUnderItsInFlightCap: n clients of one
// caller, each with at most one request open and asking again only once
// it finished, share one store with leases, as the requests of one
// replica do: at an in-flight cap of n, the cap never refuses one of them
// (at most n-1 others are open), whether the lease's slot is idle, asked
// for, or runs a request another client started after the refused one
// was asked. Every request is settled: nothing stays open.
func TestLeaseNeverRefusesACallerUnderItsInFlightCap(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, n := range []int{2, 4} {
			b := Bucket{Key: f.key(fmt.Sprint("inflight-clients-", n)), Limit: Limit{Rate: 1e-6, Capacity: 1000}}
			var refused, admitted atomic.Int64
			var wg sync.WaitGroup
			for c := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(c), uint64(n)))
					for range 100 {
						a, err := f.store.Admit(context.Background(), Request{Bucket: b, Cost: 0.5, Debt: 60, MaxInFlight: n})
						if err != nil {
							t.Error(err)
							return
						}
						if !a.Allowed {
							if a.Refusal == RefusedInFlight {
								refused.Add(1)
							}
							continue
						}
						admitted.Add(1)
						time.Sleep(time.Duration(rng.IntN(2)) * time.Millisecond)
						a.Ticket.Settle(0.5)
					}
				}()
			}
			wg.Wait()
			if refused.Load() > 0 {
				t.Errorf("in-flight cap %d: %d of %d clients' requests refused by it (%d admitted); stats %+v",
					n, refused.Load(), 100*n, admitted.Load(), f.store.Stats())
			}
			flushWithin(t, f.store)
			if open := f.state(b.Key).b.n; open != 0 {
				t.Errorf("in-flight cap %d: %d requests open after every request finished and Flush", n, open)
			}
		}
	})
}
