package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		profile string
		n       int
		prefix  string
	}{
		{"z14", 44 * 9, "/tiles/places/14/"},
		{"z8-10", 44 * 3, "/tiles/places/"},
		{"z0-3", 1 + 4 + 16 + 64, "/tiles/places/"},
		{"within", 44 * 3, "/geofence/within?layer=places"},
		{"healthz", 1, "/healthz"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			a, err := Paths(tc.profile, "places")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Paths(tc.profile, "places")
			if len(a) != tc.n || strings.Join(a, " ") != strings.Join(b, " ") {
				t.Fatalf("%d paths (want %d), deterministic %v", len(a), tc.n, strings.Join(a, " ") == strings.Join(b, " "))
			}
			for _, p := range a {
				if !strings.HasPrefix(p, tc.prefix) {
					t.Fatalf("path %q lacks prefix %q", p, tc.prefix)
				}
			}
		})
	}
	if _, err := Paths("z99", "places"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if p, err := Paths("z0-3", "places,districts"); err != nil || p[0] != "/tiles/places,districts/0/0/0.mvt" {
		t.Fatalf("a composite: %v, %v", p[:min(len(p), 1)], err)
	}
	// Only tiles have composites: a geofence search of one was a 404 for
	// every request of the run.
	for _, profile := range []string{"within", "healthz"} {
		if _, err := Paths(profile, "places,districts"); err == nil || !strings.Contains(err.Error(), "composite") {
			t.Errorf("profile %s of a composite: error %v, want one saying only tiles have composites", profile, err)
		}
	}
	for _, layer := range []string{"", "places/0/0/0.mvt?x=", "%zz", "places,", ",places", "a b", strings.Repeat("x", 65),
		"places,places", "a,b,c,d,e,f,g,h,i"} { // the server refuses a name twice, and more than 8
		if _, err := Paths("z14", layer); err == nil {
			t.Errorf("layer %q accepted", layer)
		}
	}
}

func TestOptionsRefuseRemoteAndUnbounded(t *testing.T) {
	for _, o := range []Options{
		{BaseURL: "http://10.0.0.1:8080", Profile: "z14", Rate: 10, Duration: time.Second},
		{BaseURL: "http://example.com", Profile: "z14", Rate: 10, Duration: time.Second},
		{BaseURL: "http://127.0.0.1:8080", Profile: "z14", Rate: 0, Duration: time.Second},
		{BaseURL: "http://127.0.0.1:8080", Profile: "z14", Rate: 10, Duration: time.Hour},
		{BaseURL: "ftp://127.0.0.1", Profile: "z14", Rate: 10, Duration: time.Second},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) accepted", o)
		}
	}
}

func TestRunCountsCostsAndCodes(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "k" {
			t.Errorf("key not sent")
		}
		w.Header().Set("X-Request-Cost", "1.5")
		if n.Add(1)%4 == 0 {
			w.Header().Set("X-Cache", "HIT")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "z14", Rate: 40, Duration: time.Second, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	got := int(rep.Requests)
	if got < 30 || int64(got) != n.Load() {
		t.Fatalf("requests %d, server saw %d", got, n.Load())
	}
	if rep.StatusCodes["200"]+rep.StatusCodes["429"] != got || rep.StatusCodes["429"] != got/4 {
		t.Fatalf("status codes %v for %d requests", rep.StatusCodes, got)
	}
	if rep.Tokens != 1.5*float64(rep.StatusCodes["200"]) || rep.CacheHits != got/4 {
		t.Fatalf("tokens %v, cache hits %d for %d requests", rep.Tokens, rep.CacheHits, got)
	}
	var sb strings.Builder
	rep.WriteText(&sb)
	if !strings.Contains(sb.String(), "429×") {
		t.Fatalf("report lacks status codes:\n%s", sb.String())
	}
}

// A short run's rates are of the time its requests were sent over, one
// interval a request: vegeta's duration runs from the first request to the
// last, n − 1 intervals, and a run of one request at 1/s reported "1 in
// 0s (1.0/s sent, 135.2/s succeeded)", one of two at 2/s "2 in 501ms
// (4.0/s sent…)".
func TestRunRatesCountAnIntervalARequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, rate := range []int{1, 2, 5} {
		rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "healthz", Rate: rate, Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if int(rep.Requests) != rate || rep.Duration < 900*time.Millisecond || rep.Rate > 1.1*float64(rate) || rep.Throughput > 1.1*float64(rate) {
			t.Errorf("%d/s for 1s: %d requests in %s, %.1f/s sent, %.1f/s succeeded; want %d in about 1s, at most %d/s",
				rate, rep.Requests, rep.Duration, rep.Rate, rep.Throughput, rate, rate)
		}
	}
}

