package toll

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// A refusal by the in-flight cap says so in its budget headers: RateLimit
// names the policy that refused, "<tier>-concurrency" of RateLimit-Policy,
// with nothing left (r=0) — not the caller's bucket, which still holds
// tokens — and the X-RateLimit-* trio says the same, as does the problem's
// violated-policies.
func TestInFlightRefusalDescribesTheConcurrencyPolicy(t *testing.T) {
	k := holdingTiles(testToll(throttle.NewMemoryStore(throttle.MemoryOptions{})), 1)
	go k.serve()
	if !testenv.Receive(t, k.entered, "the first request") {
		t.Fatal("the first request was refused")
	}
	go k.serve()
	if testenv.Receive(t, k.entered, "the second request") {
		t.Fatal("a second concurrent request was admitted with max_in_flight 1")
	}
	w := testenv.Receive(t, k.answers, "the second request's answer")
	close(k.release)
	testenv.Receive(t, k.answers, "the first request's answer")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second: %d, want 429", w.Code)
	}
	policy := w.Header().Get("RateLimit-Policy")
	if !strings.Contains(policy, `"free-concurrency";q=1;qu="concurrent-requests"`) {
		t.Fatalf("RateLimit-Policy %q lacks the in-flight cap", policy)
	}
	for name, want := range map[string]string{
		"RateLimit":             `"free-concurrency";r=0;t=1`,
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "1",
		"Retry-After":           "1",
	} {
		if got := w.Header().Get(name); got != want {
			t.Errorf("%s %q, want %q", name, got, want)
		}
	}
	var body struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Violated) != 1 || body.Violated[0] != "free-concurrency" {
		t.Errorf("violated-policies %v (%v), want [free-concurrency]", body.Violated, err)
	}
}
