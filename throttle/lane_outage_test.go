package throttle

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// unreachableRedis is a client of an address nothing listens on: every
// call fails at once, as in an outage where Redis refuses connections.
func unreachableRedis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// failEach admits one request for each of n callers, every one of which
// fails: each caller's lane is left holding its admit's void.
func failEach(t *testing.T, s *RedisStore, n int, ttl time.Duration) {
	t.Helper()
	for i := range n {
		req := Request{Bucket: Bucket{Key: fmt.Sprintf("{outage:%d}", i), Limit: Limit{Rate: 100, Capacity: 10}},
			Cost: 1, TTL: ttl}
		if _, err := s.Admit(context.Background(), req); err == nil {
			t.Fatal("an admit to an unreachable Redis answered")
		}
	}
}

// laneCount is how many lanes s holds, and how many failed calls in a row
// the one that failed fewest has seen.
func laneCount(s *RedisStore) (n, leastFails int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	leastFails = math.MaxInt
	for _, l := range s.lanes {
		leastFails = min(leastFails, l.fails)
	}
	return len(s.lanes), leastFails
}

// waitFor polls cond until it holds, or until a generous guard against a
// hang has passed; it reports whether cond held.
func waitFor(cond func() bool) bool {
	guard := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(guard) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestRedisLanesBackOffAndEmptyInAnOutage: in an outage with no traffic
// after one failed request per caller, each caller's lane tries its void
// again after RetryInterval, then twice as long, and so on — never more
// calls than that schedule allows in the time it ran, however late its
// timers fire — and the lanes are gone, their voids dropped and counted,
// once the voids can no longer change a bucket (the requests' TTL has
// passed and the buckets would have refilled).
func TestRedisLanesBackOffAndEmptyInAnOutage(t *testing.T) {
	t.Parallel()
	const callers = 16
	opts := RedisOptions{Timeout: 50 * time.Millisecond, ClockSkew: 10 * time.Millisecond,
		RetryInterval: 10 * time.Millisecond, LeaseRequests: -1}
	s := NewRedisStore(unreachableRedis(t), opts)
	start := time.Now()
	failEach(t, s, callers, 300*time.Millisecond)
	emptied := waitFor(func() bool { n, _ := laneCount(s); return n == 0 })
	elapsed := time.Since(start)
	st := s.Stats()
	// A lane's k-th retry comes no earlier than (2^k - 1) × RetryInterval
	// after its first call.
	most := callers * (1 + int(math.Log2(float64(elapsed)/float64(opts.RetryInterval)+1)))
	t.Logf("%d callers, %v: %+v (at most %d calls)", callers, elapsed.Round(time.Millisecond), st, most)
	if st.Calls > uint64(most) {
		t.Errorf("%d script calls in %v for %d callers, want at most %d: the lanes do not back off",
			st.Calls, elapsed.Round(time.Millisecond), callers, most)
	}
	if !emptied {
		n, _ := laneCount(s)
		t.Fatalf("%d lanes still held after %v: their voids are never dropped", n, elapsed.Round(time.Millisecond))
	}
	if st.Moot != callers || st.Voids != callers {
		t.Errorf("%d voids, %d dropped as moot; want %d of each", st.Voids, st.Moot, callers)
	}
}

// TestRedisLaneRetriesAreCappedAndStopWithTheClient: a lane whose retries
// have backed off to MaxRetryInterval makes at most one call per
// MaxRetryInterval for as long as the outage lasts; once the Redis client
// is closed (geotoll serve closes it when it stops), each lane's next
// attempt drops what it holds (counted) and the lane, timer and all, is
// gone.
func TestRedisLaneRetriesAreCappedAndStopWithTheClient(t *testing.T) {
	t.Parallel()
	const callers = 8
	opts := RedisOptions{Timeout: 50 * time.Millisecond, RetryInterval: 5 * time.Millisecond,
		MaxRetryInterval: 40 * time.Millisecond, LeaseRequests: -1}
	rdb := unreachableRedis(t)
	s := NewRedisStore(rdb, opts)
	failEach(t, s, callers, time.Hour) // nothing becomes moot in this test
	if !waitFor(func() bool { _, least := laneCount(s); return least >= 4 }) {
		t.Fatal("the lanes never backed off to MaxRetryInterval (4 failures in a row)")
	}
	before, from := s.Stats().Calls, time.Now()
	time.Sleep(10 * opts.MaxRetryInterval)
	calls, elapsed := s.Stats().Calls-before, time.Since(from)
	most := callers * (int(elapsed/opts.MaxRetryInterval) + 1)
	t.Logf("%d calls of %d lanes in %v (at most %d)", calls, callers, elapsed.Round(time.Millisecond), most)
	if calls > uint64(most) {
		t.Errorf("%d calls of %d lanes in %v at MaxRetryInterval %v, want at most %d",
			calls, callers, elapsed.Round(time.Millisecond), opts.MaxRetryInterval, most)
	}
	if n, _ := laneCount(s); n != callers {
		t.Fatalf("%d lanes before the client closed, want %d", n, callers)
	}
	dropped := s.Stats().Dropped
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { n, _ := laneCount(s); return n == 0 }) {
		n, _ := laneCount(s)
		t.Fatalf("%d lanes still held after the Redis client closed", n)
	}
	if got := s.Stats().Dropped - dropped; got != callers {
		t.Errorf("%d operations dropped when the client closed, want the %d voids", got, callers)
	}
}

// TestRedisLaneBackoffEndsWithAnAnsweredCall: after failed calls, the
// caller's next call carries the voids they left, and once it is answered
// the lane's retries start from RetryInterval again — for the finish of
// another shape that the call could not carry, too.
func TestRedisLaneBackoffEndsWithAnAnsweredCall(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		flaky := &flakyScripter{UniversalClient: f.rdb}
		s := NewRedisStore(flaky, RedisOptions{Timeout: testCallTimeout, RetryInterval: time.Hour, LeaseRequests: -1})
		b := Bucket{Key: f.key("backoff-reset"), Limit: slow}
		start := time.Now()
		other := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: time.Minute})
		flaky.armed.Store(true) // Redis applies each call; its reply is lost
		other.Ticket.Settle(0)  // refund 1, in a call of its own shape
		if !waitFor(func() bool { return s.Stats().Failures == 1 }) {
			t.Fatal("the finish's call never failed")
		}
		req := Request{Bucket: b, Cost: 2, TTL: 2 * time.Minute}
		for range 2 {
			if _, err := s.Admit(context.Background(), req); err == nil {
				t.Fatal("an admit whose reply was lost answered")
			}
		}
		fails := func() int {
			s.mu.Lock()
			defer s.mu.Unlock()
			if l := s.lanes[b.Key]; l != nil {
				return l.fails
			}
			return -1
		}
		if n := fails(); n != 3 {
			t.Fatalf("the lane saw %d failed calls in a row, want 3", n)
		}
		flaky.armed.Store(false)
		mustAdmit(t, s, req).Ticket.Release() // carries the two voids, not the finish
		if n := fails(); n != 0 {
			t.Errorf("the lane still counts %d failed calls after an answered one (-1: no lane)", n)
		}
		flushWithin(t, s)
		if st := f.state(b.Key); len(st.open) != 0 || !slowHolds(st.b.tokens, 8, start) {
			t.Fatalf("after the voids and the finish: %v tokens, %d open; want 8 and none", st.b.tokens/micro, len(st.open))
		}
	})
}
