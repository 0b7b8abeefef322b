package throttle

import (
	"testing"
	"time"
)

// A Sole store's lease admits while the bucket as Redis last showed it
// surely pays. A peek under another limit of the caller (a faster refill:
// its tier changed) writes nothing in Redis, yet its reply is taken as the
// bucket the lease spends from: a bucket holding 1 token, read at a refill
// that fills it to 10, lets the lease admit its eight requests in process.
func TestSoleLeaseAdmitsNoMoreAfterAPeekUnderAnotherLimit(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour})
		b := Bucket{Key: f.key("sole-peek-shape"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		mustAdmit(t, s, Request{Bucket: b, Cost: 8, TTL: time.Hour}).Ticket.Release() // to Redis: the bucket seen, 2 left
		a := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: time.Hour})             // to Redis, with the lease: 1 left
		if !a.Allowed {
			t.Fatalf("a request of 1 from a bucket holding 2 refused: %+v", a.Result)
		}
		a.Ticket.Release()
		s.mu.Lock()
		ls := s.leases[b.Key]
		leased := ls != nil && ls.granted
		s.mu.Unlock()
		if !leased {
			t.Fatalf("no lease granted after two requests")
		}
		// Read under a limit that refills the bucket to its capacity at once.
		mustPeek(t, s, Bucket{Key: b.Key, Limit: Limit{Rate: 1e6, Capacity: 10}})
		admitted := 0
		for range 6 {
			if a := mustAdmit(t, s, Request{Bucket: b, Cost: 1, TTL: time.Hour}); a.Allowed {
				admitted++
				a.Ticket.Release()
			}
		}
		local := s.Stats().Local
		flushWithin(t, s)
		left := mustPeek(t, s, b).Remaining
		if admitted > 1 {
			t.Fatalf("six requests of 1 from a bucket holding 1 (after a peek under a faster limit): %d admitted (%d in process), %.6f left; want at most 1",
				admitted, local, left)
		}
	})
}
