package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/loadtest"
)

var (
	protectOut   = flag.String("protect.out", "", "BenchmarkProtect: write its table to `PATH`.md and its plot to PATH.svg")
	protectPhase = flag.Duration("protect.phase", 10*time.Second, "BenchmarkProtect: each phase's length")
)

// BenchmarkProtect is the protection benchmark (make bench-protect): a
// whole server on loopback, its tile cache off, and an honest caller
// sending 100 requests a second — dense z14 tiles and, one in five, a
// geofence query — first alone, then beside an abuser flooding z0–3
// tiles from 16 connections with a key of the default free tier, then
// beside the same flood with a key of the free tier's shape in shadow
// mode (the throttle off for it), in one run. It reports the honest
// caller's p99 beside the abuser as a multiple of its p99 alone
// (p99-x-alone-throttled, p99-x-alone-shadow), and fails if the throttled
// abuser was charged more than its bucket allows: rate × duration +
// capacity, with 5 % for the clock. With -protect.out it writes the table
// and a plot of honest p50 and p99 per second.
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
		Rate:   100, Workers: 16, Phase: *protectPhase,
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
		bound := free.Rate*throttled.Duration.Seconds() + free.Capacity
		b.ReportMetric(throttled.Abuser.Cost/bound, "abuser-cost/bound")
		if throttled.Abuser.Cost > 1.05*bound {
			b.Errorf("the throttled abuser was charged %.1f tokens in %s; its bucket allows %.1f", throttled.Abuser.Cost, throttled.Duration, bound)
		}
		var table strings.Builder
		loadtest.WriteProtectTable(&table, phases)
		b.Logf("\n%s", table.String())
		if *protectOut != "" {
			writeProtect(b, *protectOut, table.String(), phases)
		}
	}
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
