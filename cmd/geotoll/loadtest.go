package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/geotoll/geotoll/loadtest"
)

// runLoadtest runs `geotoll loadtest`: a bounded, paced load against a
// running geotoll (loopback only unless -allow-remote).
// `geotoll loadtest fidelity|zooms|ceiling …` are the measuring instruments
// of loadtest_scenarios.go.
func runLoadtest(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "fidelity", "zooms", "ceiling":
			return runScenario(ctx, cfg, args[0], args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := loadtest.Options{}
	fs.StringVar(&o.BaseURL, "url", "http://127.0.0.1:8080", "geotoll base URL")
	fs.StringVar(&o.Profile, "profile", "z14", "target list: "+strings.Join(loadtest.Profiles, ", "))
	fs.StringVar(&o.Layer, "layer", "places", "tile or geofence layer")
	fs.IntVar(&o.Rate, "rate", 100, fmt.Sprintf("requests per second (at most %d)", loadtest.MaxRate))
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, fmt.Sprintf("how long (at most %s)", loadtest.MaxDuration))
	fs.StringVar(&o.Key, "key", "", "API key (X-API-Key); empty = anonymous")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "permit a non-loopback -url")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rep, err := loadtest.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("loadtest: %w", err)
	}
	rep.WriteText(stdout)
	return nil
}
