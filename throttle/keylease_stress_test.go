package throttle

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestLeaseStress: 2–4 goroutines on one or two replicas, for a moment
// and until a request was admitted on a lease (a loaded machine may run
// a few requests only in that moment), with shadow requests, short contexts, refunds or debits and two lease
// holds: running requests never exceed the in-flight cap, what is spent
// never exceeds the bucket, and once Flush returns the bucket holds its
// capacity less every settled cost, with nothing open and no lease or lane
// left.
func TestLeaseStress(t *testing.T) {
	for _, debits := range []bool{false, true} {
		for _, replicas := range []int{1, 2} {
			name := map[bool]string{false: "refunds", true: "debits"}[debits] + map[int]string{1: "-one", 2: "-two"}[replicas]
			t.Run(name, func(t *testing.T) { leaseStress(t, debits, replicas) })
		}
	}
}

// leaseStress runs TestLeaseStress on replicas stores.
func leaseStress(t *testing.T, debits bool, replicas int) {
	forEachRedis(t, func(t *testing.T, f *redisFixture) {
		const capacity, maxIn = 300.0, 5
		debt := 0.0
		if debits {
			debt = 1000
		}
		b := Bucket{Key: f.key("lease-stress"), Limit: Limit{Rate: 1e-6, Capacity: capacity}}
		var stores []*RedisStore
		for range replicas {
			stores = append(stores, NewRedisStore(f.rdb, RedisOptions{Timeout: testCallTimeout,
				LeaseHold: 30 * time.Millisecond * time.Duration(1+int(time.Now().UnixNano()%2)*15)}))
		}
		var mu sync.Mutex
		var open, openPaid, settledSum float64
		var admitted, refused, errs int
		kinds := map[Refusal]int{}
		var wg sync.WaitGroup
		seed := uint64(time.Now().UnixNano())
		n := 2 + int(seed%3)
		deadline := time.Now().Add(700 * time.Millisecond)
		onLease := func() bool {
			for _, s := range stores {
				if s.Stats().Local > 0 {
					return true
				}
			}
			return false
		}
		for g := range n {
			s := stores[g%replicas]
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				costs := []float64{0.25, 0.5, 1, 2}
				for i := 0; i < 400 && (time.Now().Before(deadline) || !onLease()); i++ {
					req := Request{Bucket: b, Cost: costs[rng.IntN(4)], Debt: debt, MaxInFlight: maxIn, Shadow: rng.IntN(10) == 0}
					to := 2 * time.Second
					if rng.IntN(20) == 0 {
						to = time.Duration(rng.IntN(3000)) * time.Microsecond
					}
					ctx, cancel := context.WithTimeout(context.Background(), to)
					a, err := s.Admit(ctx, req)
					cancel()
					mu.Lock()
					if err != nil {
						errs++
						mu.Unlock()
						continue
					}
					if !a.Allowed {
						refused++
						kinds[a.Refusal]++
						mu.Unlock()
						continue
					}
					admitted++
					open++
					openPaid += a.Ticket.Paid()
					if open > maxIn {
						t.Errorf("%v requests running, cap %d", open, maxIn)
					}
					if !debits && openPaid+settledSum > capacity+1e-3 {
						t.Errorf("spent %v + open %v > capacity %v", settledSum, openPaid, capacity)
					}
					mu.Unlock()
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.IntN(800)) * time.Microsecond)
					}
					paid := a.Ticket.Paid()
					c := paid * rng.Float64()
					if debits {
						c = paid * rng.Float64() * 1.5
					}
					if a.Shadow {
						c = 0
					}
					c = math.Round(c*1e6) / 1e6
					mu.Lock()
					open--
					openPaid -= paid
					settledSum += c
					mu.Unlock()
					a.Ticket.Settle(c)
				}
			})
		}
		wg.Wait()
		for _, s := range stores {
			flushWithin(t, s)
		}
		want := capacity - settledSum
		got := mustPeek(t, stores[0], b).Remaining
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("seed %d, %d goroutines: bucket %v, want %v (capacity - settled %v); %d admitted, %d refused, %d errors", seed, n, got, want, settledSum, admitted, refused, errs)
		}
		if o := f.state(b.Key).b.n; o != 0 {
			t.Errorf("seed %d: %d open after Flush", seed, o)
		}
		local := uint64(0)
		for _, s := range stores {
			local += s.Stats().Local
		}
		if local == 0 {
			t.Errorf("seed %d: no request was admitted on a lease", seed)
		}
		for _, s := range stores {
			s.mu.Lock()
			if len(s.leases) != 0 || len(s.lanes) != 0 {
				t.Errorf("after Flush: %d leases, %d lanes", len(s.leases), len(s.lanes))
			}
			s.mu.Unlock()
		}
		t.Logf("seed %d, %d goroutines: %d admitted, %d refused %v, %d errors, final %v; stats %+v", seed, n, admitted, refused, kinds, errs, got, stores[0].Stats())
	})
}
