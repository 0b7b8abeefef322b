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
	limit := throttle.Limit{Rate: 20, Capacity: 100} // 100 tokens, refilled at 20/s
	key := throttle.BucketKey("geotoll", "free", "203.0.113.7")

	// A 50 km radius search costs MaxCost: it fits a full bucket once.
	cost := weights.Radius(50_000, 0)
	for range 2 {
		r, err := store.Spend(ctx, key, limit, cost)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("cost %g: allowed=%v remaining=%g retry-after=%ds reset=%ds\n",
			r.Cost, r.Allowed, r.Remaining, r.RetryAfterSeconds(), r.ResetSeconds())
	}

	// A z14 tile costs about one token and still fits.
	r, _ := store.Spend(ctx, key, limit, weights.Tile(maptile.New(8800, 5373, 14)))
	fmt.Printf("cost %.4f: allowed=%v remaining=%.4f\n", r.Cost, r.Allowed, r.Remaining)

	// A second later the bucket has refilled 20 tokens.
	now = now.Add(time.Second)
	r, _ = store.Peek(ctx, key, limit)
	fmt.Printf("budget: %.4f of %g\n", r.Remaining, r.Limit.Capacity)
	// Output:
	// cost 60: allowed=true remaining=40 retry-after=0s reset=3s
	// cost 60: allowed=false remaining=40 retry-after=1s reset=3s
	// cost 1.0001: allowed=true remaining=38.9999
	// budget: 58.9999 of 100
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
	// z14 tile:  1.000
	// 10 m:      1.012
	// 50 km:     60.000
	// 20 points: 2.000
}
