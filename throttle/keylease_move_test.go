package throttle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failScripter fails the call number failAt (1-based, counted from
// arming): a call that never reached Redis.
type failScripter struct {
	redis.Scripter
	armed  atomic.Bool
	n      atomic.Int64
	failAt int64
}

func (g *failScripter) fail(ctx context.Context) *redis.Cmd {
	if g.armed.Load() && g.n.Add(1) == g.failAt {
		c := redis.NewCmd(ctx)
		c.SetErr(errors.New("injected"))
		return c
	}
	return nil
}
func (g *failScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	if c := g.fail(ctx); c != nil {
		return c
	}
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}
func (g *failScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if c := g.fail(ctx); c != nil {
		return c
	}
	return g.Scripter.Eval(ctx, script, keys, args...)
}

// TestLeaseMoveAtTheBrim: a busy lease handing its tokens back to a bucket
// that, with them, holds its capacity leaves it exactly full: a request of
// the whole capacity is admitted, as without the lease.
//
// The bucket gets there by the refunds of the two requests before the
// lease's, and the refill of a micro-token, while the lease runs a request
// of a micro-token: no step has to be quick. The second refund fills the
// bucket to what Redis lets it hold with the lease out, and the refill
// after it is held back: the request of the whole capacity, refused by
// Redis, is asked again with the lease handed back, whose replay brings
// that refill back. The refill over the fixture's
// 30 s hold (30 tokens at 1/s) keeps the lease's bucket below the brim when
// it is taken; the lease lives far longer than the test.
func TestLeaseMoveAtTheBrim(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := f.store
		b := Bucket{Key: f.key("lease-brim"), Limit: Limit{Rate: 1, Capacity: 800}}
		req := func(c float64) Request { return Request{Bucket: b, Cost: c, Debt: 3, MaxInFlight: 8} }
		first := mustAdmit(t, s, req(100))   // Redis 700
		second := mustAdmit(t, s, req(12.5)) // and a lease of 100: Redis 587.5
		r := mustAdmit(t, s, req(1e-6))
		if st := s.Stats(); st.Local != 1 || st.Leases != 1 {
			t.Fatalf("not on a lease: %+v", st)
		}
		defer r.Ticket.Settle(1e-6)
		first.Ticket.Settle(0)
		second.Ticket.Settle(0)
		// Redis holds 700 (its capacity less the lease), the lease 100
		// less a micro-token: once a micro-token's refill has passed, a
		// bucket without the lease is full.
		sh := shapeOf(req(1))
		deadline := time.Now().Add(10 * time.Second)
		for f.run(b.Key, sh, []op{{kind: opPeek}})[0].tokens <= toMicro(687.5) {
			if time.Now().After(deadline) {
				t.Fatal("the refunds never reached Redis")
			}
			time.Sleep(time.Millisecond)
		}
		a := mustAdmit(t, s, req(800))
		if !a.Allowed {
			t.Fatalf("the whole capacity refused with Redis and the lease holding it: %+v, stats %+v", a.Result, s.Stats())
		}
		a.Ticket.Settle(800)
	})
}

// TestLeaseMoveSurvivesAFailedCall: when the call carrying a busy lease's
// move fails, the move is sent again (it applies once), and the running
// request's settlement still lands.
func TestLeaseMoveSurvivesAFailedCall(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &failScripter{Scripter: f.rdb, failAt: 2}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, RetryInterval: 20 * time.Millisecond, LeaseHold: testLeaseHold})
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("lease-fail"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, s, mem, b)
		g.armed.Store(true)
		big := Request{Bucket: b, Cost: 75, Debt: 3, MaxInFlight: 8}
		if _, err := s.Admit(context.Background(), big); err == nil {
			t.Fatal("the retry's call did not fail")
		}
		r.Ticket.Settle(0) // refund 1
		rm.Ticket.Settle(0)
		flushWithin(t, s)
		st := f.state(b.Key)
		got, want := mustPeek(t, s, b).Remaining, mustPeek(t, mem, b).Remaining
		t.Logf("Redis %v (open %d), MemoryStore %v, stats %+v", got, st.b.n, want, s.Stats())
		if got != want || st.b.n != 0 {
			t.Errorf("after a failed transfer batch: Redis %v with %d open, in-process %v", got, st.b.n, want)
		}
	})
}

