package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/server"
)

// k6Run is what testdata/k6/run.mjs prints: the script's options, its
// custom metrics, and every request (with its duration, the
// http_req_duration sample k6 makes of it), check and metric sample of its
// iterations.
type k6Run struct {
	Options struct {
		Thresholds map[string][]string `json:"thresholds"`
	} `json:"options"`
	Expected []int       `json:"expected"`
	Requests []k6Request `json:"requests"`
	Checks   []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Status int    `json:"status"`
	} `json:"checks"`
	Samples []k6Sample          `json:"samples"`
	Metrics map[string]k6Metric `json:"metrics"`
}

// k6Sample is a value added to a custom metric.
type k6Sample struct {
	Metric string            `json:"metric"`
	Value  float64           `json:"value"`
	Tags   map[string]string `json:"tags"`
}

// k6Metric is a custom metric a script declares: its type (trend, rate,
// counter) and whether its values are times, new Trend(name, true).
type k6Metric struct {
	Type   string `json:"type"`
	IsTime bool   `json:"isTime"`
}

// k6Request is a request the stand-in made; Duration (ms) is its
// timings.duration.
type k6Request struct {
	Method   string            `json:"method"`
	URL      string            `json:"url"`
	Status   int               `json:"status"`
	Tags     map[string]string `json:"tags"`
	Failed   bool              `json:"failed"`
	Duration float64           `json:"duration"`
}

// k6Threshold is a threshold's name, metric or metric{tag:value}.
var k6Threshold = regexp.MustCompile(`^(\w+)(?:\{(\w+):(.+)\})?$`)

// series is the samples of the series a threshold names (metric, or
// metric{tag:value} when tag is not empty): a built-in http_req_* metric's
// come from the requests, as k6 makes them, a custom metric's from its
// samples. A built-in metric the stand-in does not model has none.
func (run k6Run) series(metric, tag, value string) []float64 {
	var out []float64
	has := func(tags map[string]string) bool { return tag == "" || tags[tag] == value }
	if strings.HasPrefix(metric, "http_req") {
		for _, r := range run.Requests {
			if !has(r.Tags) {
				continue
			}
			switch metric {
			case "http_reqs":
				out = append(out, 1)
			case "http_req_duration":
				out = append(out, r.Duration)
			case "http_req_failed":
				out = append(out, map[bool]float64{false: 0, true: 1}[r.Failed])
			}
		}
		return out
	}
	for _, s := range run.Samples {
		if s.Metric == metric && has(s.Tags) {
			out = append(out, s.Value)
		}
	}
	return out
}

// made: the run makes the series a threshold names, metric or
// metric{tag:value}. A metric without a tag must be a built-in of k6's or
// one the script declares (k6 refuses to start otherwise). A built-in
// metric's tagged series is made by a request with the tag. A custom
// metric's samples must carry the tag, and the value is made by one of
// them — or, for a series of answers, by requests with it that were all
// refused (a latency of answers has no sample for a route the run refused
// every time, yet names a series the run makes; a request with the value
// that was answered and left no sample means the series is not the one
// the script fills).
func (run k6Run) made(metric, tag, value string) bool {
	if tag == "" {
		_, declared := run.Metrics[metric]
		return declared || k6Builtin[metric]
	}
	if strings.HasPrefix(metric, "http_req") {
		return run.series(metric, tag, value) != nil
	}
	byRequest, answered := false, false
	for _, r := range run.Requests {
		if r.Tags[tag] == value {
			byRequest = true
			answered = answered || r.Status != http.StatusTooManyRequests
		}
	}
	keyed := false
	for _, s := range run.Samples {
		if _, ok := s.Tags[tag]; ok && s.Metric == metric {
			keyed = true
			if s.Tags[tag] == value {
				return true
			}
		}
	}
	return keyed && byRequest && !answered
}

// k6Builtin is k6's built-in metrics.
var k6Builtin = map[string]bool{"checks": true, "data_received": true, "data_sent": true, "dropped_iterations": true,
	"http_req_blocked": true, "http_req_connecting": true, "http_req_duration": true, "http_req_failed": true,
	"http_req_receiving": true, "http_req_sending": true, "http_req_tls_handshaking": true, "http_req_waiting": true,
	"http_reqs": true, "iteration_duration": true, "iterations": true, "vus": true, "vus_max": true}

