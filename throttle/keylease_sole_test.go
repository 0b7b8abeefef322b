package throttle

import (
	"math"
	"testing"
	"time"
)

// A Sole store leases a caller whose bucket is full — a token-taking
// lease would let it burst past its capacity there — and still admits no
// more than the bucket holds: ten requests of 1 from a bucket of 10 that
// barely refills, some of them in process, and none after.
func TestSoleLeaseFromAFullBucketAdmitsNoMoreThanItHolds(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: 5 * time.Second})
		b := Bucket{Key: f.key("sole-full"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		admitted := 0
		for range 20 {
			a := mustAdmit(t, s, Request{Bucket: b, Cost: 1})
			if a.Allowed {
				admitted++
				a.Ticket.Release()
			}
		}
		flushWithin(t, s)
		left := mustPeek(t, s, b).Remaining
		if admitted != 10 || s.Stats().Local == 0 || math.Abs(left) > 1e-3 {
			t.Fatalf("20 requests of 1 from a full bucket of 10: %d admitted (%d in process), %.6f left; want 10, some in process, 0 left",
				admitted, s.Stats().Local, left)
		}
	})
}

// What a Sole store's lease admitted goes to Redis dated: a bucket at its
// capacity that refills faster than the caller spends stays near full, as
// it would with each request sent at once. Debited all at the give-back,
// the eight requests' price would leave 2 tokens for the burst after them.
func TestSoleLeaseKeepsTheRefillOfABucketAtItsCapacity(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: 10 * time.Second})
		b := Bucket{Key: f.key("sole-brim"), Limit: Limit{Rate: 10, Capacity: 10}}
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
		for range 14 {
			if a := mustAdmit(t, s, req); a.Allowed {
				burst++
				a.Ticket.Release()
			}
		}
		most := 10 + 10*time.Since(start).Seconds()
		if burst < 8 || float64(burst) > most {
			t.Fatalf("a burst of 14 after 10 requests at 1 per 150 ms: %d admitted, want 8 to %.1f (the bucket near its capacity of 10)", burst, most)
		}
	})
}

// A Sole store admits a caller whose bucket stays full mostly in process:
// of 1,000 requests one after another, at most a quarter of a script call
// each, and the bucket is charged for every one.
func TestSoleLeaseCallsPerRequestOfAFullBucket(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true})
		b := Bucket{Key: f.key("sole-calls"), Limit: Limit{Rate: 1e-3, Capacity: 2000}}
		for i := range 1000 {
			a := mustAdmit(t, s, Request{Bucket: b, Cost: 1})
			if !a.Allowed {
				t.Fatalf("request %d refused: %+v", i, a.Result)
			}
			a.Ticket.Release()
		}
		st := s.Stats()
		flushWithin(t, s)
		left := mustPeek(t, s, b).Remaining
		if st.Calls > 250 || math.Abs(left-1000) > 0.1 {
			t.Fatalf("1,000 requests of 1: %d script calls (%d in process), %.6f of 2,000 left; want at most 250 calls, 1,000 left", st.Calls, st.Local, left)
		}
	})
}

// A request that goes to Redis while a Sole store's lease runs a request
// goes after what the lease admitted: Redis decides it on the bucket with
// that request paid, so the bucket's last token is spent once.
func TestSoleLeaseBusyHandsBackBeforeARequestGoesToRedis(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: 10 * time.Second})
		b := Bucket{Key: f.key("sole-busy"), Limit: Limit{Rate: 1e-6, Capacity: 4}}
		req := Request{Bucket: b, Cost: 1}
		mustAdmit(t, s, req).Ticket.Release() // to Redis: the bucket seen
		a1 := mustAdmit(t, s, req)            // to Redis, with the lease
		a1.Ticket.Release()
		a2 := mustAdmit(t, s, req) // on the lease, running
		if !a1.Allowed || !a2.Allowed || s.Stats().Local != 1 {
			t.Fatalf("first two: %v %v, %d in process; want both admitted, the second in process", a1.Allowed, a2.Allowed, s.Stats().Local)
		}
		a3 := mustAdmit(t, s, req) // to Redis: the last token
		a4 := mustAdmit(t, s, req)
		if !a3.Allowed || a4.Allowed {
			t.Fatalf("with one request running on the lease, two more from a bucket of 4: %v, %v; want the first admitted, the second refused", a3.Allowed, a4.Allowed)
		}
		a3.Ticket.Release()
		a2.Ticket.Settle(0.5) // settled in process, handed back when it ends
		flushWithin(t, s)
		if left := mustPeek(t, s, b).Remaining; math.Abs(left-0.5) > 1e-3 || f.state(b.Key).b.n != 0 {
			t.Fatalf("after the running request settled at 0.5: %.6f left, %d open; want 0.5, none", left, f.state(b.Key).b.n)
		}
	})
}

