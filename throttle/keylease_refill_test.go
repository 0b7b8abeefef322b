package throttle

import (
	"testing"
	"time"
)

// What a lease admitted goes to Redis dated: a bucket at its capacity that
// refills faster than the caller spends stays near full, as it would with
// each request sent at once, though Redis stopped its refill at the
// capacity less the lease while the lease was out. Without the replay, the
// eight requests on the lease would leave 72 tokens for the burst after
// them.
func TestLeaseKeepsTheRefillOfABucketAtItsCapacity(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, LeaseHold: 10 * time.Second})
		b := Bucket{Key: f.key("lease-refill-at-capacity"), Limit: Limit{Rate: 10, Capacity: 80}}
		req := Request{Bucket: b, Cost: 1, TTL: time.Minute}
		for i := range 10 { // 2 to Redis (the bucket seen, then the lease asked for), 8 on the lease
			a := mustAdmit(t, s, req)
			if !a.Allowed {
				t.Fatalf("request %d, 150 ms after the one before, refused: %+v", i, a.Result)
			}
			a.Ticket.Release()
			time.Sleep(150 * time.Millisecond)
		}
		if s.Stats().Local != 8 {
			t.Fatalf("%d of 10 spaced requests admitted in process, want 8", s.Stats().Local)
		}
		start := time.Now()
		burst := 0
		for range 90 {
			if a := mustAdmit(t, s, req); a.Allowed {
				burst++
				a.Ticket.Release()
			}
		}
		most := 80 + 10*time.Since(start).Seconds()
		if burst < 79 || float64(burst) > most {
			t.Fatalf("a burst of 90 after 10 requests at 1 per 150 ms: %d admitted, want 79 to %.1f (the bucket near its capacity of 80)", burst, most)
		}
	})
}
