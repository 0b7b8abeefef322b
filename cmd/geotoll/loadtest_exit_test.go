package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/problem"
)

// A load test none of whose requests was answered (nothing listens at
// -url) fails, saying why, instead of exiting 0 with a report of errors:
// a script or CI step must not take it for a run.
func TestLoadtestFailsWhenNothingAnswers(t *testing.T) {
	addr := freeAddr(t)
	out, err := runCommand(context.Background(), "loadtest", "-url", "http://"+addr, "-duration", "1s", "-rate", "20")
	if err == nil || !strings.Contains(err.Error(), "answered") {
		t.Fatalf("a load test against %s, where nothing listens: error %v, want one saying no request was answered (stdout %q)", addr, err, out)
	}
}

// loadtest crawl fails as the load test does when none of its requests —
// the honest caller's or the crawlers' — was answered.
func TestLoadtestCrawlFailsWhenNothingAnswers(t *testing.T) {
	addr := freeAddr(t)
	out, err := runCommand(context.Background(), "loadtest", "crawl", "-url", "http://"+addr, "-duration", "1s", "-rate", "20", "-crawlers", "2")
	if err == nil || !strings.Contains(err.Error(), "none of") || !strings.Contains(err.Error(), "answered") {
		t.Fatalf("a crawl against %s, where nothing listens: error %v, want one saying no request was answered (stdout %q)", addr, err, out)
	}
}

// A load test that was answered but got no success (2xx, 304) — every
// request refused for a key the server does not know, or not found —
// fails as well, saying what it got: it measured no load served.
func TestLoadtestFailsWhenNothingSucceeds(t *testing.T) {
	for _, code := range []int{http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusNotFound} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		out, err := runCommand(context.Background(), "loadtest", "-url", srv.URL, "-duration", "1s", "-rate", "20")
		srv.Close()
		if err == nil || !strings.HasPrefix(err.Error(), "exit 1:") || !strings.Contains(err.Error(), "succeeded") ||
			!strings.Contains(err.Error(), fmt.Sprintf("%d×", code)) {
			t.Errorf("a load test answered %d every time: error %v, want exit 1 saying no request succeeded, with the statuses (stdout %q)", code, err, out)
		}
	}
	// One success is a run.
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	if out, err := runCommand(context.Background(), "loadtest", "-url", srv.URL, "-duration", "1s", "-rate", "20"); err != nil {
		t.Errorf("a load test with a success (304): %v (stdout %q)", err, out)
	}
}

// loadtest crawl fails after its report when a phase measured nothing:
// the honest caller got no tile (200, 204) in it, or the crawlers got
// neither a tile nor a refusal — with layers the server does not have,
// every request was a 404 and the crawl exited 0. The error says what
// the requests got.
func TestLoadtestCrawlFailsWhenAPhaseMeasuresNothing(t *testing.T) {
	t.Parallel() // each case a server of its own, a few requests a second
	for _, tc := range []struct {
		name          string
		honest, crawl int    // the status of every honest request, and of every crawler's
		want          string // "" for a run
		status        int    // the status the error must count
	}{
		{"no layer exists", http.StatusNotFound, http.StatusNotFound, "honest caller", http.StatusNotFound},
		{"the crawlers' layer does not exist", http.StatusNoContent, http.StatusNotFound, "crawlers", http.StatusNotFound},
		{"honest refused", http.StatusUnauthorized, http.StatusTooManyRequests, "honest caller", http.StatusUnauthorized},
		{"crawlers refused", http.StatusNoContent, http.StatusTooManyRequests, "", 0},
		// Admitted, charged and cut at their deadline: the crawl reached
		// the database, which is what it measures (it failed, as one that
		// measured nothing).
		{"crawlers admitted and cut", http.StatusNoContent, http.StatusServiceUnavailable, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/tiles/points/") {
					w.WriteHeader(tc.honest)
					return
				}
				if tc.crawl == http.StatusServiceUnavailable { // a query cut at its deadline, charged
					w.Header().Set("Content-Type", problem.ContentType)
					w.Header().Set("X-Request-Cost", "2")
					w.WriteHeader(tc.crawl)
					fmt.Fprintf(w, `{"type":%q,"status":503}`, problem.Type(problem.Timeout))
					return
				}
				w.WriteHeader(tc.crawl)
			}))
			defer srv.Close()
			out, err := runCommand(context.Background(), "loadtest", "crawl", "-url", srv.URL, "-duration", "1s", "-rate", "20", "-crawlers", "2")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("honest %d, crawlers %d: %v (stdout %q)", tc.honest, tc.crawl, err, out)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), "exit 1:") || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), fmt.Sprintf("%d×", tc.status))):
				t.Errorf("honest %d, crawlers %d: error %v, want exit 1 naming the %s, with the statuses (stdout %q)", tc.honest, tc.crawl, err, tc.want, out)
			}
		})
	}
}

