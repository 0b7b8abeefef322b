package throttle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLeaseAndAnotherReplicasRefundsStayWithinTheCapacity: while replica
// A's lease is out (its tokens spent in Redis), replica B's refunds bring
// the bucket in Redis back up — as far as the capacity less what is out on
// leases, never to the capacity itself: a burst of both replicas then
// admits at most the capacity, as the bucket would without the lease.
//
// B's 40 requests are open while the bucket refills to its capacity; the
// test dates the bucket back instead of waiting for the refill, and the
// rate is a micro-token a second, so that nothing refills during the
// burst.
func TestLeaseAndAnotherReplicasRefundsStayWithinTheCapacity(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		a := f.store
		b := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, LeaseRequests: -1})
		bk := Bucket{Key: f.key("replica-refunds"), Limit: Limit{Rate: slow.Rate, Capacity: 80}}
		req := Request{Bucket: bk, Cost: 1, MaxInFlight: 64}
		var open []*Ticket
		for range 40 {
			x := mustAdmit(t, b, req)
			if !x.Allowed {
				t.Fatalf("B refused %+v", x)
			}
			open = append(open, x.Ticket)
		}
		datedBack(t, f, bk.Key) // it refills to 80, B's 40 still open
		for range 2 {           // the first shows the bucket, the second takes a lease
			x := mustAdmit(t, a, req)
			if !x.Allowed {
				t.Fatalf("A refused %+v", x)
			}
			x.Ticket.Settle(1)
		}
		if st := a.Stats(); st.Leases != 1 {
			t.Fatalf("stats %+v: want one lease", st)
		}
		openNow(t, f, bk.Key, 41) // A's finishes have landed: B's 40 and the lease are open
		for _, x := range open {  // B's requests cost nothing: 40 refunded
			x.Settle(0)
		}
		flushWithin(t, b)
		// Without the lease the bucket would hold min(80, 78 + 40) = 80.
		admitted := 0
		for i := 0; i < 400; i++ {
			x := mustAdmit(t, []*RedisStore{a, b}[i%2], req)
			if x.Allowed {
				admitted++
				x.Ticket.Settle(1)
			}
		}
		if admitted > 80 {
			t.Fatalf("A and B admitted %d requests of 1 with a bucket of 80 (A's lease %d in process)", admitted, a.Stats().Local)
		}
		t.Logf("admitted %d; A: %+v", admitted, a.Stats())
	})
}

// datedBack rewrites a caller's bucket as of a billion seconds earlier:
// the next call refills it to its capacity, as if that time had passed.
func datedBack(t *testing.T, f *redisFixture, key string) {
	t.Helper()
	ctx := context.Background()
	raw, err := f.rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	fields := strings.Fields(raw)
	var sec int64
	if _, err := fmt.Sscan(fields[1], &sec); err != nil {
		t.Fatalf("%s holds %q: %v", key, raw, err)
	}
	fields[1] = fmt.Sprint(sec - 1e9)
	if err := f.rdb.Do(ctx, "SET", key, strings.Join(fields, " "), "KEEPTTL").Err(); err != nil {
		t.Fatal(err)
	}
}
