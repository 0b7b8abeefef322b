package main

import (
	"context"
	"strings"
	"testing"
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
