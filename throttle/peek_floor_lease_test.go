package throttle

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
		leaseSpent(t, s, req, 6)
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

// leaseSpent has s lease req's bucket (its second request asks for the
// lease) and admit n requests on the lease, each released at once.
func leaseSpent(t *testing.T, s *RedisStore, req Request, n int) {
	t.Helper()
	mustAdmit(t, s, req).Ticket.Release() // seen
	mustAdmit(t, s, req).Ticket.Release() // asks for a lease
	for range n {
		a := mustAdmit(t, s, req)
		if !a.inProcess {
			t.Fatalf("not admitted on the lease: %+v", a)
		}
		a.Ticket.Release()
	}
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
	readsAlike(t, "before", f, mem, agg)
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: &agg, Cost: 60, Debt: 80})
	if !a.Allowed {
		t.Fatalf("%+v", a)
	}
	readsAlike(t, "admitted", f, mem, agg)
	a.Ticket.Settle(200)
	readsAlike(t, "settled", f, mem, agg)
}

// readsAlike checks that the Failover f reads the aggregate bucket agg (a
// /48's, under a floor of 80) as its primary, store, holds it.
func readsAlike(t *testing.T, when string, f *Failover, store FloorPeeker, agg Bucket) {
	t.Helper()
	r, err1 := f.PeekFloor(t.Context(), agg, 80, 1)
	m, err2 := store.PeekFloor(t.Context(), agg, 80, 1)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if d := r.Remaining - m.Remaining; d < -0.1 || d > 0.1 {
		t.Errorf("%s: the /48 reads %v through the Failover, %v in its primary", when, r.Remaining, m.Remaining)
	}
}

// A read answered before a lease of its caller is granted does not count
// that lease, whenever its reader wakes: the read's batch goes first, the
// admit that asks for the lease right after it, and a reader that took
// the lease into account when it woke (after the lease's grant, often)
// read 58 where the bucket held 50.
func TestPeekReadsNoLeaseGrantedAfterIt(t *testing.T) {
	fx := newRedisFixture(t, testenv.Redis(t))
	var stop atomic.Bool
	defer stop.Store(true)
	for range 3 { // busy CPUs: readers wake late
		go func() {
			for !stop.Load() {
			}
		}()
	}
	for i := range 30 {
		b := Bucket{Key: fx.key("granted-after-" + strconv.Itoa(i)), Limit: Limit{Rate: 0.001, Capacity: 100}}
		s := NewRedisStore(fx.rdb, RedisOptions{Timeout: 5 * time.Second, ClockSkew: 10 * time.Second, LeaseHold: testLeaseHold})
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 50})
		a.Ticket.Settle(50) // the bucket at 50
		flushWithin(t, s)
		s.mu.Lock()
		l := s.laneLocked(b.Key)
		l.busy = true // the read, the admit and its lease's ask queue up
		s.mu.Unlock()
		read := make(chan Result, 1)
		go func() { r, _ := s.PeekFloor(context.Background(), b, 0, 0); read <- r }()
		queued(t, s, b.Key, 1)
		adm := make(chan Admission, 1)
		go func() { adm <- mustAdmit(t, s, Request{Bucket: b, Cost: 1}) }()
		queued(t, s, b.Key, 3)
		s.mu.Lock()
		l.busy = false
		s.kickLocked(l, true, false)
		s.mu.Unlock()
		r, ad := <-read, <-adm
		ad.Ticket.Release()
		if r.Remaining > 50.01 {
			t.Fatalf("round %d: the read says %v; the bucket held 50 before the admission (%v after it)", i, r.Remaining, ad.Result.Remaining)
		}
		flushWithin(t, s)
	}
}