// unmade: the thresholds that name a series the run does not make.
func (run k6Run) unmade() []string {
	var out []string
	for name := range run.Options.Thresholds {
		m := k6Threshold.FindStringSubmatch(name)
		if m == nil || !run.made(m[1], m[2], m[3]) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// isTime: the metric holds times, as a latency threshold's must.
func (run k6Run) isTime(metric string) bool {
	m, ok := run.Metrics[metric]
	return metric == "http_req_duration" || ok && m.Type == "trend" && m.IsTime
}

// percentile: a threshold's expressions hold a p(N).
func percentile(exprs []string) bool {
	return slices.ContainsFunc(exprs, func(e string) bool { return strings.HasPrefix(strings.TrimSpace(e), "p(") })
}

// runK6 runs a k6 script of loadtest/k6 for iterations under node, with a
// stand-in for k6's API (testdata/k6) that makes real requests.
func runK6(t *testing.T, script string, iterations int, env map[string]string) k6Run {
	t.Helper()
	node := testenv.Tool(t, "node", "running the k6 scripts")
	stub, err := filepath.Abs("testdata/k6")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "node_modules", "k6")
	files := map[string]string{
		"package.json": `{"name":"k6","type":"module","exports":{".":"./index.js","./http":"./http.js","./metrics":"./metrics.js"}}`,
		"index.js":     fmt.Sprintf("export { check } from %q;\n", filepath.Join(stub, "k6.mjs")),
		"http.js":      fmt.Sprintf("import { http } from %q;\nexport default http;\n", filepath.Join(stub, "k6.mjs")),
		"metrics.js":   fmt.Sprintf("export { Rate, Trend, Counter } from %q;\n", filepath.Join(stub, "k6.mjs")),
	}
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "loadtest", "k6", script))
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, strings.TrimSuffix(script, ".js")+".mjs") // an ES module, as k6 reads it
	if err := os.WriteFile(mod, src, 0o600); err != nil {
		t.Fatal(err)
	}
	envJSON, _ := json.Marshal(env)
	cmd := exec.Command(node, filepath.Join(stub, "run.mjs"), mod, fmt.Sprint(iterations))
	cmd.Env = append(os.Environ(), "K6_ENV="+string(envJSON))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s: %v\n%s", script, err, short(stderr))
	}
	var run k6Run
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, short(out))
	}
	return run
}

var tilePath = regexp.MustCompile(`/tiles/[^/]+/(\d+)/\d+/\d+\.mvt$`)

