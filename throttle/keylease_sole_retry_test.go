package throttle

import (
	"context"
	"math"
	"testing"
	"time"
)

// What a Sole store's lease admitted reaches Redis only with its
// give-back. When the call carrying the give-back is lost, the give-back
// waits RetryInterval in its caller's queue, and rides only with a batch
// of the lease's shape: a request of the caller under another shape (its
// own TTL here) goes to Redis alone, and Redis decides it on a bucket
// that lacks every price the lease admitted. Six requests of 1 admitted
// in process leave a bucket of 10 with 2 tokens; a request of 3 must not
// be admitted: refused, or failed with the lost call (then the fail mode
// decides it).
func TestSoleLeaseGiveBackWaitingForItsRetryGoesBeforeAnotherShape(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		g := &failNextScripter{Scripter: f.rdb}
		s := NewRedisStore(g, RedisOptions{Timeout: time.Second, RetryInterval: time.Hour, Sole: true, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("sole-retry-shape"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		req := Request{Bucket: b, Cost: 1, TTL: time.Minute}
		for range 8 { // the bucket seen, the lease asked for, six on the lease
			a := mustAdmit(t, s, req)
			if !a.Allowed {
				t.Fatalf("a request of 1 refused: %+v", a.Result)
			}
			a.Ticket.Release()
		}
		if s.Stats().Local != 6 {
			t.Fatalf("%d requests in process, want 6", s.Stats().Local)
		}
		g.armed.Store(true) // the give-back's call is lost
		other, err := s.Admit(context.Background(), Request{Bucket: b, Cost: 3, TTL: 2 * time.Minute})
		failures := s.Stats().Failures
		if other.Allowed {
			other.Ticket.Release()
		}
		mustPeek(t, s, b) // sends what waits for its retry
		if failures != 1 || other.Allowed {
			t.Fatalf("8 of 10 tokens spent (6 in process), the give-back's call lost (%d failures): a request of 3 under another TTL allowed %v (%.3f left, error %v); want refused or failed",
				failures, other.Allowed, other.Result.Remaining, err)
		}
		if left := mustPeek(t, s, b).Remaining; math.Abs(left-2) > 1e-3 {
			t.Fatalf("after the give-back's retry: %.6f left, want 2", left)
		}
	})
}
