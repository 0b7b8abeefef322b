package throttle

import (
	"fmt"
	"testing"
	"time"
)

// The lease's arithmetic, decision by decision, at the boundaries its
// integration tests pass by: each case below changes its answer when one
// comparison or sign of keylease.go or keylease_track.go is changed
// (TESTING.md, "Mutation").

// unrefilled dates a bucket an hour ahead: the script refills nothing over
// a clock that stepped back, so what it holds stays what the case says.
func unrefilled(tokens float64) seenBucket {
	return seenBucket{tokens: toMicro(tokens), at: time.Now().Add(time.Hour)}
}

// TestLeaseSize: the lease a request asks for, from the caller's bucket as
// last seen — none when the bucket cannot pay the request and the lease.
func TestLeaseSize(t *testing.T) {
	const key = "k"
	cases := []struct {
		name     string
		leaseReq int
		rate     float64 // tokens a second
		bucket   float64 // tokens, as last seen
		req      Request
		unseen   bool
		want     float64 // tokens
	}{
		{name: "pays the request and the lease", leaseReq: 4, rate: 1, bucket: 50, want: 4},
		{name: "pays exactly the request and the lease", leaseReq: 4, rate: 1e-6, bucket: 5, want: 4},
		{name: "short of the lease by half a request", leaseReq: 4, rate: 1e-6, bucket: 4.5},
		{name: "a full bucket", leaseReq: 4, rate: 10, bucket: 100, want: 4},
		{name: "would refill past the capacity within LeaseHold", leaseReq: 4, rate: 10, bucket: 95, want: 4},
		{name: "an eighth of the capacity at most", leaseReq: 40, rate: 1e-6, bucket: 50, want: 12.5},
		{name: "a lease of one request", leaseReq: 1, rate: 1e-6, bucket: 50, want: 1},
		{name: "without leases", leaseReq: -1, rate: 1e-6, bucket: 50},
		{name: "a bucket not seen", leaseReq: 4, rate: 1e-6, bucket: 50, unseen: true},
		{name: "a shadow request", leaseReq: 4, rate: 1e-6, bucket: 50, req: Request{Shadow: true}},
		{name: "an aggregate bucket", leaseReq: 4, rate: 1e-6, bucket: 50, req: Request{Aggregate: &Bucket{Key: "agg"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &RedisStore{opts: RedisOptions{LeaseRequests: c.leaseReq, LeaseHold: time.Second},
				seen: map[string]seenBucket{}}
			if !c.unseen {
				s.seen[key] = unrefilled(c.bucket)
			}
			req := c.req
			req.Bucket = Bucket{Key: key, Limit: Limit{Rate: c.rate, Capacity: 100}}
			req.Cost = 1
			if got := s.leaseSizeLocked(req, shapeOf(req)); got != toMicro(c.want) {
				t.Fatalf("bucket %v, %d requests' lease, rate %v: lease of %v tokens, want %v",
					c.bucket, c.leaseReq, c.rate, fromMicro(got), c.want)
			}
		})
	}
}

// TestLeaseRefilledMicro: a bucket seen at a time that is not a whole second
// refills for the time since, to the microsecond.
func TestLeaseRefilledMicro(t *testing.T) {
	sh := shape{rate: toMicro(2), capacity: toMicro(100)}
	at := time.Unix(1000, 500_000_000)
	if got, want := refilledMicro(toMicro(10), at, at.Add(1500*time.Millisecond), sh), toMicro(13); got != want {
		t.Fatalf("10 tokens refilled at 2 a second for 1.5 s: %v micro-tokens, want %v", got, want)
	}
}

// TestTokenLeaseRecord: a lease that took tokens records what it admitted
// and settled for its give-back to replay, moving a settlement only where
// the caller cannot gain by it: a refund into the settlements before it,
// the last first, none of which goes below zero while the record holds
// the lease's spends. A record
// of 4×LeaseRequests ends it. Its give-back hands what it took back as of
// when it took it, first, then replays the record, and settles nothing
// more.
func TestTokenLeaseRecord(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type settle struct {
		ms int
		d  float64 // tokens, a debit when positive
	}
	cases := []struct {
		name    string
		settles []settle
		want    []spend // tokens
		done    bool
	}{
		{"a request and its refund", []settle{{1, 3}, {2, -1}}, []spend{{2, at(1)}}, false},
		{"two requests", []settle{{1, 3}, {2, -1}, {3, 3}, {4, -3}}, []spend{{2, at(1)}, {0, at(3)}}, false},
		{"a debit after the request", []settle{{1, 3}, {2, 1}}, []spend{{3, at(1)}, {1, at(2)}}, false},
		{"a refund beyond the debit before it", []settle{{1, 1}, {2, 0.5}, {3, -1}}, []spend{{0.5, at(1)}, {0, at(2)}}, false},
		{"four debits: a record of 4×LeaseRequests", []settle{{1, 1}, {2, 1}, {3, -0.5}, {4, 1}, {5, 1}},
			[]spend{{1, at(1)}, {0.5, at(2)}, {1, at(4)}, {1, at(5)}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &RedisStore{opts: RedisOptions{LeaseRequests: 1}}
			ls := &keyLease{s: s, sh: shape{rate: toMicro(1), capacity: toMicro(100)}, size: toMicro(10), left: toMicro(10), grantAt: at(0)}
			for _, x := range c.settles {
				ls.spendLocked(at(x.ms), toMicro(x.d))
				ls.left -= toMicro(x.d)
			}
			if len(ls.spends) != len(c.want) {
				t.Fatalf("a record of %d settlements, want %d", len(ls.spends), len(c.want))
			}
			for i, w := range c.want {
				if got := ls.spends[i]; got.d != toMicro(w.d) || !got.at.Equal(w.at) {
					t.Fatalf("record %d of %d: %v tokens at +%v, want %v at +%v", i, len(ls.spends), fromMicro(got.d), got.at.Sub(t0), w.d, w.at.Sub(t0))
				}
			}
			if ls.done != c.done {
				t.Fatalf("done %v, want %v", ls.done, c.done)
			}
			back := ls.handBack(opFinish)
			if back.op.amount != 0 || len(back.spends) != len(c.want)+1 || back.spends[0].d != -toMicro(10) || !back.spends[0].at.Equal(at(0)) {
				t.Fatalf("give-back %+v with %v: want the 10 taken back at +0 first, then the record, and no delta", back.op, back.spends)
			}
		})
	}
}

// TestTokenLeaseTakesAnotherRequestsRefundAtTheBrim: a refund of the
// caller's request that Redis admitted, which would fill the bucket to
// what Redis lets it hold while the lease is out, is paid into the lease
// as far as the lease has spent on requests that are over (what a bucket
// holding the lease's tokens would have kept of it); the rest goes to
// Redis. The lease records it as
// a refund of its own, and its give-back hands back what it took, then
// the record.
func TestTokenLeaseTakesAnotherRequestsRefundAtTheBrim(t *testing.T) {
	for _, c := range []struct {
		refund, sent, left, remaining float64 // tokens
		record                        float64 // the record's one settlement
		running                       bool    // the 3 spent are the price of a request still running
	}{
		{refund: 2, sent: 0, left: 9, remaining: 99, record: 1},
		{refund: 5, sent: -2, left: 10, remaining: 100, record: 0},              // Redis cuts the 2 it gets at 90
		{refund: 2, sent: -2, left: 7, remaining: 97, record: 3, running: true}, // its price may come back to the lease; Redis cuts the 2 at 90
	} {
		t0 := time.Now()
		// A hold no slow run outlasts: the lease must not move meanwhile.
		s := &RedisStore{opts: RedisOptions{LeaseRequests: 4, LeaseHold: time.Hour}, seen: map[string]seenBucket{}, leases: map[string]*keyLease{}, lanes: map[string]*lane{}}
		sh := shape{rate: toMicro(1), capacity: toMicro(100), ttlMS: (2 * time.Hour).Milliseconds()}
		s.seen["k"] = seenBucket{tokens: toMicro(90), at: t0, rate: sh.rate, capacity: sh.capacity}
		ls := &keyLease{s: s, key: "k", sh: sh, size: toMicro(10), left: toMicro(10), granted: true, grantAt: t0}
		s.leases["k"] = ls
		ls.spendLocked(t0.Add(time.Millisecond), toMicro(3))
		ls.left -= toMicro(3)
		if c.running {
			ls.busy, ls.running = true, toMicro(3)
		}
		if d := s.beforeFinishLocked(ls, &pending{}, -toMicro(c.refund)); d != toMicro(c.sent) {
			t.Fatalf("a refund of %v at the brim, the lease having spent 3: %v sent to Redis, want %v", c.refund, fromMicro(d), c.sent)
		}
		if ls.left != toMicro(c.left) || ls.done {
			t.Fatalf("refund %v: the lease holds %v (done %v), want %v", c.refund, fromMicro(ls.left), ls.done, c.left)
		}
		if got := ls.remaining(s.seen["k"], t0); got != toMicro(c.remaining) {
			t.Fatalf("refund %v: remaining %v, want %v", c.refund, fromMicro(got), c.remaining)
		}
		back := ls.handBack(opFinish)
		if back.op.amount != 0 || len(back.spends) != 2 || back.spends[0].d != -toMicro(10) || back.spends[1].d != toMicro(c.record) {
			t.Fatalf("refund %v: give-back %+v with %v: want the 10 taken, then 3 spent less what the lease took of the refund", c.refund, back.op, back.spends)
		}
	}
}

// TestLeaseHoldAndTTLExtra: a lease admits for LeaseHold, or half the
// request TTL when that is shorter; only a call that asks for a lease
// keeps its operations open for the hold and the call's timeout longer.
func TestLeaseHoldAndTTLExtra(t *testing.T) {
	s := &RedisStore{opts: RedisOptions{LeaseHold: 500 * time.Millisecond, Timeout: time.Second}}
	short, long := shape{ttlMS: 400}, shape{ttlMS: 10_000}
	if got := s.leaseHold(short); got != 200*time.Millisecond {
		t.Errorf("hold with a TTL of 400 ms: %v, want 200ms", got)
	}
	if got := s.leaseHold(long); got != 500*time.Millisecond {
		t.Errorf("hold with a TTL of 10 s: %v, want 500ms", got)
	}
	plain := &pending{op: op{kind: opAdmit, id: "a"}}
	ask := &pending{op: op{kind: opAdmit, id: "l"}, lease: &keyLease{}}
	if got := s.leaseTTLExtra(long, []*pending{plain}); got != 0 {
		t.Errorf("extra TTL of a call without a lease's admit: %d ms, want 0", got)
	}
	if got := s.leaseTTLExtra(long, []*pending{plain, ask}); got != 1500 {
		t.Errorf("extra TTL of a call with a lease's admit: %d ms, want 1500", got)
	}
}

// TestLeaseSeenBucket: the bucket a reply shows is its last result that
// reports the caller's own bucket (an aggregate's refusal reports the
// aggregate's), and stale entries are swept exactly when the map has grown
// to the size set at the last sweep.
func TestLeaseSeenBucket(t *testing.T) {
	now := time.Now()
	stale := now.Add(-time.Hour)
	s := &RedisStore{opts: RedisOptions{LeaseRequests: 8, LeaseHold: time.Second},
		seen: map[string]seenBucket{"a": {at: stale}, "b": {at: stale}}, seenAt: 3}
	s.sawLocked("c", shape{}, nil, []opResult{{status: stAdmitted, tokens: 5}, {status: stAggregate, tokens: 9}}, now)
	if got := s.seen["c"]; got.tokens != 5 || !got.at.Equal(now) {
		t.Fatalf("seen after an admission then an aggregate's refusal: %+v, want 5 micro-tokens sent at %v", got, now)
	}
	if len(s.seen) != 1 || s.seenAt != 1024 {
		t.Fatalf("at 3 entries of 3: %d entries left, next sweep at %d; want 1 (the two stale swept), 1024", len(s.seen), s.seenAt)
	}
	s.seen["d"] = seenBucket{at: stale}
	s.sawLocked("e", shape{}, nil, []opResult{{status: stAdmitted, tokens: 1}}, now)
	if _, ok := s.seen["d"]; !ok || len(s.seen) != 3 {
		t.Fatalf("at 3 entries of 1024: %d entries left (the stale one kept: %v), want 3, none swept", len(s.seen), ok)
	}
	for i := range 600 {
		s.seen[fmt.Sprint("fresh", i)] = seenBucket{at: now}
	}
	s.seenAt = 600
	s.sawLocked("f", shape{}, nil, []opResult{{status: stAdmitted, tokens: 1}}, now)
	if len(s.seen) != 603 || s.seenAt != 1206 {
		t.Fatalf("after a sweep of 604 entries, 1 stale: %d left, next sweep at %d; want 603, 1206", len(s.seen), s.seenAt)
	}
}

// TestLeaseSpendsItsLastToken: a lease admits requests until what it holds
// is spent, down to its last token, when the bucket beside it is empty —
// the request that takes the lease spends the bucket's last tokens with it.
func TestLeaseSpendsItsLastToken(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		b := Bucket{Key: f.key("last-token"), Limit: Limit{Rate: 1e-6, Capacity: 40}}
		// 34 of 40 leave 6: the next request of 1 takes a lease of 5 (an
		// eighth of the capacity), which leaves the bucket empty.
		mustAdmit(t, f.store, Request{Bucket: b, Cost: 34, MaxInFlight: 8}).Ticket.Settle(34)
		req := Request{Bucket: b, Cost: 1, MaxInFlight: 8}
		mustAdmit(t, f.store, req).Ticket.Settle(1)
		if st := f.store.Stats(); st.Leases != 1 || st.Local != 0 {
			t.Fatalf("the request of 1 did not take a lease: %+v", st)
		}
		for i := range 5 {
			a := mustAdmit(t, f.store, req)
			if st := f.store.Stats(); !a.Allowed || st.Local != uint64(i+1) {
				t.Fatalf("request %d of 5 on the lease of 5: allowed %v, %d admitted on the lease", i+1, a.Allowed, st.Local)
			}
			a.Ticket.Settle(1)
		}
		if a := mustAdmit(t, f.store, req); a.Allowed || a.Refusal != RefusedBucket {
			t.Fatalf("the sixth request of 1, lease and bucket spent: %+v", a)
		}
		flushWithin(t, f.store)
		if got := mustPeek(t, f.store, b).Remaining; got != 0 {
			t.Fatalf("bucket after 40 tokens spent: %v, want 0", got)
		}
	})
}

