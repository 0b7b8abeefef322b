package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/geotoll/geotoll/problem"
)

// CrawlOptions configure RunCrawl: an honest caller with a key, paced,
// alone and then beside anonymous crawlers, each from its own loopback
// address (so that the server, which tells anonymous callers apart by
// their address, sees as many callers as there are crawlers).
type CrawlOptions struct {
	Client   *Client  // the server (an IPv4 loopback URL), and the honest caller's key
	Honest   []string // the honest caller's paths, sent in turn
	Rate     int      // honest requests per second, 1..MaxRate
	Crawl    []string // the paths every crawler walks, in turn, from its own start
	Crawlers int      // anonymous crawlers, 1..MaxCrawlers, each one request at a time
	From     netip.Addr
	// Polite adds a third phase in which the crawlers wait out each
	// refusal's Retry-After before they ask again.
	Polite   bool
	Phase    time.Duration
	Activity *ActivitySampler // nil: the database is not watched
	// Warmup is honest traffic as in the phases, sent before the phase
	// alone and left out of every figure (ProtectOptions.Warmup). 0:
	// DefaultWarmup; negative: none.
	Warmup time.Duration
	// Timeout is each honest request's: one unanswered by then is cut and
	// failed (status 0). 0: DefaultHonestTimeout.
	Timeout time.Duration
}

// MaxCrawlers bounds CrawlOptions.Crawlers.
const MaxCrawlers = 250

// DefaultCrawlerFrom is the first crawler's address: 127.0.0.1, the
// address every other loopback client comes from, is left to them.
var DefaultCrawlerFrom = netip.AddrFrom4([4]byte{127, 0, 0, 2})

// Phases of RunCrawl, in order.
const (
	PhaseCrawlAlone  = "honest alone"
	PhaseCrawl       = "with crawlers retrying at once"
	PhaseCrawlPolite = "with crawlers honouring Retry-After"
)

// CrawlPhase is what one phase of RunCrawl measured.
type CrawlPhase struct {
	Name string
	// Honest is every honest request the phase sent, failed ones
	// included (Latencies).
	Honest   Latencies
	Status   map[int]int // the honest caller's, 0: transport errors and timeouts
	Crawl    CrawlResult
	Activity Activity
	// Duration is the phase's own length, from its start until the
	// crawlers stopped (Phase, unless the run was cancelled); the honest
	// answers still due then are waited for after it.
	Duration time.Duration
}

// CrawlResult is what the crawlers sent and got: the sums of Crawlers'
// figures, and their answers by status.
type CrawlResult struct {
	Requests int
	Admitted int         // admitted requests (Crawler.Admitted)
	Failed   int         // admitted requests that failed (Crawler.Failed)
	Refused  int         // refusals (Crawler.Refused)
	Status   map[int]int // 0: transport errors and answers cut short
	Cost     float64     // X-Request-Cost of the charged requests (Charged)
	Crawlers []Crawler   // one per address, in address order
}

// Crawler is what one crawler sent and got. Requests counts every request
// but one the run's end cut before its answer's head came. Admitted counts those the
// server admitted (admittedAnswer), answered or not; Failed those of them
// that got neither 200 nor 204, such as a 503 cut at its deadline or an
// answer cut short; Refused the whole answers that refused the request
// (refusal): 429s, and 503s given before admission. A request in none of
// them got another answer (a 404, a transport error).
type Crawler struct {
	Addr                       netip.Addr
	Requests, Admitted, Failed int
	Refused                    int
	Cost                       float64 // X-Request-Cost of its charged requests (Charged)
}

// CrawlerAddrs returns n consecutive IPv4 loopback addresses from first.
// Linux routes all of 127.0.0.0/8 to the loopback interface, so a client
// may dial from any of them. 127.0.0.1 and the broadcast address
// 127.255.255.255 are refused.
func CrawlerAddrs(first netip.Addr, n int) ([]netip.Addr, error) {
	if !first.Is4() || !first.IsLoopback() {
		return nil, fmt.Errorf("crawl: -from: the first crawler address %s is not IPv4 loopback (127.0.0.0/8)", first)
	}
	if n < 1 || n > MaxCrawlers {
		return nil, fmt.Errorf("crawl: -crawlers %d must be within 1..%d", n, MaxCrawlers)
	}
	out := make([]netip.Addr, 0, n)
	for a := first; len(out) < n; a = a.Next() {
		if !a.IsLoopback() || a == netip.AddrFrom4([4]byte{127, 255, 255, 255}) {
			return nil, fmt.Errorf("crawl: %d addresses from %s leave 127.0.0.0/8", n, first)
		}
		if a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return nil, fmt.Errorf("crawl: %d addresses from %s include 127.0.0.1, every other local client's", n, first)
		}
		out = append(out, a)
	}
	return out, nil
}

