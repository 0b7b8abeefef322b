package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// gatedFailover is a fail_mode closed Failover over a RedisStore whose
// script calls g holds while its gate is set (leases off).
func gatedFailover(fx *redisFixture) (*gatedScripter, *RedisStore, *Failover) {
	g := &gatedScripter{Scripter: fx.rdb, sent: make(chan struct{}, 1)}
	s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseRequests: -1})
	f := &Failover{Primary: s, Mode: FailClosed, Timeout: 10 * time.Second, ProbeInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	return g, s, f
}

// An admission whose call was on its way when this replica settled a
// refund (Redis answered it before the refund's finish reached it) does
// not undo the refund in what the Failover knows: the caller, refused by
// that call, is admitted once Redis holds the refund, not refused in
// process until the refusal's tokens refill (over an hour here).
func TestFailoverAdmissionInFlightKeepsARefund(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g, s, f := gatedFailover(fx)
		b := Bucket{Key: fx.key("admit-refund"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 9}) // 1 left
		gate := make(chan struct{})
		g.gate.Store(&gate)
		done := make(chan Admission, 1)
		go func() { done <- mustAdmit(t, f, Request{Bucket: b, Cost: 5}) }()
		<-g.sent // its call is on its way
		g.gate.Store(nil)
		a.Ticket.Settle(1) // it cost 1: 8 back (its finish waits for the call on its way)
		close(gate)
		if r := <-done; r.Allowed {
			t.Fatalf("the request sent before the refund was admitted: %+v", r.Result)
		}
		flushWithin(t, s) // Redis holds the refund: 9 tokens
		if got := mustPeek(t, s, b).Remaining; got < 8.99 {
			t.Fatalf("Redis holds %v tokens after the refund, want 9", got)
		}
		calls := s.Stats().Calls
		if r := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); !r.Allowed {
			t.Fatalf("a request of 5 with 9 in the bucket: refused (Retry-After %v, %.3f tokens, %d calls, %d free refusals)",
				r.Result.RetryAfter, r.Result.Remaining, s.Stats().Calls-calls, f.FreeRefusals())
		}
	})
}

// A budget read sent right after a debit this replica settled, before the
// debit's finish has reached Redis (it waits FinishDelay, or the caller's
// call on its way), reads the bucket without it. The read must not
// become what the Failover knows of the caller: later reads would show
// the tokens the debit took, and a fail_mode local bucket seeded from it
// would admit what the shared bucket no longer holds.
func TestFailoverReadRightAfterADebit(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		for _, degrade := range []bool{false, true} {
			// A long FinishDelay stands for the window a finish waits in
			// (5 ms by default, longer behind a call on its way).
			s := NewRedisStore(fx.rdb, RedisOptions{Timeout: testCallTimeout, FinishDelay: time.Hour, LeaseRequests: -1})
			fl := &flakyStore{Store: s}
			f := &Failover{Primary: fl, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: 1,
				Timeout: 10 * time.Second, ProbeInterval: time.Hour, PeekReuse: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)}
			b := Bucket{Key: fx.key("debit-read-" + map[bool]string{false: "read", true: "local"}[degrade]), Limit: Limit{Rate: 1e-3, Capacity: 10}}
			a := mustAdmit(t, f, Request{Bucket: b, Cost: 2, Debt: 10}) // 8 left
			a.Ticket.Settle(10)                                         // it cost 10: 0 left
			mustPeek(t, f, b)                                           // a read before the debit reached Redis
			f.PeekReuse = time.Hour
			if !degrade {
				if r := mustPeek(t, f, b); r.Remaining >= 1 {
					t.Errorf("a read after a debit to 0: %.3f tokens", r.Remaining)
				}
			} else {
				fl.set(true)
				if ad := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); ad.Allowed {
					t.Errorf("Redis down, after a debit to 0: a local admission of 5 admitted (%.3f left)", ad.Result.Remaining)
				}
				fl.set(false)
			}
			flushWithin(t, s)
		}
	})
}