// TestLeaseBusyCountsInHeaders: a request that goes to Redis while the
// caller's lease runs a request reads the bucket with what the lease
// still holds, as the in-process store reads it.
func TestLeaseBusyCountsInHeaders(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("busy-headers"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b)
		req := Request{Bucket: b, Cost: 2, Debt: 3, MaxInFlight: 8}
		x, xm := mustAdmit(t, f.store, req), mustAdmit(t, mem, req)
		if !x.Allowed || !xm.Allowed || x.Result.Remaining != xm.Result.Remaining || x.Result.Remaining != 75 {
			t.Fatalf("2 of 77 beside a busy lease: %+v; in-process %+v (75 remaining)", x.Result, xm.Result)
		}
		x.Ticket.Settle(2)
		xm.Ticket.Settle(2)
		r.Ticket.Settle(1)
		rm.Ticket.Settle(1)
		sameBucket(t, f.store, mem, b)
	})
}

// TestLeaseHandBacksAfterAnAdmit: what a busy lease hands back after an
// admit was queued beside it decides whether a refusal of that admit is
// asked again. Its move (retire) and then the give-back of its running
// request's refund both count, so a refusal that the last one pays is
// refused beside the lease (Redis may have applied them after the admit;
// the reply is the one Redis gives the admit ahead of both, the bucket's
// 70). A second retire in between holds nothing to hand back: it sends
// nothing and frees no slot, so an in-flight refusal of an admit queued
// between the two retires stands.
func TestLeaseHandBacksAfterAnAdmit(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("hand-backs"), Limit: Limit{Rate: 1e-6, Capacity: 80}}
		r, rm := withBusyLease(t, f.store, mem, b) // Redis 70, lease 7, r runs on it
		s := f.store
		ls, before := queuedBeside(s, b.Key, opAdmit, 70.5)
		s.retire(ls) // hands its 7 back by a move, keeps r's slot
		_, between := queuedBeside(s, b.Key, opAdmit, 1)
		s.retire(ls)
		if got := besideNow(s, b.Key, opResult{status: stInFlight, tokens: toMicro(77)}, between); got != nil {
			t.Fatalf("an in-flight refusal after a second retire that handed back nothing: beside %p, want none", got)
		}
		r.Ticket.Settle(0.5) // refunds 0.5: the lease is given back with it
		rm.Ticket.Settle(0.5)
		if got := besideNow(s, b.Key, opResult{status: stRefused, tokens: toMicro(70)}, before); got != ls {
			t.Fatalf("70.5 refused with 70 left, before the lease's hand-backs of 7 and 0.5: beside %p, want the lease %p", got, ls)
		}
		sameBucket(t, s, mem, b)
	})
}