// Validate checks o as RunCrawl does before it sends anything. Its errors
// name the options by the flags of `geotoll loadtest crawl`.
func (o CrawlOptions) Validate() error { return o.validate() }

func (o *CrawlOptions) validate() error {
	if err := o.Client.check(); err != nil {
		return fmt.Errorf("crawl: -url: %w", err)
	}
	u, _ := url.Parse(o.Client.BaseURL) // checked above
	if ip, err := netip.ParseAddr(u.Hostname()); err != nil || !ip.Is4() || !ip.IsLoopback() {
		return fmt.Errorf("crawl: -url host %q: the crawlers dial from 127.0.0.0/8, so the server must listen on an IPv4 loopback address", u.Hostname())
	}
	var errs []error
	if o.Rate < 1 || o.Rate > MaxRate {
		errs = append(errs, fmt.Errorf("crawl: -rate %d must be within 1..%d", o.Rate, MaxRate))
	}
	if o.Phase < time.Second || o.Phase > MaxDuration {
		errs = append(errs, fmt.Errorf("crawl: -duration %s (each phase's) must be within 1s..%s", o.Phase, MaxDuration))
	}
	if len(o.Honest) == 0 {
		errs = append(errs, errors.New("crawl: no honest paths (-profile, -layer)"))
	}
	if len(o.Crawl) == 0 {
		errs = append(errs, errors.New("crawl: no crawl paths (-crawl-profile, -crawl-layer)"))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("crawl: honest timeout %s must not be negative", o.Timeout))
	}
	if _, err := CrawlerAddrs(o.From, o.Crawlers); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RunCrawl runs the honest caller alone, then beside crawlers that ask