// Beside a lease whose slot runs a request, a floored read says what the
// caller's next admission finds: that admission goes to Redis beside the
// lease, which it does not give back for a refusal the lease could not
// pay, and finds the bucket at the floor less what is leased (-18); the
// read said the floor (-10).
func TestPeekFloorBesideABusyLease(t *testing.T) {
	f := newRedisFixture(t, testenv.Redis(t))
	s := f.store
	b := Bucket{Key: f.key("busy"), Limit: Limit{Rate: 0.001, Capacity: 100}}
	const debt = 10
	req := Request{Bucket: b, Cost: 1, Debt: debt}
	leaseSpent(t, s, req, 6)
	running := mustAdmit(t, s, req) // holds the lease's slot
	if !running.inProcess {
		t.Fatalf("not admitted on the lease: %+v", running)
	}
	defer running.Ticket.Release()
	beside := mustAdmit(t, s, req) // to Redis, beside the busy lease
	if beside.inProcess || !beside.Allowed {
		t.Fatalf("beside the busy lease: %+v", beside)
	}
	beside.Ticket.Settle(500) // far over its price
	got, err := s.PeekFloor(t.Context(), b, debt, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := mustAdmit(t, s, req)
	if next.Ticket != nil {
		defer next.Ticket.Release()
	}
	if d := got.Remaining - next.Result.Remaining; d < -0.01 || d > 0.01 || next.Allowed {
		t.Errorf("PeekFloor read %v; the next admission found %v (allowed %v)", got.Remaining, next.Result.Remaining, next.Allowed)
	}
}

// heldReads is a primary whose reads are answered as of when they are
// asked and returned only when released: a read on its way while an
// admission lands.
type heldReads struct {
	*MemoryStore
	asked, release chan struct{}
}

func (s *heldReads) PeekFloor(ctx context.Context, b Bucket, debt, cost float64) (Result, error) {
	r, err := s.MemoryStore.PeekFloor(ctx, b, debt, cost)
	s.asked <- struct{}{}
	<-s.release
	return r, err
}

// A read of an aggregate sent before this replica spent through the
// aggregate is not kept: answered after that admission, it was, and the
// reads after it said 100 where the store held 40.
func TestFailoverKeepsNoAggregateReadSentBeforeASpend(t *testing.T) {
	mem := NewMemoryStore(MemoryOptions{})
	p := &heldReads{MemoryStore: mem, asked: make(chan struct{}, 1), release: make(chan struct{})}
	f := &Failover{Primary: p, Mode: FailClosed, ProbeInterval: time.Hour, PeekReuse: 10 * time.Second,
		Timeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	agg := Bucket{Key: "{n}:agg", Limit: Limit{Rate: 0.001, Capacity: 100}}
	own := Bucket{Key: "{n}:agg:one", Limit: Limit{Rate: 0.001, Capacity: 100}}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, err := f.PeekFloor(ctx, agg, 80, 1); done <- err }()
	<-p.asked // answered by the store (100), not yet returned
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: &agg, Cost: 60, Debt: 80})
	if !a.Allowed {
		t.Fatalf("%+v", a)
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { <-p.asked }() // the next read's
	readsAlike(t, "after the admission", f, mem, agg)
}

// failsOnce fails the first call of its key once armed, after holding it
// until released.
type failsOnce struct {
	redis.Scripter
	key            string
	armed, release chan struct{}
	entered        chan struct{}
	once           sync.Once
}

func (g *failsOnce) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	select {
	case <-g.armed:
		if len(keys) > 0 && keys[0] == g.key {
			failed := false
			g.once.Do(func() {
				failed = true
				g.entered <- struct{}{}
				<-g.release
			})
			if failed {
				c := redis.NewCmd(ctx)
				c.SetErr(errors.New("an injected failure"))
				return c
			}
		}
	default:
	}
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