// The k6 scripts, run against a real server whose anonymous budget barely
// refills: every request is tagged with the route geotoll's metrics name
// (tiles with their zoom too), a 429 is an expected status counted in
// geotoll_refused and not in http_req_failed, every check passes on the
// server's real answers, and every threshold names a series the run makes
// (see made: the requests', or the script's own metrics' samples).
func TestK6Scripts(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) {
		sizePrices(c) // refusals to see: by size, low-zoom tiles cost max_cost
		c.Throttle.Tiers["anonymous"] = TierConfig{Rate: 0.001, Capacity: 80, MaxInFlight: 8}
		// What is tested is the scripts' tags, checks and thresholds, not
		// the statement budget: a cheap within's statements run under
		// timeout_floor (250 ms), which a loaded CI machine can pass (a
		// 503 the scripts rightly count as failed).
		c.Throttle.TimeoutFloor = 10 * time.Second
	})
	routes := map[string]bool{}
	for _, tc := range []struct {
		script     string
		iterations int
		route      func(path string) string
	}{
		{"tiles.js", 16, func(p string) string {
			if tilePath.MatchString(p) {
				return server.PathTile
			}
			return ""
		}},
		{"geofence.js", 4, func(p string) string {
			return map[string]string{"/geofence/check": server.PathCheck, "/geofence/within": server.PathWithin}[p]
		}},
	} {
		run := runK6(t, tc.script, tc.iterations, map[string]string{"BASE_URL": base, "BATCH": "1000", "ZOOMS": "2,14"})
		statuses := map[int]int{}
		for _, r := range run.Requests {
			statuses[r.Status]++
			path := strings.TrimPrefix(strings.SplitN(r.URL, "?", 2)[0], base)
			if want := tc.route(path); want == "" || r.Tags["route"] != want || r.Tags["name"] != want {
				t.Errorf("%s: %s %s tagged %v, want route and name %q", tc.script, r.Method, path, r.Tags, want)
			}
			if m := tilePath.FindStringSubmatch(path); m != nil && r.Tags["zoom"] != m[1] {
				t.Errorf("%s: %s tagged zoom %q", tc.script, path, r.Tags["zoom"])
			}
			if r.Failed {
				t.Errorf("%s: %s %s → %d counted as failed", tc.script, r.Method, path, r.Status)
			}
			routes[r.Tags["route"]] = true
		}
		if len(run.Requests) < tc.iterations || statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusOK] == 0 {
			t.Errorf("%s: statuses %v of %d requests, want answers and refusals", tc.script, statuses, len(run.Requests))
		}
		if !slices.Contains(run.Expected, http.StatusTooManyRequests) || slices.Contains(run.Expected, http.StatusInternalServerError) {
			t.Errorf("%s: expected statuses %v, want 429 and not 500", tc.script, run.Expected)
		}
		checkRefusedRate(t, tc.script, run)
		for _, c := range run.Checks {
			if !c.OK {
				t.Errorf("%s: check %q failed on a %d", tc.script, c.Name, c.Status)
			}
		}
		checkThresholds(t, tc.script, run)
	}

	// The scripts' route tags are the route labels of the server's metrics.
	resp, body := fetch(t, http.MethodGet, base+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	for route := range routes {
		if !strings.Contains(string(body), `route="`+route+`"`) {
			t.Errorf("/metrics has no series with route=%q", route)
		}
	}
}

// checkRefusedRate: geotoll_refused has one sample per request, 1 for a
// 429 and 0 otherwise.
func checkRefusedRate(t *testing.T, script string, run k6Run) {
	t.Helper()
	var refused []float64
	for _, s := range run.Samples {
		if s.Metric == "geotoll_refused" {
			refused = append(refused, s.Value)
		}
	}
	if len(refused) != len(run.Requests) {
		t.Fatalf("%s: %d geotoll_refused samples for %d requests", script, len(refused), len(run.Requests))
	}
	for i, r := range run.Requests {
		if want := r.Status == http.StatusTooManyRequests; (refused[i] == 1) != want {
			t.Errorf("%s: request %d (%d) counted refused=%v", script, i, r.Status, refused[i])
		}
	}
}

// checkThresholds: the run fails on failed checks, failed requests and
// slow routes (a percentile of a time metric tagged by route) and on
// routes refused (nearly) every time, and every threshold names a series
// the run makes (k6Run.made).
func checkThresholds(t *testing.T, script string, run k6Run) {
	t.Helper()
	th := run.Options.Thresholds
	for _, need := range []string{"checks", "http_req_failed", "geotoll_refused"} {
		if len(th[need]) == 0 {
			t.Errorf("%s: no threshold on %s", script, need)
		}
	}
	for _, name := range run.unmade() {
		t.Errorf("%s: threshold %s names a series the run does not make", script, name)
	}
	durations := map[string]bool{}
	for name, exprs := range th {
		m := k6Threshold.FindStringSubmatch(name)
		if m != nil && m[2] == "route" && percentile(exprs) && run.isTime(m[1]) {
			durations[m[3]] = true
		}
	}
	for _, r := range run.Requests {
		route := r.Tags["route"]
		if !durations[route] {
			t.Errorf("%s: no latency threshold for route %s", script, route)
		}
		// A latency of answers has no sample, so passes, for a route
		// refused every time: its own refusal rate fails such a run.
		if name := "geotoll_refused{route:" + route + "}"; len(th[name]) == 0 {
			t.Errorf("%s: no threshold on %s", script, name)
		}
	}
}
