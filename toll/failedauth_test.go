package toll

import (
	"net/http"
	"testing"
	"time"

	"github.com/geotoll/geotoll/throttle"
)

// outcomeObserver records the outcomes the toll observed, by tier.
type outcomeObserver struct{ seen []string }

func (o *outcomeObserver) Priced(tier string, _ Price, out Outcome) {
	o.seen = append(o.seen, tier+":"+string(out))
}
func (o *outcomeObserver) Settled(string, Price, float64) {}

// An unknown key is a 401 charged to its address's failed-auth bucket,
// observed as unauthorized; once that bucket is dry, the 429 is observed
// as refused, as every 429 is (the throttled requests' metrics count it).
func TestFailedAuthRefusalIsObservedAsRefused(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	obs := &outcomeObserver{}
	toll.Observer = obs
	var codes []int
	for range 4 { // the failed-auth bucket holds 3
		w, _ := admit(t, toll, "gt_wrong", tileDemand(2, "places"))
		codes = append(codes, w.Code)
	}
	want := []string{"failed-auth:unauthorized", "failed-auth:unauthorized", "failed-auth:unauthorized", "failed-auth:refused"}
	if codes[3] != http.StatusTooManyRequests || len(obs.seen) != 4 {
		t.Fatalf("answers %v, observed %v", codes, obs.seen)
	}
	for i := range want {
		if obs.seen[i] != want[i] {
			t.Errorf("request %d (%d): observed %s, want %s", i+1, codes[i], obs.seen[i], want[i])
		}
	}
}
