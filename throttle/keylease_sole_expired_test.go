package throttle

import (
	"math"
	"testing"
	"time"
)

// What a Sole store's lease admitted is charged only by its give-back's
// replay, which admit.lua applies only when the give-back closes the
// lease's id. A request on the lease that runs longer than the lease's
// own time in the open hash (the request TTL, the hold and the call's
// timeout, plus the hash's slack) outlives the hash: the give-back closes
// nothing, and the prices the lease admitted are never charged. A request
// sent to Redis would have paid its price when admitted, whatever became
// of its record.
func TestSoleLeaseChargesWhatItAdmittedAfterItsIDExpired(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: 300 * time.Millisecond, Sole: true, LeaseHold: 50 * time.Millisecond})
		b := Bucket{Key: f.key("sole-expired-id"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		req := Request{Bucket: b, Cost: 1, TTL: 100 * time.Millisecond}
		mustAdmit(t, s, req).Ticket.Release() // to Redis: the bucket seen
		mustAdmit(t, s, req).Ticket.Release() // to Redis, with the lease
		a := mustAdmit(t, s, req)             // on the lease, running long
		if !a.Allowed || s.Stats().Local != 1 {
			t.Fatalf("third request: allowed %v, %d in process; want admitted in process", a.Allowed, s.Stats().Local)
		}
		// The lease's id lives for TTL+hold+timeout (450 ms) past its
		// call, the open hash 1 s more: wait until Redis has dropped it.
		deadline := time.Now().Add(10 * time.Second)
		for len(f.state(b.Key).open) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the lease's id still open after 10 s: %+v", f.state(b.Key))
			}
			time.Sleep(100 * time.Millisecond)
		}
		a.Ticket.Release()
		flushWithin(t, s)
		if left := mustPeek(t, s, b).Remaining; math.Abs(left-7) > 1e-3 {
			t.Fatalf("three requests of 1 admitted from a bucket of 10 that barely refills: %.6f left, want 7", left)
		}
	})
}
