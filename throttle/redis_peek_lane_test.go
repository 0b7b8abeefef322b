package throttle

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slowScripter is a real Redis whose script calls of one key each take
// the next of delays longer (a loaded server): every one answers within
// the store's Timeout.
type slowScripter struct {
	redis.Scripter
	key    string
	sent   chan struct{}
	mu     sync.Mutex
	delays []time.Duration
}

func (g *slowScripter) wait(keys []string) {
	if len(keys) == 0 || keys[0] != g.key {
		return
	}
	g.mu.Lock()
	var d time.Duration
	if len(g.delays) > 0 {
		d, g.delays = g.delays[0], g.delays[1:]
	}
	g.mu.Unlock()
	select {
	case g.sent <- struct{}{}:
	default:
	}
	time.Sleep(d)
}

func (g *slowScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	g.wait(keys)
	return g.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (g *slowScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	g.wait(keys)
	return g.Scripter.Eval(ctx, script, keys, args...)
}

// slowLane is a Failover (fail_mode closed, timeout for an admission, a
// read half as long again) over a RedisStore (Timeout 2 s) whose calls of
// the caller b are slowed by g, the script loaded.
func slowLane(t *testing.T, fx *redisFixture, name string, timeout time.Duration) (Bucket, *slowScripter, *RedisStore, *Failover) {
	t.Helper()
	b := Bucket{Key: fx.key(name), Limit: Limit{Rate: 1, Capacity: 100}}
	g := &slowScripter{Scripter: fx.rdb, key: b.Key, sent: make(chan struct{}, 1)}
	s := NewRedisStore(g, RedisOptions{Timeout: 2 * time.Second, ClockSkew: 10 * time.Second, LeaseRequests: -1})
	f := &Failover{Primary: s, Mode: FailClosed, Timeout: timeout, ProbeInterval: time.Hour,
		PeekReuse: -1, Logger: slog.New(slog.DiscardHandler)}
	mustAdmit(t, f, Request{Bucket: b, Cost: 1}).Ticket.Release() // the script is loaded
	flushWithin(t, s)
	return b, g, s, f
}

// slow makes g's next calls take ds, one each, forgetting the calls it
// signalled so far.
func (g *slowScripter) slow(ds ...time.Duration) {
	select {
	case <-g.sent:
	default:
	}
	g.mu.Lock()
	g.delays = ds
	g.mu.Unlock()
}

// A budget read of a caller whose call is on its way waits for that call
// on the caller's lane — and for a finish of the caller queued meanwhile,
// whose shape it cannot ride with — then makes its own. Each call answers
// within the store's Timeout; the server gives the Failover three times
// that for an admission, half as long again for a read: the read must be
// answered, not fail and take the whole Failover into its fail mode
// (closed here: a 503 for every caller) for one caller's slow calls.
func TestPeekBehindACallOnItsWayIsNoStoreFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		finish  bool            // a finish of the caller queued behind the call on its way
		delays  []time.Duration // each within the store's Timeout (2 s)
		timeout time.Duration   // the Failover's
	}{
		{"behind a call", false, []time.Duration{1500 * time.Millisecond, time.Second}, 20 * time.Second},
		{"behind a call and a finish", true, []time.Duration{1600 * time.Millisecond, 1600 * time.Millisecond, 1600 * time.Millisecond}, 3 * 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forEachRedis(t, func(t *testing.T, fx *redisFixture) {
				b, g, s, f := slowLane(t, fx, "peek-behind", c.timeout)
				held := mustAdmit(t, f, Request{Bucket: b, Cost: 1})
				g.slow(c.delays...)
				done := make(chan Admission, 1)
				go func() { done <- mustAdmit(t, f, Request{Bucket: b, Cost: 1}) }()
				<-g.sent // the admission's call is on its way
				if c.finish {
					held.Ticket.Settle(2) // its finish waits for that call
				}
				_, perr := f.Peek(context.Background(), b)
				h := f.Health()
				a := <-done
				a.Ticket.Release()
				held.Ticket.Release()
				flushWithin(t, s)
				if !a.Allowed {
					t.Fatalf("the admission on its way: %+v", a.Result)
				}
				if perr != nil || h.Degraded {
					t.Fatalf("a read behind calls of %v, Timeout 2 s: err %v, degraded %v (%s)", c.delays, perr, h.Degraded, h.Err)
				}
			})
		})
	}
}
