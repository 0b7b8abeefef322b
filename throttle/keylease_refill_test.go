package throttle

import (
	"math"
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
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: 10 * time.Second})
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

// TestBusyLeaseRecordStaysShort: a busy lease pays the debits of its
// caller's other requests, each recorded for its give-back to replay; at
// 4×LeaseRequests settlements it hands its tokens back instead (a move),
// and the debits after go to Redis, so the replay stays short however many
// come while its request runs.
func TestBusyLeaseRecordStaysShort(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("busy-record"), Limit: Limit{Rate: 1e-6, Capacity: 800}}
		req := Request{Bucket: b, Cost: 1, Debt: 100, MaxInFlight: 500}
		for range 2 { // the bucket seen, then the lease asked for
			mustAdmit(t, s, req).Ticket.Settle(1)
		}
		running := mustAdmit(t, s, req)
		if s.Stats().Local != 1 {
			t.Fatalf("stats %+v: want a request running on the lease", s.Stats())
		}
		s.mu.Lock()
		ls := s.leases[b.Key]
		s.mu.Unlock()
		for i := range 100 {
			a := mustAdmit(t, s, req) // to Redis: the lease's slot is taken
			if !a.Allowed {
				t.Fatalf("request %d refused: %+v", i, a.Result)
			}
			a.Ticket.Settle(1.001) // a debit of a thousandth, paid from the lease while it holds some
		}
		s.mu.Lock()
		n, limit := len(ls.spends), 4*s.opts.LeaseRequests
		s.mu.Unlock()
		if n > limit {
			t.Errorf("the busy lease's record holds %d settlements after 100 debits of other requests, want at most %d", n, limit)
		}
		running.Ticket.Settle(1)
		flushWithin(t, s)
		if got, want := mustPeek(t, s, b).Remaining, 800-103-0.1; math.Abs(got-want) > 1e-4 {
			t.Errorf("bucket after 103 requests of 1 and 100 debits of 0.001: %v, want %v", got, want)
		}
	})
}