// keyGatedScripter holds the script calls of one key while its gate is
// set; the calls of other keys go through.
type keyGatedScripter struct {
	redis.Scripter
	key  string
	gate chan struct{}
	sent chan struct{}
}

func (g *keyGatedScripter) wait(keys []string) {
	if len(keys) > 0 && keys[0] == g.key {
		g.sent <- struct{}{}
		<-g.gate
	}
}

func (g *keyGatedScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	g.wait(keys)
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (g *keyGatedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	g.wait(keys)
	return g.Scripter.Eval(ctx, script, keys, args...)
}

// One caller's operations filling its queue (MaxPending) is that caller's
// problem, not a failing Redis: the admit that finds the queue full is
// turned away, but the Failover does not go degraded over it, and every
// other caller is still decided by Redis meanwhile, not by the fail mode
// (here: closed, a 503 for everyone; with open, everyone free).
func TestFailoverOneCallersFullQueueIsNoStoreFailure(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		greedy := Bucket{Key: fx.key("greedy"), Limit: Limit{Rate: 1, Capacity: 100}}
		other := Bucket{Key: fx.key("other"), Limit: Limit{Rate: 1, Capacity: 100}}
		g := &keyGatedScripter{Scripter: fx.rdb, key: greedy.Key, gate: make(chan struct{}), sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: 10 * time.Second, ClockSkew: 10 * time.Second, MaxPending: 2, LeaseRequests: -1})
		f := &Failover{Primary: s, Mode: FailClosed, Timeout: 20 * time.Second, ProbeInterval: time.Hour,
			Logger: slog.New(slog.DiscardHandler)}
		done := make(chan Admission, 3)
		go func() { done <- mustAdmit(t, f, Request{Bucket: greedy, Cost: 1}) }()
		<-g.sent // the greedy caller's first call is on its way
		for range 2 {
			go func() { done <- mustAdmit(t, f, Request{Bucket: greedy, Cost: 1}) }()
		}
		for queued := 0; queued < 2; { // both wait in the greedy caller's queue
			time.Sleep(time.Millisecond)
			s.mu.Lock()
			if l := s.lanes[greedy.Key]; l != nil {
				queued = len(l.queue)
			}
			s.mu.Unlock()
		}
		_, busy := f.Admit(context.Background(), Request{Bucket: greedy, Cost: 1})
		h := f.Health()
		calls := s.Stats().Calls
		a, err := f.Admit(context.Background(), Request{Bucket: other, Cost: 1})
		otherCalls := s.Stats().Calls - calls
		go func() { // the greedy caller's calls go on
			for range g.sent {
			}
		}()
		close(g.gate)
		for range 3 {
			(<-done).Ticket.Release()
		}
		flushWithin(t, s)
		if busy == nil {
			t.Fatal("a fourth admit with MaxPending 2 was queued")
		}
		if h.Degraded {
			t.Errorf("one caller's full queue made the Failover degraded: %s", h.Err)
		}
		if err != nil || !a.Allowed || otherCalls != 1 {
			t.Fatalf("another caller meanwhile, Redis healthy: allowed %v, err %v, %d calls; want admitted by Redis", a.Allowed, err, otherCalls)
		}
		a.Ticket.Release()
	})
}

