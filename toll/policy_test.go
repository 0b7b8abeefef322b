package toll

import (
	"testing"

	"github.com/geotoll/geotoll/throttle"
)

// RateLimit-Policy names every policy that can refuse the caller, each
// with its unit: the tier's bucket (tokens), its in-flight cap, the IPv6
// network's bucket for an anonymous IPv6 caller, and the global budget.
func TestPoliciesAdvertised(t *testing.T) {
	t.Parallel()
	tier := Tier{Name: "anonymous", Limit: throttle.Limit{Rate: 10, Capacity: 80}, MaxInFlight: 8}
	plain := &Toll{}
	full := &Toll{
		IPv6Aggregate: IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 40, Capacity: 320}},
		Global:        &throttle.Global{Bucket: throttle.Bucket{Limit: throttle.Limit{Rate: 400, Capacity: 2000}}},
	}
	for _, c := range []struct {
		name string
		toll *Toll
		ipv6 bool
		want string
	}{
		{"bucket and cap", plain, false, `"anonymous";q=80;qu="tokens";w=8, "anonymous-concurrency";q=8;qu="concurrent-requests"`},
		{"IPv4 caller with global", full, false, `"anonymous";q=80;qu="tokens";w=8, "anonymous-concurrency";q=8;qu="concurrent-requests", "global";q=2000;qu="tokens";w=5`},
		{"IPv6 caller with global", full, true, `"anonymous";q=80;qu="tokens";w=8, "anonymous-concurrency";q=8;qu="concurrent-requests", "anonymous-ipv6-/48";q=320;qu="tokens";w=8, "global";q=2000;qu="tokens";w=5`},
	} {
		if got := c.toll.policies(tier, c.ipv6); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