// again at once after a refusal, then (Polite) beside crawlers that wait
// out Retry-After, each phase for Phase, after the honest caller's
// warm-up (Warmup), whose requests count nowhere. When ctx ends it
// returns the phases that ran, the last cut short: none, in the warm-up.
func RunCrawl(ctx context.Context, o CrawlOptions) ([]CrawlPhase, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	warmUp(ctx, o.Client, o.Honest, o.Rate, o.Warmup, o.Timeout)
	type phase struct {
		name          string
		crawl, polite bool
	}
	phases := []phase{{PhaseCrawlAlone, false, false}, {PhaseCrawl, true, false}}
	if o.Polite {
		phases = append(phases, phase{PhaseCrawlPolite, true, true})
	}
	var out []CrawlPhase
	for _, ph := range phases {
		if ctx.Err() != nil { // cancelled: the phases that ran, the last cut short
			break
		}
		p, err := o.phase(ctx, ph.name, ph.crawl, ph.polite)
		if err != nil {
			return out, fmt.Errorf("crawl: %s: %w", ph.name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (o *CrawlOptions) phase(ctx context.Context, name string, crawl, polite bool) (CrawlPhase, error) {
	ctx, cancel, length := timed(ctx, o.Phase)
	defer cancel()
	p := CrawlPhase{Name: name}
	var wg sync.WaitGroup
	var crawlErr, activityErr error
	if crawl {
		wg.Go(func() { p.Crawl, crawlErr = o.crawl(ctx, polite) })
	}
	if o.Activity != nil {
		wg.Go(func() { p.Activity, activityErr = o.Activity.Sample(ctx) })
	}
	samples, status := honest(ctx, o.Client, o.Honest, o.Rate, o.Timeout)
	wg.Wait()
	p.Duration = length()
	p.Status = status
	p.Honest = summariseHonest(samples, cmp.Or(o.Timeout, DefaultHonestTimeout))
	if crawlErr != nil {
		return p, crawlErr
	}
	return p, activityErr
}

// crawl runs the crawlers until ctx ends.
func (o *CrawlOptions) crawl(ctx context.Context, polite bool) (CrawlResult, error) {
	addrs, err := CrawlerAddrs(o.From, o.Crawlers)
	if err != nil {
		return CrawlResult{}, err
	}
	out := CrawlResult{Status: map[int]int{}, Crawlers: make([]Crawler, len(addrs))}
	statuses := make([]map[int]int, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		cn, err := newConn(o.Client.BaseURL)
		if err != nil {
			wg.Wait() // the crawlers started write out until ctx ends
			return out, err
		}
		cn.local = &net.TCPAddr{IP: a.AsSlice()}
		wg.Go(func() {
			defer cn.Close()
			out.Crawlers[i], statuses[i] = crawler(ctx, cn, o.Crawl, i*len(o.Crawl)/len(addrs), polite)
			out.Crawlers[i].Addr = a
		})
	}
	wg.Wait()
	for i, c := range out.Crawlers {
		out.Requests += c.Requests
		out.Admitted += c.Admitted
		out.Failed += c.Failed
		out.Refused += c.Refused
		out.Cost += c.Cost
		for code, n := range statuses[i] {
			out.Status[code] += n
		}
	}
	return out, nil
}

// crawler walks paths from start through cn until ctx ends, one request
// at a time. A refused tile (refusal) is asked again: at once, or, when
// polite, after the refusal's Retry-After (1 s when it has none); so is
// one that got no whole answer, after errorPause. Any other answer, an
// admitted request's failure included, moves on to the next tile.
func crawler(ctx context.Context, cn *conn, paths []string, start int, polite bool) (Crawler, map[int]int) {
	var c Crawler
	status := map[int]int{}
	cn.problems = true // a 503's problem type tells a timeout from a refusal
	want := append(slices.Clip(chargeHeaders), "Retry-After")
	for i := start; !ended(ctx); {
		resp, err := cn.get(ctx, paths[i%len(paths)], want...)
		if err != nil && !resp.head && ended(ctx) {
			break // cut by the run's end before the server said anything
		}
		c.Requests++
		cost, charged, cerr := resp.charge()
		if charged && cerr == nil { // a 503 cut at its deadline too
			c.Cost += cost
		}
		admitted := admittedAnswer(resp, charged)
		if admitted {
			c.Admitted++
		}
		if err != nil { // no whole answer (status 0)
			status[0]++
			if admitted {
				c.Failed++
			}
			if ended(ctx) {
				break
			}
			pause(ctx, errorPause) // a refused connection: do not spin
			continue
		}
		status[resp.status]++
		if refusal(resp, admitted) {
			c.Refused++
			if polite {
				pause(ctx, retryAfter(resp.headers["Retry-After"]))
			}
			continue
		}
		if admitted && resp.status != http.StatusOK && resp.status != http.StatusNoContent {
			c.Failed++
		}
		i++
	}
	return c, status
}

// admittedAnswer reports whether resp, its head read, says the server
// admitted the request: charged (Charged), admitted in shadow
// (ShadowAdmitted), or a 503 of problem type timeout — a request of a
// fixed price (a cache hit, or a budget store out with fail_mode open)
// carries no X-Request-Cost-Estimate, and only the server's query or its
// deadline times out.
// charged is what resp.charge reported.
func admittedAnswer(resp response, charged bool) bool {
	if !resp.head {
		return false
	}
	if charged {
		return true
	}
	if _, shadowed, _ := resp.shadowPrice(); shadowed {
		return true
	}
	return resp.status == http.StatusServiceUnavailable && resp.problem == problem.Type(problem.Timeout)
}

// refusal reports whether resp, a whole answer, refused the request
// before it ran: a 429 (its bucket could not pay), or a 503 of a request
// the server did not admit (admittedAnswer) — the budget shared by every
// caller spent (problem type temporary-reduced-capacity) or the rate
// limiter unavailable. An admitted request's 503 (its query timed out,
// the database unavailable) is not one: the server ran it.
// admitted is what admittedAnswer reported of it.
func refusal(resp response, admitted bool) bool {
	switch resp.status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return !admitted
	}
	return false
}

// retryAfter reads a Retry-After of delay seconds; anything else is 1 s.
func retryAfter(v string) time.Duration {
	s, err := strconv.Atoi(v)
	if err != nil || s < 0 {
		return time.Second
	}
	return time.Duration(s) * time.Second
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
