package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/geotoll/geotoll/loadtest"
)

const crawlUsage = `An anonymous crawl beside an honest caller, against a running geotoll on an
IPv4 loopback address: the honest caller (-key) asks -profile tiles of -layer
at -rate, alone for -duration, then for -duration beside -crawlers anonymous
crawlers that walk -crawl-profile tiles of -crawl-layer, one request at a
time each, each from its own loopback address (-from, -from+1, …; Linux
routes all of 127.0.0.0/8 to lo), and ask a refused tile again at once; with
-polite, a third phase in which they wait out Retry-After. The server tells
anonymous callers apart by address, so each crawler has its own bucket.

With DATABASE_URL set, pg_stat_activity is sampled every 100 ms: the most
statements the role (-activity-role, default the URL's own) ran at once and
the oldest one; -activity-app counts only the sessions of the application_name
the server's DATABASE_URL gives (e.g. ?application_name=geotoll), so that
other clients of the role are left out.`

// crawlFlags are the flags of `geotoll loadtest crawl`.
type crawlFlags struct {
	client                    loadtest.Client
	layer, profile            string
	crawlLayer, crawlProfile  string
	rate, crawlers            int
	from                      string
	polite, verbose           bool
	duration                  time.Duration
	activityRole, activityApp string
}

func (f *crawlFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&f.client.BaseURL, "url", "http://127.0.0.1:8080", "geotoll base URL (IPv4 loopback)")
	fs.StringVar(&f.client.Key, "key", "", "the honest caller's API key (X-API-Key)")
	fs.StringVar(&f.layer, "layer", "points", "the honest caller's tile layer")
	fs.StringVar(&f.profile, "profile", "z14", "the honest caller's targets: "+strings.Join(loadtest.Profiles, ", "))
	fs.IntVar(&f.rate, "rate", 50, "the honest caller's requests per second")
	fs.StringVar(&f.crawlLayer, "crawl-layer", "countries", "the crawlers' tile layer")
	fs.StringVar(&f.crawlProfile, "crawl-profile", "z0-3", "the crawlers' targets: "+strings.Join(loadtest.Profiles, ", "))
	fs.IntVar(&f.crawlers, "crawlers", 16, fmt.Sprintf("anonymous crawlers, each from its own address (at most %d)", loadtest.MaxCrawlers))
	fs.StringVar(&f.from, "from", loadtest.DefaultCrawlerFrom.String(), "the first crawler's address (127.0.0.0/8)")
	fs.BoolVar(&f.polite, "polite", false, "add a phase with crawlers that honour Retry-After")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, fmt.Sprintf("each phase's length (at most %s)", loadtest.MaxDuration))
	fs.StringVar(&f.activityRole, "activity-role", "", "the role whose statements are sampled (default: DATABASE_URL's)")
	fs.StringVar(&f.activityApp, "activity-app", "", "sample only the sessions of this application_name (the server's, set in its DATABASE_URL)")
	fs.BoolVar(&f.verbose, "v", false, "print each crawler's requests, admissions, refusals and tokens")
}

// crawlCommand is `geotoll loadtest crawl`.
func (c *cli) crawlCommand() *ffcli.Command {
	f := &crawlFlags{}
	cmd := c.command("crawl", "an honest key's p50/p99 alone and beside anonymous crawlers from many addresses", crawlUsage, f.flags,
		noArgs("loadtest crawl", func(ctx context.Context) error {
			cfg, err := c.config()
			if err != nil {
				return err
			}
			return f.run(ctx, cfg, c.stdout)
		}))
	cmd.ShortUsage = "geotoll -config FILE loadtest crawl [flags]"
	return cmd
}

