package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/loadtest"
)

// loadtestCommand is `geotoll loadtest`: a bounded, paced load against a
// running geotoll (loopback only unless -allow-remote). `geotoll loadtest
// fidelity|zooms|ceiling …` are the measuring instruments of
// loadtest_scenarios.go, `geotoll loadtest crawl` the anonymous crawl of
// loadtest_crawl.go.
func (c *cli) loadtestCommand() *ffcli.Command {
	o := loadtest.Options{}
	flags := func(fs *flag.FlagSet) {
		fs.StringVar(&o.BaseURL, "url", "http://127.0.0.1:8080", "geotoll base URL")
		fs.StringVar(&o.Profile, "profile", "z14", "target list: "+strings.Join(loadtest.Profiles, ", "))
		fs.StringVar(&o.Layer, "layer", "places", "tile or geofence layer")
		fs.IntVar(&o.Rate, "rate", 100, fmt.Sprintf("requests per second (at most %d)", loadtest.MaxRate))
		fs.DurationVar(&o.Duration, "duration", 10*time.Second, fmt.Sprintf("how long (at most %s)", loadtest.MaxDuration))
		fs.StringVar(&o.Key, "key", "", "API key (X-API-Key); empty = anonymous")
		fs.BoolVar(&o.AllowRemote, "allow-remote", false, "permit a non-loopback -url")
	}
	return c.command("loadtest", "a bounded load against a running geotoll, or a measuring instrument", "", flags,
		func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("loadtest: unknown scenario %q (fidelity, zooms, ceiling, crawl)", args[0])}
			}
			if _, err := c.config(); err != nil { // a broken configuration is reported by every command
				return err
			}
			if err := o.Validate(); err != nil {
				return usageError{"loadtest: " + err.Error()}
			}
			rep, err := loadtest.Run(ctx, o)
			if err != nil {
				return fmt.Errorf("loadtest: %w", err)
			}
			rep.WriteText(c.stdout)
			if ctx.Err() != nil { // a signal (main): the run is not the one asked for
				fmt.Fprintf(c.stdout, "interrupted  after %s of %s: this report is of the part that ran\n", rep.Duration.Round(time.Millisecond), o.Duration)
				return fmt.Errorf("loadtest: interrupted after %s of %s", rep.Duration.Round(time.Millisecond), o.Duration)
			}
			if rep.Requests > 0 && uint64(max(rep.StatusCodes["0"], 0)) == rep.Requests { // status 0: no answer
				first := ""
				if len(rep.Errors) > 0 {
					first = ": " + rep.Errors[0]
				}
				return fmt.Errorf("loadtest: none of %d requests was answered by %s%s", rep.Requests, o.BaseURL, first)
			}
			if rep.Requests > 0 && rep.Succeeded == 0 {
				// Answered, yet nothing served (every request refused, not
				// found, failed): no load of the server was measured.
				return fmt.Errorf("loadtest: none of %d requests succeeded (2xx, 304): %s", rep.Requests, statusCodesText(rep.StatusCodes))
			}
			return nil
		},
		c.scenarioCommand("fidelity", "sampled tiles: dry-run price, X-Request-Cost and database time; Spearman ρ"),
		c.scenarioCommand("zooms", "per zoom: bytes, features and database time"),
		c.scenarioCommand("ceiling", "dense z14 and z8-10 tiles: pgbench (same SQL) against geotoll"),
		c.crawlCommand())
}

// statusCodesText prints a run's status counts as "401×12 429×3".
func statusCodesText(codes map[string]int) string {
	m := map[int]int{}
	for c, n := range codes {
		code, err := strconv.Atoi(c)
		if err != nil {
			code = -1
		}
		m[code] += n
	}
	return loadtest.StatusText(m)
}
