package throttle

import (
	"testing"
	"time"
)

// A Sole store's lease admits against the bucket as last seen plus what it
// holds (its micro-token, less what it admitted). Once Redis has refilled
// the micro-token the lease took into a bucket at its capacity, a bucket
// seen full counts it twice: a request of 5 tokens and one micro-token is
// admitted from a bucket holding 5.
func TestSoleLeaseAdmitsNoMoreThanAFullBucketHolds(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour})
		// 1 micro-token a second: what the test waits for refills the two
		// micro-tokens taken, what it does not wait for refills nothing.
		b := Bucket{Key: f.key("sole-full-micro"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		tiny := Request{Bucket: b, Cost: 1e-6, TTL: time.Hour}
		mustPeek(t, s, b)                      // the bucket seen
		mustAdmit(t, s, tiny).Ticket.Release() // to Redis, with the lease: 2 micro-tokens
		deadline := time.Now().Add(10 * time.Second)
		for {
			mustPeek(t, s, b)
			s.mu.Lock()
			full := s.seen[b.Key].tokens >= toMicro(10)
			s.mu.Unlock()
			if full {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the bucket not full again after 10 s: %+v", f.state(b.Key))
			}
			time.Sleep(500 * time.Millisecond)
		}
		a1 := mustAdmit(t, s, Request{Bucket: b, Cost: 5, TTL: time.Hour})
		a1.Ticket.Release()
		a2 := mustAdmit(t, s, Request{Bucket: b, Cost: 5.000001, TTL: time.Hour})
		local := s.Stats().Local
		if a2.Allowed {
			a2.Ticket.Release()
		}
		flushWithin(t, s)
		if !a1.Allowed || a2.Allowed {
			t.Fatalf("from a full bucket of 10: 5, then 5.000001: allowed %v, %v (%d in process); want the second refused, 5 left",
				a1.Allowed, a2.Allowed, local)
		}
	})
}
