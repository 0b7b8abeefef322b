package toll

import (
	"testing"
	"time"

	"github.com/geotoll/geotoll/throttle"
)

// A 429's detail says what the bucket held against the price. A refusal a
// tarpit held until the bucket refilled to the price said "costs 2.133331
// tokens; 2.13364 remain", a refusal that reads as none; it says the
// bucket held less when the request was refused.
func TestExhaustedDetailOfARefusalHeldUntilTheBucketCouldPay(t *testing.T) {
	for _, tc := range []struct {
		cost, remaining float64
		want            string
	}{
		{7.5, 3.25, "this request costs 7.5 tokens; 3.25 remain. Retry in 2 s."},
		{2.133331, 2.13364, "this request costs 2.133331 tokens, more than the bucket held when it was refused; 2.13364 remain now. Retry in 2 s."},
	} {
		p := exhausted("free", throttle.Result{Cost: tc.cost, Remaining: tc.remaining, RetryAfter: 1500 * time.Millisecond})
		if p.Detail != tc.want {
			t.Errorf("detail %q, want %q", p.Detail, tc.want)
		}
	}
}
