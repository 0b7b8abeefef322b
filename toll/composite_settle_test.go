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