// The latency percentiles are of the successes (2xx, 304): refusals
// answered at once must not make a run look fast. Every request's are
// apart, labelled as such, and the tokens are per charged request.
func TestRunReportsTheLatencyOfItsSuccesses(t *testing.T) {
	const slow = 40 * time.Millisecond
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Cost", "2")
		switch n.Add(1) % 8 {
		case 0:
			time.Sleep(slow)
			w.WriteHeader(http.StatusOK)
		case 1:
			time.Sleep(slow)
			w.WriteHeader(http.StatusNotModified)
		default: // refused at once: priced, not charged
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "z14", Rate: 40, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ok := rep.StatusCodes["200"] + rep.StatusCodes["304"]
	if ok == 0 || rep.Succeeded != uint64(ok) || rep.ChargedRequests != ok || rep.Tokens != 2*float64(ok) {
		t.Fatalf("%d successes, %d charged, %v tokens; status codes %v", rep.Succeeded, rep.ChargedRequests, rep.Tokens, rep.StatusCodes)
	}
	if rep.P50 < slow || rep.All.P50 >= slow || rep.All.Max < slow {
		t.Errorf("p50 %s of the successes (each at least %s), %s of all requests (most refused at once), max %s",
			rep.P50, slow, rep.All.P50, rep.All.Max)
	}
	var sb strings.Builder
	rep.WriteText(&sb)
	for _, want := range []string{
		fmt.Sprintf("of the %d successes (2xx, 304)", ok),
		fmt.Sprintf("of all %d requests, refused and failed ones too", rep.Requests),
		fmt.Sprintf("%.1f charged to %d requests (2.000 per charged request)", rep.Tokens, ok),
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, sb.String())
		}
	}
	sb.Reset()
	Report{Profile: "z14", Asked: 10, Rate: 10, Requests: 10, Duration: time.Second, StatusCodes: map[string]int{"401": 10}}.WriteText(&sb)
	if !strings.Contains(sb.String(), "latency      none: no request succeeded") {
		t.Errorf("a run of refusals only reports latencies of successes:\n%s", sb.String())
	}
}

// A run may keep as many requests in flight as its rate over the request
// timeout (bounded): with fewer, vegeta waits for a free worker and its
// fixed rate becomes a closed loop.
func TestAttackWorkersCoverTheRateOverTheTimeout(t *testing.T) {
	for _, tc := range []struct {
		rate    int
		timeout time.Duration
		least   uint64
	}{
		{1, 10 * time.Second, 10},
		{100, 10 * time.Second, 1000},
		{1000, 10 * time.Second, MaxWorkers},
		{5000, 500 * time.Millisecond, 2500},
		{MaxRate, 10 * time.Second, MaxWorkers},
	} {
		n := attackWorkers(tc.rate, tc.timeout)
		if n < tc.least || n > MaxWorkers {
			t.Errorf("attackWorkers(%d/s, %s) = %d, want %d..%d", tc.rate, tc.timeout, n, tc.least, MaxWorkers)
		}
	}
}

