package throttle

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// moveCounter counts the moves (admit.lua's M) a store sends.
type moveCounter struct {
	redis.Scripter
	moves atomic.Int64
}

func (c *moveCounter) count(args []any) {
	for i := 8; i+2 < len(args); i += 3 {
		if args[i] == "M" {
			c.moves.Add(1)
		}
	}
}
func (c *moveCounter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	c.count(args)
	return c.Scripter.EvalSha(ctx, sha1, keys, args...)
}
func (c *moveCounter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.count(args)
	return c.Scripter.Eval(ctx, script, keys, args...)
}

// TestLeaseMoveStress: 3–4 goroutines on a small bucket with long-running
// leased requests and costs near the bucket: the bucket ends at its
// capacity less every settled cost, nothing open, no lease or lane. A run
// makes a few moves, or none when its costs drain the bucket first (about
// one run in five): runs are made, each on a bucket of its own and each
// checked, until one has made a move, at most 10.
func TestLeaseMoveStress(t *testing.T) {
	for _, debits := range []bool{false, true} {
		t.Run(map[bool]string{false: "refunds", true: "debits"}[debits], func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, f *redisFixture) {
				for run := range 10 {
					if moveStress(t, f, debits, run) > 0 {
						return
					}
				}
				t.Error("no busy lease handed its tokens back by a move in 10 runs")
			})
		})
	}
}

// moveStress is one run of TestLeaseMoveStress; it returns the moves sent.
func moveStress(t *testing.T, f *redisFixture, debits bool, run int) int64 {
	const capacity, maxIn = 64.0, 4
	debt := 0.0
	if debits {
		debt = 1e6
	}
	b := Bucket{Key: f.key(fmt.Sprint("lease-stress-", run)), Limit: Limit{Rate: 1e-6, Capacity: capacity}}
	sc := &moveCounter{Scripter: f.rdb}
	s := NewRedisStore(sc, RedisOptions{Timeout: testCallTimeout, LeaseHold: 200 * time.Millisecond})
	var mu sync.Mutex
	var settledSum float64
	var admitted, refused, errs int
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	n := 3 + int(seed%2)
	deadline := time.Now().Add(700 * time.Millisecond)
	for g := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; i < 300 && time.Now().Before(deadline); i++ {
				cost := []float64{0.5, 1, 1}[rng.IntN(3)]
				if rng.IntN(5) == 0 {
					cost = 56 + float64(rng.IntN(9))
				}
				req := Request{Bucket: b, Cost: cost, Debt: debt, MaxInFlight: maxIn, Shadow: rng.IntN(12) == 0}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				a, err := s.Admit(ctx, req)
				cancel()
				mu.Lock()
				if err != nil {
					errs++
				} else if !a.Allowed {
					refused++
				} else {
					admitted++
				}
				mu.Unlock()
				if err != nil || !a.Allowed {
					continue
				}
				if a.Ticket.owner != s { // on a lease: run long
					time.Sleep(time.Duration(1000+rng.IntN(4000)) * time.Microsecond)
				}
				paid := a.Ticket.Paid()
				c := paid * 0.02 * rng.Float64()
				if debits && paid < 2 {
					c = paid * rng.Float64() * 1.6
				}
				if a.Shadow {
					c = 0
				}
				c = math.Round(c*1e6) / 1e6
				mu.Lock()
				settledSum += c
				mu.Unlock()
				a.Ticket.Settle(c)
			}
		})
	}
	wg.Wait()
	flushWithin(t, s)
	want := math.Max(capacity-settledSum, -debt)
	got := mustPeek(t, s, b).Remaining
	st := f.state(b.Key)
	if math.Abs(got-want) > 1e-3 || st.b.n != 0 || len(st.open) != 0 {
		t.Errorf("seed %d: bucket %v want %v (diff %.6f), %d open; %d admitted %d refused %d errs, %d transfers",
			seed, got, want, got-want, st.b.n, admitted, refused, errs, sc.moves.Load())
	}
	s.mu.Lock()
	if len(s.leases) != 0 || len(s.lanes) != 0 {
		t.Errorf("after Flush: %d leases, %d lanes", len(s.leases), len(s.lanes))
	}
	s.mu.Unlock()
	t.Logf("seed %d n %d: diff %.6f; %d admitted %d refused %d errs; %d transfers; %+v", seed, n, got-want, admitted, refused, errs, sc.moves.Load(), s.Stats())
	return sc.moves.Load()
}