// A read queued while its caller's finish is on its way, in a call that
// then fails, is not answered ahead of that finish's retry: it went ahead
// of it and read 50 where the next admission found the refund (90). It
// gets the call's error, as the failed batch's reads do.
func TestPeekAfterAFinishWhoseCallFailed(t *testing.T) {
	fx := newRedisFixture(t, testenv.Redis(t))
	b := Bucket{Key: fx.key("retried"), Limit: Limit{Rate: 0.001, Capacity: 100}}
	g := &failsOnce{Scripter: fx.rdb, key: b.Key, armed: make(chan struct{}), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	s := NewRedisStore(g, RedisOptions{Timeout: 5 * time.Second, RetryInterval: 3 * time.Second, MaxRetryInterval: 3 * time.Second, LeaseRequests: -1})
	a := mustAdmit(t, s, Request{Bucket: b, Cost: 50}) // the bucket at 50
	close(g.armed)
	a.Ticket.Settle(10) // a refund of 40, whose call fails
	<-g.entered
	type reading struct {
		r   Result
		err error
	}
	read := make(chan reading, 1)
	go func() { r, err := s.PeekFloor(context.Background(), b, 0, 0); read <- reading{r, err} }()
	queued(t, s, b.Key, 1)
	close(g.release)
	got := <-read
	next := mustAdmit(t, s, Request{Bucket: b, Cost: 1})
	defer next.Ticket.Release()
	if got.err == nil && got.r.Remaining < next.Result.Remaining+1-0.01 {
		t.Errorf("the read says %v; the next admission, after it, found %v before its cost", got.r.Remaining, next.Result.Remaining+1)
	}
	flushWithin(t, s)
}

// A read of an aggregate sent after a settlement through it, before the
// settlement's finish reached Redis (after FinishDelay, on its caller's
// lane), is not kept: kept, the reads after it said 40 where Redis held
// -80.
func TestFailoverKeepsNoAggregateReadBeforeAFinishLands(t *testing.T) {
	fx := newRedisFixture(t, testenv.Redis(t))
	rs := NewRedisStore(fx.rdb, RedisOptions{Timeout: 5 * time.Second, FinishDelay: time.Second, LeaseHold: testLeaseHold})
	f := &Failover{Primary: rs, Mode: FailClosed, ProbeInterval: time.Hour, PeekReuse: time.Minute,
		Logger: slog.New(slog.DiscardHandler)}
	agg := Bucket{Key: fx.key("agg"), Limit: Limit{Rate: 0.001, Capacity: 100}}
	own := Bucket{Key: fx.key("own"), Limit: Limit{Rate: 0.001, Capacity: 100}}
	ctx := context.Background()
	a := mustAdmit(t, f, Request{Bucket: own, Aggregate: &agg, Cost: 60, Debt: 80})
	if !a.Allowed {
		t.Fatalf("%+v", a)
	}
	a.Ticket.Settle(200)
	if _, err := f.PeekFloor(ctx, agg, 80, 1); err != nil { // before the finish is sent
		t.Fatal(err)
	}
	flushWithin(t, rs) // the finish lands
	readsAlike(t, "after the finish", f, rs, agg)
}

// failsAll fails every call at once while down is set, counting them.
type failsAll struct {
	redis.Scripter
	down  atomic.Bool
	calls atomic.Int64
}

func (g *failsAll) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	if g.down.Load() {
		g.calls.Add(1)
		c := redis.NewCmd(ctx)
		c.SetErr(errors.New("connection refused (injected)"))
		return c
	}
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

// A read while Redis fails, its caller's finish waiting for its retry,
// costs a call or two and is answered: the finish's retry, put ahead of
// the read each time it failed, was sent again at once, and the read's
// lane called Redis in a loop (1,334 calls in 1.5 s), past the read's
// deadline.
func TestPeekBehindAFinishWhileRedisFails(t *testing.T) {
	fx := newRedisFixture(t, testenv.Redis(t))
	b := Bucket{Key: fx.key("spin"), Limit: Limit{Rate: 1, Capacity: 100}}
	g := &failsAll{Scripter: fx.rdb}
	s := NewRedisStore(g, RedisOptions{Timeout: time.Second, FinishDelay: 5 * time.Millisecond,
		RetryInterval: 2 * time.Second, MaxRetryInterval: 2 * time.Second, LeaseRequests: -1})
	a := mustAdmit(t, s, Request{Bucket: b, Cost: 50})
	g.down.Store(true)
	a.Ticket.Settle(10) // its finish's call fails, and waits for its retry
	for g.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	queued(t, s, b.Key, 1)
	before := g.calls.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.PeekFloor(ctx, b, 0, 0)
	if calls := g.calls.Load() - before; err == nil || ctx.Err() != nil || calls > 2 {
		t.Errorf("the read: %v (its context: %v) after %d calls to Redis; want the call's error after one or two", err, ctx.Err(), calls)
	}
	g.down.Store(false)
	flushWithin(t, s)
}
