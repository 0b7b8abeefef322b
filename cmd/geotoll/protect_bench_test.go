package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/loadtest"
)

var (
	protectOut    = flag.String("protect.out", "", "BenchmarkProtect: write its table to `PATH`.md and its plot to PATH.svg")
	protectPhase  = flag.Duration("protect.phase", 10*time.Second, "BenchmarkProtect: each phase's length")
	protectWarmup = flag.Duration("protect.warmup", loadtest.DefaultWarmup, "BenchmarkProtect: the honest caller's warm-up before its phase alone, in no figure (0s: none)")
)

// protectMaxFailed is the share of the honest caller's requests that may
// fail (no 200 or 204) alone or beside the throttled abuser before
// BenchmarkProtect fails: beyond it the honest caller is not protected,
// whatever its p99.
const protectMaxFailed = 0.01

// BenchmarkProtect is the protection benchmark (make bench-protect): a
// whole server on loopback, its tile cache off, and an honest caller
// sending 100 requests a second — dense z14 tiles and, one in five, a
// geofence query — first alone, then beside an abuser flooding z0–3
// tiles from 16 connections with a key of the default free tier, then
// beside the same flood with a key of the free tier's shape in shadow
// mode (the throttle off for it), in one run, after a warm-up of the
// honest traffic that counts nowhere (-protect.warmup: the server's
// database backends and the caller's connections are fresh, and their
// first requests are slow). Every honest request counts in its phase's
// figures: one that failed (not 200 or 204, or no answer within 10 s)
// counts in p50 and p99 as 10 s. It reports the honest caller's p99
// beside the abuser as a multiple of its p99 alone
// (p99-x-alone-throttled, p99-x-alone-shadow) and the share of its
// requests that failed beside each flood; it fails if more than 1 % of
// the honest requests failed alone or beside the throttled flood, or if
// the throttled abuser was charged more than its bucket allows: rate ×
// the phase's length + capacity, with 5 % for the clock. With
// -protect.out it writes the table and a plot of honest p50 and p99 per
// second.
//
//	go test -run '^$' -bench Protect -benchtime 1x ./cmd/geotoll -args -protect.out $PWD/docs/protect
func BenchmarkProtect(b *testing.B) {
	free := DefaultConfig().Throttle.Tiers["free"]
	shadow := free
	shadow.Shadow = true
	m := startMain(b, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Redis.Timeout = DefaultConfig().Redis.Timeout // the hot path as shipped
		c.Throttle.Tiers["honest"] = TierConfig{Rate: 1e6, Capacity: 1e9, MaxInFlight: 64}
		c.Throttle.Tiers["free-shadow"] = shadow
	})
	o := loadtest.ProtectOptions{
		Client: &loadtest.Client{BaseURL: "http://" + m.Addr(), Key: createKey(b, "honest")},
		Rate:   100, Workers: 16, Phase: *protectPhase, Warmup: cmp.Or(*protectWarmup, -1),
		AbuserKey: createKey(b, "free"), ShadowKey: createKey(b, "free-shadow"),
	}
	z14, err := loadtest.Paths("z14", "places")
	if err != nil {
		b.Fatal(err)
	}
	within, _ := loadtest.Paths("within", "places")
	for i, p := range z14 {
		if i%4 == 3 {
			o.Honest = append(o.Honest, within[(i/4)%len(within)])
		}
		o.Honest = append(o.Honest, p)
	}
	o.Flood, _ = loadtest.Paths("z0-3", "places")
	for b.Loop() {
		phases, err := loadtest.RunProtect(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		alone, throttled, shadowed := phases[0], phases[1], phases[2]
		b.ReportMetric(float64(throttled.Honest.P99)/float64(alone.Honest.P99), "p99-x-alone-throttled")
		b.ReportMetric(float64(shadowed.Honest.P99)/float64(alone.Honest.P99), "p99-x-alone-shadow")
		b.ReportMetric(failedShare(throttled), "honest-failed-throttled")
		b.ReportMetric(failedShare(shadowed), "honest-failed-shadow")
		for _, p := range []loadtest.ProtectPhase{alone, throttled} {
			if failedShare(p) > protectMaxFailed {
				b.Errorf("%s: %d of the honest caller's %d requests failed (status %v)", p.Name, p.Failed(), p.Honest.N, p.Status)
			}
		}
		// The phase's own length: not the wait for the last honest
		// answers after it, in which the abuser sent nothing.
		bound := throttled.AbuserBound(free.Rate, free.Capacity)
		b.ReportMetric(throttled.Abuser.Cost/bound, "abuser-cost/bound")
		if throttled.Abuser.Cost > 1.05*bound {
			b.Errorf("the throttled abuser was charged %.1f tokens in %s; its bucket allows %.1f", throttled.Abuser.Cost, throttled.Duration, bound)
		}
		var table strings.Builder
		loadtest.WriteProtectTable(&table, phases)
		writeProtectNote(&table, o, phases)
		b.Logf("\n%s", table.String())
		if *protectOut != "" {
			writeProtect(b, *protectOut, table.String(), phases)
		}
	}
}

