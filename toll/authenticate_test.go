package toll

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/throttle"
)

// Authenticate refuses from a check's head what Charge would refuse
// whatever the body says — an unknown key (401, one failed-auth token), a
// key whose tier is not configured (403, nothing charged) — and passes
// everything else, charging nothing.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, key string
		pass      bool
		status    int
		failed    float64 // failed-auth tokens left after it (of 3)
	}{
		{"no key", "", true, http.StatusOK, 3},
		{"known key", "k1", true, http.StatusOK, 3},
		{"unknown key", "nope", false, http.StatusUnauthorized, 2},
		{"unconfigured tier", "lost", false, http.StatusForbidden, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll := testToll(store)
			r := httptest.NewRequest(http.MethodPost, "/geofence/check", strings.NewReader(`{"points":[]}`))
			r.RemoteAddr = "192.0.2.7:5555"
			if tc.key != "" {
				r.Header.Set("X-API-Key", tc.key)
			}
			w := httptest.NewRecorder()
			if got := toll.Authenticate(w, r, geofence.KindCheck); got != tc.pass || w.Code != tc.status {
				t.Fatalf("Authenticate = %v, %d %s; want %v, %d", got, w.Code, w.Body, tc.pass, tc.status)
			}
			if tc.pass && (len(w.Header()) != 0 || w.Body.Len() != 0) {
				t.Errorf("a request that passes has its answer begun: %v %s", w.Header(), w.Body)
			}
			b, err := store.Peek(t.Context(), throttle.Bucket{Key: toll.failedAuthCaller(r).bucketKey(toll.Prefix), Limit: toll.FailedAuth})
			if err != nil || math.Abs(b.Remaining-tc.failed) > 0.01 { // what refills while the test runs
				t.Errorf("failed-auth bucket %+v (%v), want %v tokens left", b, err, tc.failed)
			}
		})
	}
}