// What a Sole store's lease admitted is charged even when its caller's
// queue is full: the give-back is never dropped at MaxPending, as an
// ordinary finish is (the lease's requests would go unpaid).
func TestSoleLeaseGiveBackSurvivesAFullQueue(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour, MaxPending: 4, FinishDelay: time.Hour})
		b := Bucket{Key: f.key("sole-full-queue"), Limit: Limit{Rate: 1e-6, Capacity: 10}}
		req := Request{Bucket: b, Cost: 1}
		for range 3 { // the bucket seen, the lease asked for, one request on it
			mustAdmit(t, s, req).Ticket.Release()
		}
		s.mu.Lock()
		ls, l := s.leases[b.Key], s.laneLocked(b.Key)
		for len(l.queue) < s.opts.MaxPending { // finishes of nothing open: they settle nothing
			l.queue = append(l.queue, &pending{op: op{kind: opFinish, id: newID()}, sh: ls.sh})
		}
		s.mu.Unlock()
		if ls == nil || s.Stats().Local != 1 {
			t.Fatalf("lease %v, %d in process; want a lease that admitted one request", ls, s.Stats().Local)
		}
		s.expire(ls) // given back into a full queue
		flushWithin(t, s)
		if left := mustPeek(t, s, b).Remaining; math.Abs(left-7) > 1e-6 {
			t.Fatalf("three requests of 1 from a bucket of 10: %.6f left, want 7", left)
		}
	})
}

// A Sole store's lease sends a short replay when its moments do not
// matter: a caller whose bucket stays full (what it recorded is forgotten
// once the bucket is surely back at its capacity) and one whose bucket
// stays below it (each settlement joins the one before). Its eight
// requests, each settled at half its price, leave at most two entries.
func TestSoleLeaseReplayStaysShort(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		for _, c := range []struct {
			name  string
			limit Limit
		}{
			{"full", Limit{Rate: 1e6, Capacity: 1e9}},
			{"below its capacity", Limit{Rate: 1, Capacity: 1e6}},
		} {
			s := NewRedisStore(f.rdb, RedisOptions{Timeout: time.Second, Sole: true, LeaseHold: time.Hour})
			b := Bucket{Key: f.key("sole-short-" + c.name), Limit: c.limit}
			start := time.Now()
			mustAdmit(t, s, Request{Bucket: b, Cost: 1}).Ticket.Settle(0.5) // the bucket seen
			mustAdmit(t, s, Request{Bucket: b, Cost: 1}).Ticket.Settle(0.5) // the lease asked for
			// The finish of the request that asked for the lease reaches Redis.
			flushLane := func() {
				for {
					s.mu.Lock()
					_, busy := s.lanes[b.Key]
					s.mu.Unlock()
					if !busy {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			flushLane()
			for range 8 {
				// Redis's clock and the replay count whole µs: a request that
				// comes in the µs of the one before sees no refill yet.
				time.Sleep(100 * time.Microsecond)
				mustAdmit(t, s, Request{Bucket: b, Cost: 1}).Ticket.Settle(0.5)
			}
			s.mu.Lock()
			ls := s.leases[b.Key]
			n := -1
			if ls != nil {
				n = len(ls.spends)
			}
			s.mu.Unlock()
			if s.Stats().Local != 8 || n < 1 || n > 2 {
				t.Fatalf("%s: %d of 8 requests in process, the lease's replay holds %d entries; want 8, 1 or 2", c.name, s.Stats().Local, n)
			}
			flushWithin(t, s)
			got := mustPeek(t, s, b).Remaining
			most := c.limit.Capacity - 5 + c.limit.Rate*time.Since(start).Seconds()
			if c.name != "full" && (got < c.limit.Capacity-5-1e-6 || got > most) {
				t.Fatalf("%s: ten requests settled at 0.5: %.6f left, want %.6f to %.6f", c.name, got, c.limit.Capacity-5, most)
			}
		}
	})
}

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
