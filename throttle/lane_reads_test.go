package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// gatedLossyScripter holds each call while its gate is set, then runs it
// for real; the call after failNext is set reports failure once its
// batch is applied: a slow Redis whose reply is lost.
type gatedLossyScripter struct {
	redis.UniversalClient
	gate     atomic.Pointer[chan struct{}]
	sent     chan struct{}
	failNext atomic.Bool
}

func (g *gatedLossyScripter) run(cmd func() *redis.Cmd) *redis.Cmd {
	if c := g.gate.Load(); c != nil {
		g.sent <- struct{}{}
		<-*c
	}
	r := cmd()
	if r.Err() == nil && g.failNext.CompareAndSwap(true, false) {
		r.SetErr(context.DeadlineExceeded)
	}
	return r
}

func (g *gatedLossyScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return g.run(func() *redis.Cmd { return g.UniversalClient.EvalSha(ctx, sha, keys, args...) })
}

func (g *gatedLossyScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return g.run(func() *redis.Cmd { return g.UniversalClient.Eval(ctx, script, keys, args...) })
}

// TestFailedAdmitIsVoidedDespiteQueuedReads: reads queued while an admit's
// call is on its way must not cost that admit its void when the call's
// reply is lost. The void goes back into the caller's queue, which the
// reads fill; it is dropped, and the price of a request that was answered
// with an error stays charged in Redis.
func TestFailedAdmitIsVoidedDespiteQueuedReads(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		g := &gatedLossyScripter{UniversalClient: fx.rdb, sent: make(chan struct{}, 1)}
		s := NewRedisStore(g, RedisOptions{Timeout: testCallTimeout, ClockSkew: 5 * time.Second, LeaseRequests: -1,
			MaxPending: 2, RetryInterval: 10 * time.Millisecond})
		b := Bucket{Key: fx.key("void-behind-reads"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		mustPeek(t, s, b) // the script is loaded: each call below is one
		gate := make(chan struct{})
		g.gate.Store(&gate)
		admitted := make(chan error, 1)
		go func() {
			_, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 4})
			admitted <- err
		}()
		<-g.sent // the admit's call is on its way
		g.gate.Store(nil)
		reads := make(chan error, 2)
		for range 2 {
			go func() { _, err := s.Peek(context.Background(), b); reads <- err }()
		}
		queued(t, s, b.Key, 2)
		g.failNext.Store(true) // Redis applies the admit; its reply is lost
		close(gate)
		if err := <-admitted; err == nil {
			t.Fatal("an admit whose reply was lost answered")
		}
		for range 2 {
			// Answered, given way, or answered the call's error (queued
			// while the failed call was on its way, a read would go ahead
			// of the void put back): any is fine.
			if err := <-reads; err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a read: %v", err)
			}
		}
		flushWithin(t, s)
		if got := mustPeek(t, s, b).Remaining; got < 9.99 {
			t.Fatalf("Redis holds %.3f tokens after an admit answered with an error, want 10 (its void was dropped: %d dropped)",
				got, s.stats.dropped.Load())
		}
	})
}

// An admission queued behind a caller's budget read, itself behind the
// caller's call on its way, waits for three calls: the one on its way, the
// read's (a read rides with no other operation) and its own. Each call
// answers within the store's Timeout and the Failover gives an admission
// three times that (as the server does): a free read (GET /budget, a dry run) must not make the
// caller's next admission a store failure that takes every caller into
// the fail mode.
func TestAdmitBehindAReadIsNoStoreFailure(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, fx *redisFixture) {
		b, g, s, f := slowLane(t, fx, "admit-behind-read", 3*2*time.Second)
		g.slow(1600*time.Millisecond, 1600*time.Millisecond, 1600*time.Millisecond) // each within Timeout (2 s)
		first := make(chan Admission, 1)
		go func() { first <- mustAdmit(t, f, Request{Bucket: b, Cost: 1}) }()
		<-g.sent // the first admission's call is on its way
		read := make(chan error, 1)
		go func() { _, err := f.Peek(context.Background(), b); read <- err }()
		queued(t, s, b.Key, 1)
		second := make(chan error, 1)
		go func() {
			a, err := f.Admit(context.Background(), Request{Bucket: b, Cost: 1})
			if err == nil && !a.Allowed {
				err = fmt.Errorf("refused: %+v", a)
			}
			if a.Ticket != nil {
				a.Ticket.Release()
			}
			second <- err
		}()
		queued(t, s, b.Key, 2)
		(<-first).Ticket.Release()
		rerr, aerr := <-read, <-second
		h := f.Health()
		flushWithin(t, s)
		if rerr != nil || aerr != nil || h.Degraded {
			t.Fatalf("an admission behind a call of 1.6 s and a read's of 1.6 s, its own of 1.6 s, Timeout 2 s: read err %v, admission err %v, degraded %v (%s)",
				rerr, aerr, h.Degraded, h.Err)
		}
	})
}