// With fail_mode local, a caller's fallback bucket starts from what Redis
// last reported of it each time Redis fails, not from what the caller
// left in it the last time Redis failed: after a first outage and a
// recovery in which the caller emptied its shared bucket, a second outage
// does not hand it the tokens its local bucket kept from the first.
func TestFailoverLocalStartsFromTheLastKnownBudgetAfterARecovery(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s, fl, f := flakyLocalFailover(fx, -1, 1)
		b := Bucket{Key: fx.key("reseed"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // Redis: 9
		fl.set(true)                                                  // first outage
		if a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}); !a.Allowed || !f.Health().Degraded {
			t.Fatalf("first outage: allowed %v (%.3f left), degraded %v", a.Allowed, a.Result.Remaining, f.Health().Degraded)
		} else {
			a.Ticket.Release() // local: 8
		}
		fl.set(false)
		f.Recovered(context.Background())
		if a := mustAdmit(t, f, Request{Bucket: b, Cost: 9}); !a.Allowed { // Redis: 0
			t.Fatalf("after the recovery, 9 of 9: %+v", a.Result)
		} else {
			a.Ticket.Release()
		}
		flushWithin(t, s)
		fl.set(true) // second outage
		if a := mustAdmit(t, f, Request{Bucket: b, Cost: 5}); a.Allowed {
			t.Fatalf("second outage, Redis last said 0 tokens: a local admission of 5 admitted (%.3f left)", a.Result.Remaining)
		}
	})
}

// An admission that waits on its caller's lane, behind that caller's call
// still on its way, until the Failover's timeout was never sent: it is
// that caller's flood (ErrBusy), charged nothing, and the store stays
// healthy — with fail_mode open, taking it for a failing store would lift
// every caller's limits for one caller's backlog.
func TestFailoverQueuedPastItsTimeoutIsBusyNotDown(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		q := queueBehindItsCaller(t, fx, "queued-busy", func(f *Failover, b Bucket) error {
			_, err := f.Admit(context.Background(), Request{Bucket: b, Cost: 1})
			return err
		})
		s, f, b, first, err := q.s, q.f, q.b, q.first, q.err
		if !errors.Is(err, ErrBusy) {
			t.Errorf("queued past the timeout behind its caller's call: %v, want ErrBusy", err)
		}
		if h := f.Health(); h.Degraded {
			t.Errorf("one caller's queue took the store for down: %+v", h)
		}
		first.Ticket.Settle(0) // it cost nothing: all back
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got < 99.99 {
			t.Errorf("Redis holds %.3f tokens, want 100: the queued admission was charged", got)
		}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 1})
		if !a.Allowed {
			t.Fatalf("once the lane moved: %+v", a.Result)
		}
		a.Ticket.Release()
	})
}

// A caller's admits fill its queue only so far (MaxPending less a
// quarter): the settlement of a request already running — here a debit,
// its request having cost ten more than it paid — still finds a place
// behind a flood of that caller's admits, and is not dropped.
func TestAdmitsLeaveRoomForSettlements(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g := &gatedScripter{Scripter: fx.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: 10 * time.Second, ClockSkew: 10 * time.Second, MaxPending: 8, LeaseRequests: -1})
		b := Bucket{Key: fx.key("settle-room"), Limit: Limit{Rate: 1e-3, Capacity: 100}}
		req := Request{Bucket: b, Cost: 1, Debt: 100}
		running := mustAdmit(t, s, req) // 99 left
		gate := make(chan struct{})
		g.gate.Store(&gate)
		admitted := make(chan Admission, 16)
		go func() { admitted <- mustAdmit(t, s, req) }()
		<-g.sent // its call is on its way, and holds the lane
		g.gate.Store(nil)
		busy := make(chan error, 16)
		for range 10 {
			go func() {
				a, err := s.Admit(context.Background(), req)
				if err != nil {
					busy <- err
					return
				}
				admitted <- a
			}()
		}
		for i := range 4 { // 6 of the 10 wait in the queue, 4 find no room
			select {
			case err := <-busy:
				if !errors.Is(err, ErrBusy) {
					t.Fatalf("an admit past the admits' room: %v, want ErrBusy", err)
				}
			case <-time.After(5 * time.Second):
				close(gate)
				t.Fatalf("%d of 10 admits turned away with MaxPending 8, want 4: admits took the settlements' room", i)
			}
		}
		queued(t, s, b.Key, 6)
		running.Ticket.Settle(11) // it cost 11: a debit of 10
		close(gate)
		for range 7 {
			(<-admitted).Ticket.Release()
		}
		flushWithin(t, s)
		if d := s.Stats().Dropped; d != 0 {
			t.Errorf("%d settlements dropped", d)
		}
		// 100 − 11 (the running request, debit in) − 7 admitted: 82.
		if got := mustPeek(t, s, b).Remaining; got > 82.05 {
			t.Fatalf("Redis holds %.3f tokens, want 82: the debit was dropped", got)
		}
	})
}

