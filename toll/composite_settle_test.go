package toll

import (
	"net/http"
	"testing"

	"github.com/geotoll/geotoll/throttle"
)

// A composite tile costs the sum of its layers' prices (README, "Composite
// tiles cost the sum of their layers' prices"), so it may be admitted above
// the layers' max_cost, up to what the tier lets one request cost. It must
// then be settled at the database time it took: one that paid 80 tokens
// and ran 800 ms (80 tokens of 10 ms) owes 80. Today the settlement is
// capped at the weights' max_cost (60), so the composite that really ran
// gets 20 tokens back — while one that ran under the settle floor keeps
// its 80: the more database time a composite takes, the less it may pay.
func TestCompositeAboveMaxCostSettlesAtWhatItRan(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store) // key k1: tier "free", capacity 100; weights' max_cost 60
	toll.MsPerToken = 10
	price := Price{Cost: 80, Route: "tile", Layer: "a,b", Zoom: 3, Base: toll.Default.Base}
	h := settleServer(t, toll, price, "SELECT pg_sleep(0.8)")
	w := settleRequest(h)
	if w.Code != http.StatusNoContent {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if cost := header(t, w, "X-Request-Cost"); cost < 80 {
		t.Errorf("a composite priced 80 that ran at least 800 ms (80 tokens) was charged X-Request-Cost %v: "+
			"its settlement is capped at the weights' max_cost %v", cost, toll.Default.MaxCost)
	}
}

// A request settles at most at the dearest price it could have had: its
// own layer's max_cost, not the dearest of any layer. A tile of a layer
// whose weights cap it at 5 tokens that ran 200 ms (20 tokens) is charged
// 5, though another layer's max_cost is 200; one of that layer is charged
// the 20.
func TestSettlementIsCappedAtItsOwnLayersMaxCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		layer string
		want  float64
	}{{"cheap", 5}, {"dear", 20}} {
		t.Run(tc.layer, func(t *testing.T) {
			toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{})) // key k1: tier "free", capacity 100
			toll.MsPerToken = 10
			cheap, dear := toll.Default, toll.Default
			cheap.MaxCost, dear.MaxCost = 5, 200
			toll.LayerWeights = map[string]throttle.Weights{"cheap": cheap, "dear": dear}
			price := Price{Cost: 2, Route: "tile", Layer: tc.layer, Zoom: 3, Base: toll.Default.Base}
			w := settleRequest(settleServer(t, toll, price, "SELECT pg_sleep(0.2)"))
			if w.Code != http.StatusNoContent {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if cost := header(t, w, "X-Request-Cost"); cost < tc.want-1e-9 || cost > tc.want+3 {
				t.Errorf("a tile of %q priced 2 that ran 200 ms was charged X-Request-Cost %v, want %v", tc.layer, cost, tc.want)
			}
		})
	}
}