// TestLeaseHoldingNothingIsNotAskedAgain: a shadow admission that the
// caller's own bucket pays (its aggregate shadowed it) is not asked again
// beside a lease that holds nothing, nor beside one whose give-back after
// the admit was queued handed back nothing (a debit left it below zero):
// handing back nothing could not change the reply.
func TestLeaseHoldingNothingIsNotAskedAgain(t *testing.T) {
	t.Parallel()
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		mem := NewMemoryStore(MemoryOptions{})
		b := Bucket{Key: f.key("holding-nothing"), Limit: Limit{Rate: 1e-6, Capacity: 40}}
		req := Request{Bucket: b, Cost: 1, Debt: 3, MaxInFlight: 8}
		drain := Request{Bucket: b, Cost: 30, Debt: 3, MaxInFlight: 8}
		mustAdmit(t, f.store, drain).Ticket.Settle(30)
		mustAdmit(t, mem, drain).Ticket.Settle(30)
		for range 5 { // the first takes a lease of 5 (Redis 4), the next four spend 4 of it
			mustAdmit(t, f.store, req).Ticket.Settle(1)
			mustAdmit(t, mem, req).Ticket.Settle(1)
		}
		r, rm := mustAdmit(t, f.store, req), mustAdmit(t, mem, req) // the lease's last token
		s := f.store
		if st := s.Stats(); st.Local != 5 || st.Leases != 1 {
			t.Fatalf("setup: %+v", st)
		}
		_, p := queuedBeside(s, b.Key, opShadow, 1)
		shadowed := opResult{status: stShadow, tokens: toMicro(4)}
		if got := besideNow(s, b.Key, shadowed, p); got != nil {
			t.Fatalf("shadowed with 4 left beside a lease holding 0: beside %p, want none", got)
		}
		r.Ticket.Settle(1.5) // a debit: the lease goes back holding -0.5
		rm.Ticket.Settle(1.5)
		if got := besideNow(s, b.Key, shadowed, p); got != nil {
			t.Fatalf("shadowed with 4 left after a give-back of nothing: beside %p, want none", got)
		}
		sameBucket(t, s, mem, b)
	})
}

// queuedBeside is the caller's lease and an admit of cost (of kind) queued
// beside it now, as enqueueAdmit queues one.
func queuedBeside(s *RedisStore, key string, kind opKind, cost float64) (*keyLease, *pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.leases[key]
	p := &pending{op: op{kind: kind, id: newID(), amount: toMicro(cost)}}
	p.queueBeside(ls)
	return ls, p
}

// besideNow is besideLocked under the store's lock.
func besideNow(s *RedisStore, key string, r opResult, p *pending) *keyLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.besideLocked(key, r, p)
}