// TestLeaseRefusalFloodCostsOneCallEach: a flood of genuine refusals
// beside a busy lease costs at most one call per refusal.
func TestLeaseRefusalFloodCostsOneCallEach(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("lease-flood"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, f.store, nil, b)
		defer r.Ticket.Settle(1)
		x := mustAdmit(t, f.store, Request{Bucket: b, Cost: 70, Debt: 3, MaxInFlight: 100})
		defer x.Ticket.Settle(70)
		// 7 left in the lease: 7 admitted after a transfer, then refusals.
		for i := 0; i < 7; i++ {
			a := mustAdmit(t, f.store, Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 100})
			if !a.Allowed {
				t.Fatalf("admit %d refused", i)
			}
			defer a.Ticket.Settle(1)
		}
		before := f.store.Stats().Calls
		var wg sync.WaitGroup
		var refused atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					a, err := f.store.Admit(context.Background(), Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 100})
					if err != nil || a.Allowed {
						t.Errorf("flood: %+v %v", a, err)
						return
					}
					refused.Add(1)
				}
			}()
		}
		wg.Wait()
		calls := f.store.Stats().Calls - before
		t.Logf("refusals %d calls %d", refused.Load(), calls)
		if calls > uint64(refused.Load()) {
			t.Errorf("%d calls for %d refusals", calls, refused.Load())
		}
	})
}

// TestLeaseMoveNeedsNoTokens: a busy lease's move keeps its running
// request's slot even when another replica has put the bucket in debt
// meanwhile, and the request's settlement lands.
func TestLeaseMoveNeedsNoTokens(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &gatedScripter{Scripter: f.rdb, sent: make(chan struct{}, 1)}
		s1 := NewRedisStore(g, RedisOptions{Timeout: 5 * time.Second, ClockSkew: 5 * time.Second})
		s2 := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: -1})
		b := Bucket{Key: f.key("lease-slot-refused"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		req1 := Request{Bucket: b, Cost: 1, Debt: 20, MaxInFlight: 8}
		mustAdmit(t, s1, req1).Ticket.Settle(1)
		mustAdmit(t, s1, req1).Ticket.Settle(1)
		r := mustAdmit(t, s1, req1) // on the lease: Redis 70, lease 7
		if st := s1.Stats(); st.Local != 1 || st.Leases != 1 {
			t.Fatalf("not on a lease: %+v", st)
		}
		gate1, gate2 := make(chan struct{}), make(chan struct{})
		g.gate.Store(&gate1)
		done := make(chan Admission, 1)
		go func() { done <- mustAdmit(t, s1, Request{Bucket: b, Cost: 75, Debt: 20, MaxInFlight: 8}) }()
		<-g.sent // the refusal's call
		g.gate.Store(&gate2)
		close(gate1)
		<-g.sent // the transfer's call, held
		held := f.state(b.Key)
		t.Logf("held; Redis %+v", held.b)
		x := mustAdmit(t, s2, Request{Bucket: b, Cost: 70, Debt: 20, MaxInFlight: 8})
		if !x.Allowed {
			t.Fatalf("x refused: %+v", x.Result)
		}
		x.Ticket.Settle(80) // Redis 70-80 = -10
		flushWithin(t, s2)
		t.Logf("after x; Redis %+v", f.state(b.Key).b)
		g.gate.Store(nil)
		close(gate2)
		if a := <-done; a.Allowed {
			t.Fatalf("75 admitted")
		}
		// The move kept the running request's slot under its new id.
		st := f.state(b.Key)
		if st.b.n != 1 || len(st.open) != 1 {
			t.Fatalf("after the move: %d open, %v in the hash; want the running request's slot alone", st.b.n, st.open)
		}
		for id, o := range st.open {
			if _, was := held.open[strings.TrimSuffix(id, "+")]; !was || !strings.HasSuffix(id, "+") || o.paid != 0 {
				t.Fatalf("after the move the slot is held by %q (%+v); want an id open before it, moved (+), having paid nothing; before: %v", id, o, held.open)
			}
		}
		r.Ticket.Settle(0) // its refund of 1
		flushWithin(t, s1)
		st = f.state(b.Key)
		got := mustPeek(t, s2, b).Remaining
		// 80 - 1 - 1 - 1 + 1 - 80 = -2
		if got != -2 || st.b.n != 0 {
			t.Errorf("bucket %v with %d open, want -2 with none", got, st.b.n)
		}
	})
}