// An admission answered from a lease this process holds, without a call,
// says nothing of the store: the probe of an outage that a lease answers
// ends no outage (the next requests would each wait for a failing Redis
// again), and the next probe is a call.
func TestFailoverLeaseAdmissionIsNoProbe(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g := &gatedLossyScripter{UniversalClient: fx.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseHold: testLeaseHold})
		f := &Failover{Primary: s, Mode: FailClosed, Timeout: 10 * time.Second, ProbeInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}
		b := Bucket{Key: fx.key("lease-probe"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
		for range 3 { // the third on a lease
			mustAdmit(t, f, req).Ticket.Settle(1)
		}
		if st := s.Stats(); st.Local != 1 || st.Leases != 1 {
			t.Fatalf("the third request is not on a lease: %+v", st)
		}
		g.failNext.Store(true)
		if _, err := f.Admit(context.Background(), Request{Bucket: Bucket{Key: fx.key("lease-probe-other"), Limit: b.Limit}, Cost: 1}); !errors.Is(err, ErrStoreDown) {
			t.Fatalf("another caller's failing call: %v, want ErrStoreDown", err)
		}
		time.Sleep(2 * f.ProbeInterval)
		a := mustAdmit(t, f, req) // the probe, answered by the lease
		a.Ticket.Settle(1)
		if st := s.Stats(); st.Local != 2 {
			t.Fatalf("the probe was not answered by the lease: %+v", st)
		}
		if !f.Health().Degraded {
			t.Error("an admission from a lease, with no call, ended the outage")
		}
		flushWithin(t, s)
	})
}

// A budget read still queued behind its caller's call on its way when the
// Failover's time for it ends is that caller's flood too (ErrBusy): a
// caller's own reads (GET /budget, previews) must not turn a replica to
// its fail mode either.
func TestFailoverReadQueuedPastItsTimeoutIsBusyNotDown(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		q := queueBehindItsCaller(t, fx, "queued-read-busy", func(f *Failover, b Bucket) error {
			f.PeekReuse = -1 // every read asks
			_, err := f.Peek(context.Background(), b)
			return err
		})
		f, err := q.f, q.err
		q.first.Ticket.Release()
		if !errors.Is(err, ErrBusy) {
			t.Errorf("a read queued past its time behind its caller's call: %v, want ErrBusy", err)
		}
		if h := f.Health(); h.Degraded {
			t.Errorf("one caller's read took the store for down: %+v", h)
		}
	})
}

// queuedBehind is what queueBehindItsCaller left.
type queuedBehind struct {
	s     *RedisStore
	f     *Failover
	b     Bucket
	first Admission // the caller's admission whose call was on its way
	err   error     // ask's
}

// queueBehindItsCaller asks, through a Failover whose Timeout is 50 ms,
// while the caller's earlier call (an admission of 1, through the store
// with its own 1 s) is held on its way, so that ask waits on the caller's
// lane until its time ends; then lets the call go.
func queueBehindItsCaller(t *testing.T, fx *redisFixture, key string, ask func(*Failover, Bucket) error) queuedBehind {
	t.Helper()
	g, s, f := gatedFailover(fx)
	f.Timeout = 50 * time.Millisecond
	b := Bucket{Key: fx.key(key), Limit: Limit{Rate: 1e-3, Capacity: 100}}
	mustPeek(t, s, b) // the script is loaded: each call below is one
	gate := make(chan struct{})
	g.gate.Store(&gate)
	first := make(chan Admission, 1)
	go func() { first <- mustAdmit(t, s, Request{Bucket: b, Cost: 1}) }()
	<-g.sent // its call is on its way, and holds the lane
	err := ask(f, b)
	g.gate.Store(nil)
	close(gate)
	return queuedBehind{s: s, f: f, b: b, first: <-first, err: err}
}

