package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/loadtest"
)

var (
	crawlPhase  = flag.Duration("crawl.phase", 30*time.Second, "BenchmarkCrawl: each phase's length")
	crawlPolite = flag.Bool("crawl.polite", false, "BenchmarkCrawl: add the phase of crawlers that honour Retry-After")
	crawlTarpit = flag.Duration("crawl.tarpit", -1, "BenchmarkCrawl: throttle.tarpit.max_hold (negative: as shipped; 0s: off)")
	crawlShare  = flag.Int("crawl.share", -1, "BenchmarkCrawl: database.anonymous_max_conns (negative: as shipped; 0: no share)")
)

// staticKeys is a KeyLookup of one key, for a server whose database the
// benchmark may only read.
type staticKeys struct {
	key  string
	tier string
}

func (s staticKeys) Lookup(key string) (apikeys.Key, bool) {
	if key != s.key {
		return apikeys.Key{}, false
	}
	return apikeys.Key{ID: 1, Name: "crawl-honest", Tier: s.tier}, true
}

// BenchmarkCrawl is the anonymous crawl on the open data (`geotoll
// opendata`, then `geotoll prepare` with loadtest/opendata.yaml) that
// GEOTOLL_BENCH_READ_DATABASE_URL reaches as the read role: a whole server
// as loadtest/opendata.yaml configures it (cache off) with everything else
// as shipped — the anonymous tier, prices, pool — and an honest key
// (of tier bench, which never refuses) asking 50 dense z14 tiles of points
// a second, alone, then beside 16 anonymous crawlers walking z0–3 of the
// 10 m countries, each from its own loopback address, asking a refused
// tile again at once. The database is only read: the honest key is known
// to the server without a row in geotoll.api_keys. It reports the honest
// p99 beside the crawl as a multiple of its p99 alone, the honest
// requests that failed, and the most statements the server ran at once,
// sampled every 100 ms (its pool's sessions, by application_name). The URL
// must have a query string (e.g. ?sslmode=disable).
//
// -crawl.tarpit 0s -crawl.share 0 turn off what protects the honest
// caller (the tarpit, the anonymous share of the pool), for a baseline.
//
//	GEOTOLL_BENCH_READ_DATABASE_URL=postgres://geotoll_reader@…/geotoll?sslmode=disable \
//	  go test -run '^$' -bench '^BenchmarkCrawl$' -benchtime 1x ./cmd/geotoll -args -crawl.phase 30s -crawl.polite
func BenchmarkCrawl(b *testing.B) {
	url := os.Getenv("GEOTOLL_BENCH_READ_DATABASE_URL")
	if url == "" {
		b.Skip("GEOTOLL_BENCH_READ_DATABASE_URL is not set")
	}
	const key, crawlApp = "crawl-honest-0123456789abcdef", "geotoll-bench-crawl"
	od, _, err := LoadConfig([]string{"-config", "../../loadtest/opendata.yaml"})
	if err != nil {
		b.Fatal(err)
	}
	m := startMain(b, func(c *Config) {
		od.Listen, od.Redis.URL, od.Throttle.Prefix = c.Listen, c.Redis.URL, c.Throttle.Prefix
		od.Database.URL = url + "&application_name=" + crawlApp
		if *crawlTarpit >= 0 {
			od.Throttle.Tarpit.MaxHold = *crawlTarpit
		}
		if *crawlShare >= 0 {
			od.Database.AnonymousMaxConns = int32(*crawlShare)
		}
		*c = od
	})
	m.gate.Keys = staticKeys{key: key, tier: "bench"}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	o := loadtest.CrawlOptions{
		Client: &loadtest.Client{BaseURL: "http://" + m.Addr(), Key: key},
		Rate:   50, Crawlers: 16, From: loadtest.DefaultCrawlerFrom, Polite: *crawlPolite, Phase: *crawlPhase,
		Activity: &loadtest.ActivitySampler{Pool: pool, Application: crawlApp},
	}
	o.Honest, _ = loadtest.Paths("z14", "points")
	o.Crawl, _ = loadtest.Paths("z0-3", "countries")
	for b.Loop() {
		before := m.Pool.Stat()
		phases, err := loadtest.RunCrawl(context.Background(), o)
		after := m.Pool.Stat()
		acquires := after.AcquireCount() - before.AcquireCount()
		waited := after.EmptyAcquireCount() - before.EmptyAcquireCount()
		b.Logf("server pool (%d connections): %d acquires, %d waited for a connection, %.1f ms waited in all, %d gave up",
			after.MaxConns(), acquires, waited, float64(after.AcquireDuration()-before.AcquireDuration())/float64(time.Millisecond),
			after.CanceledAcquireCount()-before.CanceledAcquireCount())
		if err != nil {
			b.Fatal(err)
		}
		alone, crawl := phases[0], phases[1]
		b.ReportMetric(float64(crawl.Honest.P99)/float64(alone.Honest.P99), "p99-x-alone")
		b.ReportMetric(float64(crawl.Failed()), "honest-failed")
		b.ReportMetric(float64(crawl.Activity.MaxRunning), "max-statements")
		var table strings.Builder
		loadtest.WriteCrawlTable(&table, phases)
		b.Logf("load average %s\n%s", loadAverage(), table.String())
	}
}
