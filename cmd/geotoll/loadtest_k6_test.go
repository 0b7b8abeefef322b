package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// tiles.js declares 304 an expected status (a conditional request's tile
// not modified), and its check passes on one: a run whose server answers
// 304 with the budget headers, as geotoll does, has no failed check and no
// failed request.
func TestLoadtestK6TilesChecksPassANotModified(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", `"default";q=100;w=60`)
		w.Header().Set("RateLimit", `"default";r=99;t=1`)
		w.Header().Set("ETag", `"t1"`)
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	run := runK6(t, "tiles.js", 4, map[string]string{"BASE_URL": srv.URL, "ZOOMS": "14"})
	if len(run.Requests) < 4 {
		t.Fatalf("%d requests, want 4", len(run.Requests))
	}
	for _, r := range run.Requests {
		if r.Status != http.StatusNotModified || r.Failed {
			t.Errorf("%s → %d, counted failed %v; want a 304, not failed", r.URL, r.Status, r.Failed)
		}
	}
	for _, c := range run.Checks {
		if !c.OK {
			t.Errorf("check %q failed on a %d", c.Name, c.Status)
		}
	}
}

// A run the budget refuses most of the time reports the latency of its
// answers, not of its refusals (whose time is the budget's: next to none,
// or as long as a tarpit holds them). The server answers one request in
// three of each route with a slow 200 and refuses the others at once, with
// the headers the checks want; in both scripts, every threshold on a
// percentile names a time metric whose series holds each answered request's
// duration and no refusal's.
func TestLoadtestK6LatencyThresholdsLeaveOutRefusals(t *testing.T) {
	t.Parallel()
	const slow = 40 * time.Millisecond
	var mu sync.Mutex
	asked := map[string]int{} // requests by route
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.URL.Path
		if strings.HasPrefix(route, "/tiles/") {
			route = "/tiles"
		}
		mu.Lock()
		n := asked[route]
		asked[route]++
		mu.Unlock()
		w.Header().Set("RateLimit-Policy", `"default";q=100;w=60`)
		if n%3 != 0 {
			w.Header().Set("RateLimit", `"default";r=0;t=30`)
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(slow)
		w.Header().Set("RateLimit", `"default";r=1;t=30`)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		script     string
		iterations int
	}{{"tiles.js", 6}, {"geofence.js", 3}} {
		run := runK6(t, tc.script, tc.iterations, map[string]string{"BASE_URL": srv.URL, "ZOOMS": "14", "BATCH": "10"})
		refused := map[float64]bool{} // the refusals' durations
		refusals := 0
		for _, r := range run.Requests {
			if r.Failed {
				t.Errorf("%s: %s → %d counted as failed", tc.script, r.URL, r.Status)
			}
			if r.Status == http.StatusTooManyRequests {
				refused[r.Duration] = true
				refusals++
			} else if r.Duration < float64(slow.Milliseconds()) {
				// The server held each answer that long: a duration
				// the stand-in made up would show here.
				t.Errorf("%s: %s → %d took %.1f ms, under the %s the server held it", tc.script, r.URL, r.Status, r.Duration, slow)
			}
		}
		if refusals == 0 || refusals == len(run.Requests) {
			t.Fatalf("%s: %d of %d requests refused, want answers and refusals", tc.script, refusals, len(run.Requests))
		}
		for _, c := range run.Checks {
			if !c.OK {
				t.Errorf("%s: check %q failed on a %d", tc.script, c.Name, c.Status)
			}
		}
		checkThresholds(t, tc.script, run)
		latencies := 0
		for name, exprs := range run.Options.Thresholds {
			m := k6Threshold.FindStringSubmatch(name)
			if m == nil || !percentile(exprs) {
				continue
			}
			latencies++
			metric, tag, value := m[1], m[2], m[3]
			if !run.isTime(metric) {
				t.Errorf("%s: threshold %s %v: %s holds no times", tc.script, name, exprs, metric)
			}
			series := run.series(metric, tag, value)
			for _, v := range series {
				if refused[v] {
					t.Errorf("%s: threshold %s %v: its series holds a 429's duration (%.1f ms)", tc.script, name, exprs, v)
				}
			}
			answers := 0
			for _, r := range run.Requests {
				if r.Status == http.StatusTooManyRequests || tag != "" && r.Tags[tag] != value {
					continue
				}
				answers++
				if !slices.Contains(series, r.Duration) {
					t.Errorf("%s: threshold %s %v: its series lacks the %d of %s (%.1f ms)", tc.script, name, exprs, r.Status, r.URL, r.Duration)
				}
			}
			if answers == 0 {
				t.Errorf("%s: threshold %s: no answered request in its series", tc.script, name)
			}
		}
		if latencies == 0 {
			t.Errorf("%s: no threshold on a percentile", tc.script)
		}
	}
}

// The threshold check of TestK6Scripts (k6Run.made) fails on a threshold
// naming a series the run does not make: a metric neither built in nor
// declared, an unknown tag value, a custom metric whose samples do not
// carry the tag, or a tag value whose requests were answered and left no
// sample; a custom metric's series of a tag value no sample has but whose
// requests were all refused (a route refused every time, for a latency of
// answers) is made.
func TestK6ThresholdOnNoSeriesIsCaught(t *testing.T) {
	route := func(r string) map[string]string { return map[string]string{"route": r} }
	run := k6Run{
		Requests: []k6Request{{Status: 429, Tags: route("/a"), Duration: 1}, {Status: 200, Tags: route("/b"), Duration: 50},
			{Status: 200, Tags: route("/d"), Duration: 50}},
		Samples: []k6Sample{
			{Metric: "answered", Value: 50, Tags: route("/b")},
			{Metric: "cost", Value: 1, Tags: map[string]string{"zoom": "14"}},
		},
		Metrics: map[string]k6Metric{"answered": {Type: "trend", IsTime: true}, "cost": {Type: "trend"}},
	}
	run.Options.Thresholds = map[string][]string{}
	for _, name := range []string{
		"checks", "http_req_duration{route:/a}", "http_req_failed{route:/b}", "answered{route:/b}", "answered{route:/a}", "cost{zoom:14}", // made
		"answered", "iterations", // made: declared, built in
		"http_req_duration{route:/c}", "answered{route:/c}", "answered{zoom:14}", "cost{route:/b}", "latency{route:/b}", // not made
		"answered{route:/d}", // a route answered that left no sample
		"latency", "answerd", // declared nowhere
	} {
		run.Options.Thresholds[name] = []string{"p(95)<100"}
	}
	want := []string{"answerd", "answered{route:/c}", "answered{route:/d}", "answered{zoom:14}", "cost{route:/b}",
		"http_req_duration{route:/c}", "latency", "latency{route:/b}"}
	if got := run.unmade(); !slices.Equal(got, want) {
		t.Errorf("unmade series %q, want %q", got, want)
	}
}