// With fail_mode local, an aggregate bucket (the IPv6 /48) that Redis
// refused for lack of tokens starts from what its refusal reported when
// Redis fails (a quarter of it on each of 4 replicas), not full.
func TestFailoverLocalAggregateStartsFromWhatRedisReported(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s, fl, f := flakyLocalFailover(fx, -1, 4)
		agg := &Bucket{Key: fx.key("slash48"), Limit: Limit{Rate: 1e-3, Capacity: 10}}
		own := Bucket{Key: agg.Key + ":a", Limit: Limit{Rate: 1e-3, Capacity: 100}}
		t.Cleanup(func() { fx.rdb.Del(context.Background(), own.Key, OpenKey(own.Key), VoidKey(own.Key)) })
		mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 8}).Ticket.Release() // Redis: 2 in the /48
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 5}); a.Refusal != RefusedAggregate {
			t.Fatalf("Redis: want the aggregate to refuse, got %+v", a)
		}
		flushWithin(t, s)
		fl.set(true)
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 0.75}); a.Allowed || a.Refusal != RefusedAggregate {
			t.Fatalf("outage: 0.75 from a share of a /48 Redis said held 2: %+v", a)
		}
		if a := mustAdmit(t, f, Request{Bucket: own, Aggregate: agg, Cost: 0.4}); !a.Allowed {
			t.Fatalf("outage: 0.4 from a share of a /48 Redis said held 2: refusal=%d %+v", a.Refusal, a.Result)
		}
	})
}

// localFailover is a fail_mode local Failover over primary for replicas
// replicas, whose calls never time out in a test and whose probes wait an
// hour: the test says when the primary fails.
// flakyLocalFailover is a fail_mode local Failover of replicas over a
// RedisStore of fx (with leases: RedisOptions.LeaseRequests) that fails
// while its flakyStore is set down.
func flakyLocalFailover(fx *redisFixture, leases, replicas int) (*RedisStore, *flakyStore, *Failover) {
	s := NewRedisStore(fx.rdb, RedisOptions{Timeout: testCallTimeout, LeaseRequests: leases})
	fl := &flakyStore{Store: s}
	return s, fl, localFailover(fl, replicas)
}

func localFailover(primary Store, replicas int) *Failover {
	return &Failover{Primary: primary, Local: NewMemoryStore(MemoryOptions{}), Mode: FailLocal, Replicas: replicas,
		Timeout: 10 * time.Second, ProbeInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
}

// With fail_mode local, what a caller spent locally while Redis failed is
// charged to its Redis bucket once Redis admits it again — with or without
// the leases geotoll serve takes by default — so the outage does not hand
// it a second bucket.
func TestFailoverLocalSpendingIsChargedToRedisAfterwards(t *testing.T) {
	t.Parallel()
	for _, leases := range []int{-1, DefaultLeaseRequests} {
		t.Run(fmt.Sprintf("leases %d", leases), func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, fx *redisFixture) {
				s, fl, f := flakyLocalFailover(fx, leases, 1)
				b := Bucket{Key: fx.key("reconcile"), Limit: Limit{Rate: 1e-3, Capacity: 100}}
				mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // Redis: 99
				flushWithin(t, s)
				fl.set(true)
				for range 6 { // locally: 99 - 60
					if a := mustAdmit(t, f, Request{Bucket: b, Cost: 10}); !a.Allowed || !f.Health().Degraded {
						t.Fatalf("locally: allowed %v (%.3f left), degraded %v", a.Allowed, a.Result.Remaining, f.Health().Degraded)
					} else {
						a.Ticket.Release()
					}
				}
				fl.set(false)
				f.Recovered(context.Background())
				for range 3 { // Redis: 99 - 3, less the 60 spent locally, once
					if a := mustAdmit(t, f, Request{Bucket: b, Cost: 1}); !a.Allowed {
						t.Fatalf("after the recovery: refused, %.3f left", a.Result.Remaining)
					} else {
						a.Ticket.Release()
					}
				}
				flushWithin(t, s)
				if got := mustPeek(t, s, b).Remaining; got < 35.9 || got > 36.1 {
					t.Errorf("Redis holds %.3f after the outage, want 36: 99, less 3 admitted since and the 60 spent locally", got)
				}
			})
		})
	}
}

