package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A map page on another origin reads the budget headers of its tile
// responses (README, "Budget headers": every priced response carries
// them): each must be in Access-Control-Expose-Headers, or the browser
// hides it from the page. X-Request-Cost-Estimate — the price paid at the
// door, beside the settled X-Request-Cost — is not (a substring check for
// "X-Request-Cost" cannot tell the two apart).
func TestCORSExposesEveryBudgetHeader(t *testing.T) {
	t.Parallel()
	w := corsRequest(corsHandler(CORS{Origins: []string{"*"}}), http.MethodGet, "https://maps.example")
	var exposed []string
	for _, h := range strings.Split(w.Header().Get("Access-Control-Expose-Headers"), ",") {
		exposed = append(exposed, strings.ToLower(strings.TrimSpace(h)))
	}
	for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining",
		"X-RateLimit-Reset", "X-Request-Cost", "X-Request-Cost-Estimate", "Retry-After"} {
		if !slices.Contains(exposed, strings.ToLower(h)) {
			t.Errorf("Access-Control-Expose-Headers does not name %s", h)
		}
	}
}