// A run that sent under 95 % of the rate asked for says so.
func TestRateShortfall(t *testing.T) {
	for _, tc := range []struct {
		asked    int
		sent     float64
		requests uint64
		behind   bool
	}{
		{1000, 900, 9000, true},
		{1000, 949, 9490, true},
		{1000, 951, 9510, false},
		{1000, 1003, 10030, false},
		{40, 41, 40, false},
		{40, 0, 1, false}, // one request: no rate to judge
	} {
		if got := rateShortfall(tc.asked, tc.sent, tc.requests); got != tc.behind {
			t.Errorf("asked %d/s, sent %.0f/s over %d requests: behind %v, want %v", tc.asked, tc.sent, tc.requests, got, tc.behind)
		}
	}
	var sb strings.Builder
	Report{Profile: "z14", Asked: 1000, Rate: 600, Requests: 6000, Duration: 10 * time.Second}.WriteText(&sb)
	if !strings.Contains(sb.String(), "fell behind") {
		t.Errorf("a run at 600/s of 1000/s does not say it fell behind:\n%s", sb.String())
	}
	sb.Reset()
	Report{Profile: "z14", Asked: 1000, Rate: 1001, Requests: 10010, Duration: 10 * time.Second}.WriteText(&sb)
	if strings.Contains(sb.String(), "fell behind") {
		t.Errorf("a run at its rate says it fell behind:\n%s", sb.String())
	}
}

// The load test follows no redirect: one to another host would aim the
// load where -url could not. The 301 is the answer counted.
func TestRunFollowsNoRedirect(t *testing.T) {
	srv := redirecting(t, remote)
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "healthz", Rate: 10, Duration: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests == 0 || uint64(rep.StatusCodes["301"]) != rep.Requests || len(rep.Errors) != 0 {
		t.Fatalf("%d requests: status codes %v, errors %v; want every one a 301, and no error", rep.Requests, rep.StatusCodes, rep.Errors)
	}
}

func TestCharged(t *testing.T) {
	for _, tc := range []struct {
		code     int
		estimate string
		want     bool
		shadow   string
	}{
		{200, "1.2", true, ""},
		{204, "", true, ""}, // a cache hit's fixed price carries no estimate
		{304, "", true, ""},
		{0, "", false, ""}, // a transport error
		{429, "", false, ""},
		{422, "", false, ""},
		{401, "", false, ""},
		{503, "0.8", true, ""}, // admitted, cut at its deadline: charged what ran
		{503, "", false, ""},   // refused before admission (budget store down)
		{504, "0.8", true, ""},
		{400, "0.8", true, ""}, // admitted, then failed by its handler
		// Admitted in shadow though the bucket could not pay: nothing spent.
		{200, "", false, "would-refuse"},
		{204, "", false, "would-refuse"},
		{503, "", false, "would-refuse"},
		{0, "", false, "would-refuse"},
	} {
		if got := Charged(tc.code, tc.estimate, tc.shadow); got != tc.want {
			t.Errorf("Charged(%d, %q, %q) = %v, want %v", tc.code, tc.estimate, tc.shadow, got, tc.want)
		}
		if got, want := ShadowAdmitted(tc.code, tc.shadow), tc.code > 0 && tc.shadow != ""; got != want {
			t.Errorf("ShadowAdmitted(%d, %q) = %v, want %v", tc.code, tc.shadow, got, want)
		}
	}
}

// A shadow tier's admission that its bucket could not pay (X-RateLimit-Shadow:
// would-refuse) spent nothing: Run's tokens leave it out.
func TestRunChargesNothingForShadowAdmissions(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Cost", "1.5")
		if n.Add(1)%2 == 0 {
			w.Header().Set("X-RateLimit-Shadow", "would-refuse")
		} else {
			w.Header().Set("X-Request-Cost-Estimate", "1.5")
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "z14", Rate: 40, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	paid := (rep.Requests + 1) / 2
	if rep.Requests < 30 || rep.Tokens != 1.5*float64(paid) {
		t.Fatalf("%d requests, %v tokens; want 1.5 for each of the %d paid", rep.Requests, rep.Tokens, paid)
	}
	if unpaid := rep.Requests - paid; uint64(rep.ShadowAdmitted) != unpaid || rep.ShadowTokens != 1.5*float64(unpaid) {
		t.Fatalf("%d admitted in shadow, priced %v tokens; want %d, priced 1.5 each", rep.ShadowAdmitted, rep.ShadowTokens, unpaid)
	}
	var sb strings.Builder
	rep.WriteText(&sb)
	if want := fmt.Sprintf("shadow       %d admitted unpaid", rep.ShadowAdmitted); !strings.Contains(sb.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, sb.String())
	}
}