func (f *crawlFlags) run(ctx context.Context, cfg Config, stdout io.Writer) error {
	from, err := netip.ParseAddr(f.from)
	if err != nil {
		return usageError{fmt.Sprintf("loadtest crawl: -from %q is not an address", f.from)}
	}
	if f.duration > loadtest.MaxDuration {
		return usageError{fmt.Sprintf("loadtest crawl: -duration %s is over %s", f.duration, loadtest.MaxDuration)}
	}
	o := loadtest.CrawlOptions{Client: &f.client, Rate: f.rate, Crawlers: f.crawlers, From: from, Polite: f.polite, Phase: f.duration}
	if o.Honest, err = loadtest.Paths(f.profile, f.layer); err != nil {
		return usageError{"loadtest crawl: -profile, -layer: " + err.Error()}
	}
	if o.Crawl, err = loadtest.Paths(f.crawlProfile, f.crawlLayer); err != nil {
		return usageError{"loadtest crawl: -crawl-profile, -crawl-layer: " + err.Error()}
	}
	if err := o.Validate(); err != nil {
		return usageError{"loadtest " + err.Error()}
	}
	if cfg.Database.URL != "" {
		pool, err := openPool(ctx, cfg.Database.URL, cfg)
		if err != nil {
			return fmt.Errorf("loadtest crawl: %w", err)
		}
		defer pool.Close()
		o.Activity = &loadtest.ActivitySampler{Pool: pool, Role: f.activityRole, Application: f.activityApp}
	}
	fmt.Fprintf(stdout, "load average before: %s\n", loadAverage())
	phases, err := loadtest.RunCrawl(ctx, o)
	if err != nil {
		return fmt.Errorf("loadtest %w", err)
	}
	fmt.Fprintf(stdout, "load average after: %s\n\n", loadAverage())
	loadtest.WriteCrawlTable(stdout, phases)
	if f.verbose {
		for _, p := range phases[min(1, len(phases)):] { // interrupted, there may be none
			fmt.Fprintf(stdout, "\n%s:\n", p.Name)
			loadtest.WriteCrawlers(stdout, p.Crawl)
		}
	}
	if ctx.Err() != nil { // a signal (main): the phases from it on are cut short or empty
		if len(phases) > 0 {
			fmt.Fprintln(stdout, "\ninterrupted: the table holds the phases that ran, the last of them perhaps cut short")
		} else {
			fmt.Fprintln(stdout, "\ninterrupted before the first phase")
		}
		return errors.New("loadtest crawl: interrupted: the table is of the part that ran")
	}
	return crawlOutcome(phases, f.client.BaseURL)
}

// crawlOutcome fails a crawl, with what its requests got, when none of
// them was answered; when the honest caller got no tile (200, 204) in a
// phase, whose latencies are then those of failures — a key or layer the
// server does not have, or, beside the crawlers, a server that served it
// nothing; or when the crawlers got neither a tile, nor a refusal (429, a
// 503 before admission), nor an admission (a query cut at its deadline)
// in one — a layer the server does not have, say — so that no crawl was
// put to the server.
func crawlOutcome(phases []loadtest.CrawlPhase, url string) error {
	sent, unanswered := 0, 0
	for _, p := range phases {
		for _, status := range []map[int]int{p.Status, p.Crawl.Status} {
			for code, n := range status {
				sent += n
				if code == 0 {
					unanswered += n
				}
			}
		}
	}
	if sent > 0 && unanswered == sent {
		return fmt.Errorf("loadtest crawl: none of %d requests was answered by %s", sent, url)
	}
	var errs []error
	for i, p := range phases {
		if n := p.Honest.N; n > 0 && p.Failed() == n {
			errs = append(errs, fmt.Errorf("phase %q: the honest caller got no tile (200, 204) of %d requests: %s",
				p.Name, n, crawlStatusText(p.Status)))
		}
		c := p.Crawl
		if i > 0 && c.Requests > 0 && c.Status[200]+c.Status[204]+c.Refused+c.Admitted == 0 {
			errs = append(errs, fmt.Errorf("phase %q: the crawlers got no tile (200, 204), no refusal (429, 503) and no admission of %d requests: %s",
				p.Name, c.Requests, crawlStatusText(c.Status)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("loadtest crawl: %w\n(a key or a layer the server does not have is answered so: see -key, -layer, -crawl-layer)", errors.Join(errs...))
	}
	return nil
}

// crawlStatusText prints status counts as loadtest.StatusText does, and
// what status 0 stands for when there is one.
func crawlStatusText(m map[int]int) string {
	if m[0] > 0 {
		return loadtest.StatusText(m) + " (0: no answer)"
	}
	return loadtest.StatusText(m)
}

// loadAverage is the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(b)); err == nil && len(fields) >= 3 {
		return strings.Join(fields[:3], " ")
	}
	return "unknown"
}