// writeProtectNote says under the table what its honest figures count:
// every request, a failed one as the timeout, and each phase's honest
// answers by status; the warm-up they leave out; what the abuser's
// figures count (its charge is what its bucket paid, the 5xx of admitted
// requests too; a shadow admission its bucket could not pay is counted
// apart, at its price, and charged nothing); and the abuser's answers by
// status.
func writeProtectNote(w io.Writer, o loadtest.ProtectOptions, phases []loadtest.ProtectPhase) {
	fmt.Fprintf(w, "\nEvery honest request counts: one that failed (neither 200 nor 204, or no answer within %s) counts in p50 and p99 as %s.",
		loadtest.DefaultHonestTimeout, loadtest.DefaultHonestTimeout)
	if o.Warmup > 0 {
		fmt.Fprintf(w, " Before the phases, %s of the honest traffic warmed up, in no figure.", o.Warmup)
	}
	fmt.Fprintln(w, " Honest answers by status:")
	fmt.Fprintln(w)
	for _, p := range phases {
		fmt.Fprintf(w, "- %s: %s\n", p.Name, byStatus(p.Status))
	}
	fmt.Fprintln(w, "\nThe abuser's charge is what its bucket paid: X-Request-Cost of the requests admitted and charged, "+
		"a 5xx of an admitted request included. In shadow mode a request its bucket could not pay is admitted all the same, "+
		"answered with X-RateLimit-Shadow: would-refuse, and charged nothing: it counts apart, as admitted unpaid, "+
		"with the tokens it was priced at (X-Request-Cost) and none of them spent.")
	fmt.Fprintln(w, "\nThe abuser's answers by status:")
	fmt.Fprintln(w)
	for _, p := range phases {
		if p.Abuser.Requests > 0 {
			fmt.Fprintf(w, "- %s: %s\n", p.Name, byStatus(p.Abuser.Status))
		}
	}
}

// byStatus lists counts by HTTP status, in order ("no answer" for 0).
func byStatus(status map[int]int) string {
	var by []string
	for _, c := range slices.Sorted(maps.Keys(status)) {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "no answer"
		}
		by = append(by, fmt.Sprintf("%s: %d", name, status[c]))
	}
	return strings.Join(by, ", ")
}

// failedShare is the share of the phase's honest requests that failed.
func failedShare(p loadtest.ProtectPhase) float64 {
	if p.Honest.N == 0 {
		return 0
	}
	return float64(p.Failed()) / float64(p.Honest.N)
}

func writeProtect(b *testing.B, out, table string, phases []loadtest.ProtectPhase) {
	if err := os.WriteFile(out+".md", []byte(table), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(out + ".svg")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := loadtest.WriteProtectSVG(f, phases); err != nil {
		b.Fatal(err)
	}
}