// A composite -layer with a profile that asks for no tile is a usage
// error (exit 2) before the run: the load test of -profile within sent
// nothing but 404s for its whole -duration, then exited 1.
func TestLoadtestRefusesACompositeOutsideTiles(t *testing.T) {
	addr := freeAddr(t)
	start := time.Now()
	out, err := runCommand(context.Background(), "loadtest", "-url", "http://"+addr, "-profile", "within", "-layer", "places,districts", "-duration", "5s")
	if err == nil || !strings.HasPrefix(err.Error(), "exit 2:") || !strings.Contains(err.Error(), "composite") {
		t.Errorf("loadtest -profile within -layer places,districts: error %v, want exit 2 saying only tiles have composites (stdout %q)", err, out)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the usage error came after %s: the run was made", took)
	}
}

// fidelity -report of a file with no sampled tile — `{}`, or a JSON file
// that is not a fidelity report — fails (exit 1) naming the file, instead
// of printing a table of NaNs and exiting 0.
func TestLoadtestFidelityReportRefusesAReportWithoutSamples(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "good.json"), filepath.Join(dir, "empty.json")
	if err := os.WriteFile(good, []byte(`{"layer":"a","seed":1,"samples":[{"z":3,"x":1,"y":2,"price":1,"cost":1,"status":200,"db_ms":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, report := range []string{empty, good + "," + empty} {
		out, err := runCommand(context.Background(), "loadtest", "fidelity", "-report", report)
		if err == nil || !strings.HasPrefix(err.Error(), "exit 1:") || !strings.Contains(err.Error(), "empty.json") || !strings.Contains(err.Error(), "no sampled tile") {
			t.Errorf("fidelity -report %s: error %v, want exit 1 saying empty.json holds no sampled tile (stdout %q)", report, err, out)
		}
	}
	if out, err := runCommand(context.Background(), "loadtest", "fidelity", "-report", good); err != nil {
		t.Errorf("fidelity -report of a sample: %v (stdout %q)", err, out)
	}
}

// A load test or a crawl that a signal interrupted (its context ended)
// says so, in its report and its error, and fails (exit 1): it printed
// its partial report and exited 0, as if the run had been whole.
func TestLoadtestInterruptedFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	for _, tc := range []struct {
		args  []string
		after time.Duration // the signal, after the crawl's 2 s warm-up
	}{
		{[]string{"loadtest", "-url", srv.URL, "-duration", "20s", "-rate", "20"}, time.Second},
		{[]string{"loadtest", "crawl", "-url", srv.URL, "-duration", "20s", "-rate", "20", "-crawlers", "2"}, 3 * time.Second},
		{[]string{"loadtest", "crawl", "-url", srv.URL, "-duration", "20s", "-rate", "20", "-crawlers", "2", "-v"}, time.Second}, // in the warm-up: no phase
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tc.after)
		start := time.Now()
		out, err := runCommand(ctx, tc.args...)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), "exit 1:") || !strings.Contains(err.Error(), "interrupted") || !strings.Contains(out, "interrupted") {
			t.Errorf("%s interrupted after %s: error %v, want exit 1 saying it was interrupted, as its report does (stdout %q)", strings.Join(tc.args[:2], " "), tc.after, err, out)
		}
		if took := time.Since(start); took > tc.after+5*time.Second {
			t.Errorf("%s interrupted after %s ended after %s", strings.Join(tc.args[:2], " "), tc.after, took)
		}
	}
}
