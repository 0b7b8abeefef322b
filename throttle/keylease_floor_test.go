package throttle

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestAnotherReplicasDebitMeetsTheFloorOfTheBucketAndTheLease: while
// replica A's lease is out (its tokens spent in Redis), replica B settles
// a request that cost more than it paid, deeper than the debt floor. The
// floor cuts that debit where it would cut it without the lease — at the
// floor of the bucket and the lease together — so that once the lease is
// back the bucket holds what the in-process store holds after the same
// requests: the caller keeps nothing of the debt the lease held.
//
// A takes a lease of 8 from a bucket of 80 (80 less two requests of 1),
// admits one request of 1 on it, and keeps it out; B admits 70 through
// Redis and settles it at 75 (the floor of 3 cuts nothing without the
// lease: 2 left) or 100 (the floor cuts 17: -3 left).
func TestAnotherReplicasDebitMeetsTheFloorOfTheBucketAndTheLease(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, c := range []struct {
			price, want float64
		}{{75, 2}, {100, -3}} {
			a := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, LeaseHold: testLeaseHold})
			b := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, LeaseRequests: -1})
			mem := NewMemoryStore(MemoryOptions{})
			bk := Bucket{Key: f.key(fmt.Sprint("floor-with-lease-", c.price)), Limit: Limit{Rate: 1e-6, Capacity: 80}}
			r, rm := withBusyLease(t, a, mem, bk) // Redis 70, A's lease 7, r runs on it
			r.Ticket.Settle(1)
			rm.Ticket.Settle(1)
			big := Request{Bucket: bk, Cost: 70, Debt: 3, MaxInFlight: 8}
			x, xm := mustAdmit(t, b, big), mustAdmit(t, mem, big)
			if !x.Allowed || !xm.Allowed {
				t.Fatalf("B's 70 of 70: %+v / in-process %+v", x, xm)
			}
			x.Ticket.Settle(c.price)
			xm.Ticket.Settle(c.price)
			flushWithin(t, b) // B's debit reaches Redis while A's lease is out
			if st := a.Stats(); st.Leases != 1 || st.Local != 1 {
				t.Fatalf("A: %+v; want one lease, one request admitted on it", st)
			}
			flushWithin(t, a) // the lease goes back
			got, want := mustPeek(t, a, bk).Remaining, mustPeek(t, mem, bk).Remaining
			// The rate is a micro-token a second: either may have refilled
			// a few since the other's requests.
			if math.Abs(want-c.want) > 1e-5 || math.Abs(got-want) > 1e-5 {
				t.Errorf("B settled 70 at %v beside A's lease: the bucket holds %v with the lease back, the in-process store %v (want %v)",
					c.price, got, want, c.want)
			}
		}
	})
}