// A request admitted locally while Redis failed, and still running when
// Redis admits its caller again, settles with the caller's next admission
// by Redis: its local bucket ended with that first admission, and its
// settlement was dropped — a request that ran long across a recovery cost
// only its price at the door, though its X-Request-Cost said what it ran.
// A refund travels the same way.
func TestFailoverLocalRequestRunningAtRecoverySettlesInRedis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		cost, want float64 // what the local request cost; Redis afterwards
	}{
		{"debit", 30, 100 - 1 - 30 - 2}, // its price (10) carried with the first admission, 20 more with the second
		{"refund", 4, 100 - 1 - 4 - 2},  // 6 of its 10 given back with the second
		{"at its price", 10, 100 - 1 - 10 - 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, fx *redisFixture) {
				s, fl, f := flakyLocalFailover(fx, -1, 1)
				b := Bucket{Key: fx.key("late"), Limit: Limit{Rate: 1e-3, Capacity: 100}}
				mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // Redis: 99
				flushWithin(t, s)
				fl.set(true)
				running := mustAdmit(t, f, Request{Bucket: b, Cost: 10}) // locally; still running at the recovery
				if !running.Allowed || !f.Health().Degraded {
					t.Fatalf("locally: allowed %v, degraded %v", running.Allowed, f.Health().Degraded)
				}
				fl.set(false)
				f.Recovered(context.Background())
				mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // carries the 10 spent locally
				running.Ticket.Settle(tc.cost)                                // its local bucket is gone
				mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // carries its settlement
				flushWithin(t, s)
				if got := mustPeek(t, s, b).Remaining; math.Abs(got-tc.want) > 0.1 {
					t.Errorf("Redis holds %.3f, want %g: 99, less the local request's %g and the 2 admitted since", got, tc.want, tc.cost)
				}
			})
		})
	}
}

// After an outage, what a caller spent locally shows in what the budget
// says of it at once — a read before its first admission by Redis, and
// that admission's remaining tokens, whose settlement charges it — not
// only after that settlement reached Redis: the first answer said 98 of a
// bucket the caller had spent down to 38.
func TestFailoverAnswerAfterAnOutageCountsLocalSpending(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		s, fl, f := flakyLocalFailover(fx, -1, 1)
		f.PeekReuse = -1 // every read asks Redis
		b := Bucket{Key: fx.key("owing"), Limit: Limit{Rate: 1e-3, Capacity: 100}}
		mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // Redis: 99
		flushWithin(t, s)
		fl.set(true)
		for range 6 { // locally: 99 - 60
			mustAdmit(t, f, Request{Bucket: b, Cost: 10}).Ticket.Release()
		}
		fl.set(false)
		f.Recovered(context.Background())
		res, err := f.Peek(context.Background(), b)
		if err != nil || math.Abs(res.Remaining-39) > 0.1 {
			t.Errorf("read after the outage: %.3f (%v), want 39: 99 less the 60 spent locally", res.Remaining, err)
		}
		a := mustAdmit(t, f, Request{Bucket: b, Cost: 1})
		if math.Abs(a.Result.Remaining-38) > 0.1 {
			t.Errorf("first admission after the outage says %.3f left, want 38: 99 less 1, less the 60 its settlement charges", a.Result.Remaining)
		}
		a.Ticket.Release()
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; math.Abs(got-38) > 0.1 {
			t.Errorf("Redis holds %.3f, want 38", got)
		}
	})
}
