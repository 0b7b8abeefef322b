package toll

import (
	"net/http"
	"testing"

	"github.com/geotoll/geotoll/throttle"
)

// A configuration whose least price is below what a budget store can
// charge (a micro-token) is refused at start-up: one that passes Validate
// never answers a request at its base price — a cache hit — with 503
// "the rate limiter is unavailable".
func TestBasePriceBelowAMicroToken(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Logger = discard()
	toll.Default.Base = 4e-7
	if err := toll.Validate(); err != nil {
		return // refused at start-up
	}
	d := tileDemand(14, "places")
	d.CacheHit = true
	if w, ok := admit(t, toll, "k1", d); !ok || w.Code == http.StatusServiceUnavailable {
		t.Fatalf("a configuration Validate accepted (base %g): a cache hit got %d %s", toll.Default.Base, w.Code, w.Body)
	}
}