// TestLeaseSequentialRefusalsCostOneCallEach: refusals and shadow
// admissions one after another beside a busy lease are asked again only
// when the lease could have paid them: one call each. What is counted is
// the admits sent, one per call that carries them: a release rides on the
// next request's call, or goes alone after FinishDelay when that request
// comes later (on a loaded machine), a call that asks nothing again.
func TestLeaseSequentialRefusalsCostOneCallEach(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("lease-seq"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, _ := withBusyLease(t, f.store, nil, b) // Redis 70, lease 7
		defer r.Ticket.Settle(1)
		before, callsBefore := f.store.Stats().Admits, f.store.Stats().Calls
		for i := range 100 {
			sh := i%2 == 0
			a := mustAdmit(t, f.store, Request{Bucket: b, Cost: 78, Debt: 3, MaxInFlight: 8, Shadow: sh})
			if a.Allowed && !a.Shadow {
				t.Fatalf("78 of 77 admitted")
			}
			if a.Ticket != nil {
				a.Ticket.Release()
			}
		}
		asked := f.store.Stats().Admits - before
		t.Logf("100 refusals/shadows beside a busy lease holding 7: asked %d times, stats %+v", asked, f.store.Stats())
		if asked != 100 {
			t.Errorf("100 refusals/shadows asked %d times", asked)
		}
		// Besides the 100 calls that ask, at most the 50 shadows' releases
		// go alone.
		if calls := f.store.Stats().Calls - callsBefore; calls > 150 {
			t.Errorf("100 refusals/shadows made %d calls, want at most 150", calls)
		}
	})
}

// TestLeaseMoveThenFlushAndDebits: after a move, Flush waits for the
// running request, a debit of a Redis-admitted request and of the moved
// request both land as without the lease, and nothing stays open.
func TestLeaseMoveThenFlushAndDebits(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("lease-flush"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b)
		req := Request{Bucket: b, Cost: 75, Debt: 3, MaxInFlight: 8}
		x, xm := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if !x.Allowed || !xm.Allowed {
			t.Fatalf("75 of 77: %v %v", x.Allowed, xm.Allowed)
		}
		x.Ticket.Settle(76) // a debit of a Redis ticket while the lease is transferred
		xm.Ticket.Settle(76)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if err := f.store.Flush(ctx); err == nil {
			t.Error("Flush returned while the transferred lease runs its request")
		}
		cancel()
		if n := f.state(b.Key).b.n; n != 1 {
			t.Errorf("%d open in Redis while the request on the transferred lease runs, want 1", n)
		}
		r.Ticket.Settle(3) // a debit of the local ticket after the transfer
		rm.Ticket.Settle(3)
		sameBucket(t, f.store, mem, b)
		if n := f.state(b.Key).b.n; n != 0 {
			t.Errorf("%d open after Flush", n)
		}
		t.Logf("Redis %v mem %v", mustPeek(t, f.store, b).Remaining, mustPeek(t, mem, b).Remaining)
	})
}
