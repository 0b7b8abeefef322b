package throttle_test

import (
	"context"
	"fmt"
	"time"

	"github.com/geotoll/geotoll/throttle"
	"github.com/paulmach/orb/maptile"
)

func Example() {
	// A fixed clock so the output is stable; omit Now to use time.Now.
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	store := throttle.NewMemoryStore(throttle.MemoryOptions{Now: func() time.Time { return now }})

	ctx := context.Background()
	weights := throttle.DefaultWeights()
	bucket := throttle.Bucket{
		Key:   throttle.BucketKey("geotoll", "free", "203.0.113.7"),
		Limit: throttle.Limit{Rate: 20, Capacity: 100}, // 100 tokens, refilled at 20/s
	}

	// A 50 km radius search costs MaxCost: it fits a full bucket once.
	cost := weights.Radius(50_000, 0)
	var first throttle.Admission
	for i := range 2 {
		a, err := store.Admit(ctx, throttle.Request{Bucket: bucket, Cost: cost, Debt: 60})
		if err != nil {
			fmt.Println(err)
			return
		}
		if i == 0 {
			first = a
		}
		fmt.Printf("cost %g: allowed=%v remaining=%g retry-after=%ds\n",
			a.Result.Cost, a.Allowed, a.Result.Remaining, a.Result.RetryAfterSeconds())
	}

	// The first search really cost 15 tokens: settling it refunds the rest.
	first.Ticket.Settle(15)
	r, _ := store.Peek(ctx, bucket)
	fmt.Printf("after settling at 15: %g remain\n", r.Remaining)

	// A second later the bucket has refilled 20 tokens.
	now = now.Add(time.Second)
	r, _ = store.Peek(ctx, bucket)
	fmt.Printf("a second later: %g of %g\n", r.Remaining, r.Limit.Capacity)
	// Output:
	// cost 60: allowed=true remaining=40 retry-after=0s
	// cost 60: allowed=false remaining=40 retry-after=1s
	// after settling at 15: 85 remain
	// a second later: 100 of 100
}

func ExampleWeights() {
	w := throttle.DefaultWeights()
	fmt.Printf("z2 tile:   %.3f\n", w.Tile(maptile.New(1, 1, 2)))
	fmt.Printf("z14 tile:  %.3f\n", w.Tile(maptile.New(8800, 5373, 14)))
	fmt.Printf("10 m:      %.3f\n", w.Radius(10, 0))
	fmt.Printf("50 km:     %.3f\n", w.Radius(50_000, 0))
	fmt.Printf("20 points: %.3f\n", w.Batch(20))
	// Output:
	// z2 tile:   60.000
	// z14 tile:  0.010
	// 10 m:      0.022
	// 50 km:     60.000
	// 20 points: 1.010
}
