package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/toll"
)

// TestLoadtestCrawlEndToEnd runs `geotoll loadtest crawl` against a whole
// server on the demo data: four anonymous crawlers, each from its own
// loopback address, walk z0–3 of places beside an honest key. The server
// sees four callers — its access log has each address, refused on its
// own — and charges each its own bucket: every crawler is admitted and
// refused, and none is charged more than one bucket allows, so the four
// together were admitted more than one bucket could have paid for.
func TestLoadtestCrawlEndToEnd(t *testing.T) {
	const capacity, rate, price, phase = 12.0, 1.0, 5.0, 2 * time.Second
	key := createKey(t, "bench")
	logs := &logBuffer{}
	m := startLogging(t, func(c *Config) {
		sizePrices(c) // a z0–3 tile costs max_cost
		most := price
		c.Throttle.Weights.MaxCost = &most
		c.Tiles.Cache.MaxBytes = 0
		c.Throttle.Tiers["bench"] = TierConfig{Rate: 1e9, Capacity: 1e9}
		c.Throttle.Tiers[toll.AnonymousTier] = TierConfig{Rate: rate, Capacity: capacity}
	}, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"crawl", "-url", "http://" + m.Addr(), "-key", key, "-layer", "places", "-crawl-layer", "places",
		"-rate", "20", "-crawlers", "4", "-duration", phase.String(), "-polite", "-v"}
	if err := runLoadtest(ctx, m.Config, args, &out, &errOut); err != nil {
		t.Fatalf("loadtest %v: %v\n%s", args, err, errOut.String())
	}
	report := out.String()
	t.Log(report)
	for _, row := range []string{"| honest alone | ", "| with crawlers retrying at once | ", "| with crawlers honouring Retry-After | "} {
		if !strings.Contains(report, row) {
			t.Errorf("no row %q in the report", row)
		}
	}
	rude, polite, ok := strings.Cut(report, "\nwith crawlers honouring Retry-After:\n")
	if !ok {
		t.Fatalf("no polite crawlers' lines in the report")
	}
	line := regexp.MustCompile(`(?m)^  (127\.0\.0\.\d+): (\d+) requests, (\d+) admitted \(\d+ failed\), (\d+) refused, ([\d.]+) tokens charged$`)
	bound := capacity + rate*(phase+time.Second).Seconds()
	admitted := 0
	for _, c := range line.FindAllStringSubmatch(rude, -1) {
		n, in, out := atoi(t, c[2]), atoi(t, c[3]), atoi(t, c[4])
		cost, _ := strconv.ParseFloat(c[5], 64)
		if in < 1 || out < 1 || cost > bound {
			t.Errorf("crawler %s: %d requests, %d admitted, %d refused, %g tokens; want admitted and refused, at most %g tokens", c[1], n, in, out, cost, bound)
		}
		admitted += in
	}
	if got := len(line.FindAllStringSubmatch(rude, -1)); got != 4 {
		t.Fatalf("%d crawlers reported, want 4:\n%s", got, report)
	}
	if one := int(bound / price); admitted <= one {
		t.Errorf("the four crawlers were admitted %d tiles, what one bucket pays for (%d): one caller to the server", admitted, one)
	}
	for _, c := range line.FindAllStringSubmatch(polite, -1) {
		// After each refusal a polite crawler waits its Retry-After, at
		// least a second.
		if out := atoi(t, c[4]); out > int(phase/time.Second)+1 {
			t.Errorf("polite crawler %s was refused %d times in %s", c[1], out, phase)
		}
	}
	// The server's own view: each address refused on its own.
	refusedBy := map[string]int{}
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "msg=request") && strings.Contains(l, "status=429") {
			if r := regexp.MustCompile(`remote=(127\.0\.0\.\d+):`).FindStringSubmatch(l); r != nil {
				refusedBy[r[1]]++
			}
		}
	}
	for _, a := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		if refusedBy[a] == 0 {
			t.Errorf("the server refused nothing from %s (refusals by address: %v)", a, refusedBy)
		}
	}
	if len(refusedBy) != 4 {
		t.Errorf("refusals by address %v, want the four crawlers'", refusedBy)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
