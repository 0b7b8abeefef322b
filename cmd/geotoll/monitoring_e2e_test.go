package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/toll"
)

// TestEndToEndMonitoring keeps deploy/ true: a real geotoll serves a
// tile, a geofence query and a refusal, and every metric and label the
// Prometheus rules and the Grafana dashboard read must be in its /metrics
// (label values too, where the scrape or the metric's help names them).
func TestEndToEndMonitoring(t *testing.T) {
	t.Parallel()
	key := createKey(t, "free")
	m := startMain(t, func(c *Config) {
		// Every admitted request settles (geotoll_tokens_settled_total)
		// and costs max_cost (60), so that the anonymous caller's second
		// request is refused whatever its database time.
		c.Throttle.SettleFloor = time.Nanosecond
		c.Throttle.MsPerToken = 1e-6
		c.Throttle.Tiers[toll.AnonymousTier] = TierConfig{Rate: 0.01, Capacity: 100}
	})
	base := "http://" + m.Addr()
	tile := tileURL(base, "places", maptile.At(orb.Point{13.405, 52.52}, 14))
	if resp, body := get(t, tile, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("tile: %d %s", resp.StatusCode, short(body))
	}
	if resp, body := get(t, base+"/geofence/within?layer=places&lng=13.4&lat=52.5&radius=10", key); resp.StatusCode != http.StatusOK {
		t.Fatalf("geofence: %d %s", resp.StatusCode, short(body))
	}
	if resp, body := get(t, tileURL(base, "places", maptile.New(0, 1, 2)), ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second anonymous request: %d %s, want 429", resp.StatusCode, short(body))
	}

	rules := loadRules(t, rulesPath)
	exprs, variables := loadDashboard(t, dashboardPath)
	// A settlement is observed after its response is sent: scrape until
	// every series is there, or report what is missing after
	// testenv.Patience.
	var errs []string
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(100 * time.Millisecond) {
		resp, body := get(t, base+"/metrics", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %d", resp.StatusCode)
		}
		cat := scrapeCatalog(t, body)
		usedRules, ruleErrs := checkRules(rules, cat)
		usedDash, dashErrs := checkDashboard(exprs, variables, cat)
		errs = append(ruleErrs, dashErrs...)
		// The kit reads the metrics operators need; a test that checked
		// nothing would pass too.
		for _, want := range []string{
			"geotoll_http_requests_total", "geotoll_http_request_duration_seconds_bucket",
			"geotoll_priced_requests_total", "geotoll_throttled_total", "geotoll_tokens_charged_total",
			"geotoll_tokens_settled_total", "geotoll_limiter_degraded", "geotoll_limiter_store_errors_total",
			"geotoll_db_pool_acquired_conns", "geotoll_db_calls_total", "geotoll_tile_cache_requests_total",
			"geotoll_tile_query_duration_seconds_sum", "geotoll_tile_cache_bytes", "geotoll_price_model_ready",
			"geotoll_redis_calls_total",
		} {
			if !usedRules[want] && !usedDash[want] {
				errs = append(errs, "neither the rules nor the dashboard read "+want)
			}
		}
		if len(errs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(errs)
	if len(errs) > 0 {
		t.Fatalf("deploy/ does not match the server's metrics:\n%s", strings.Join(errs, "\n"))
	}
}
