// Package loadtest is the harness behind `geotoll loadtest`: it sends a
// bounded, paced load of tile or geofence requests (vegeta) at a running
// geotoll and reports throughput, latency percentiles, status codes, the
// tokens the server charged (X-Request-Cost) and cache hits (X-Cache).
//
// Target lists are deterministic and come from the demo data's cities, so a
// run against `make run` is comparable with another run against the same
// data. Targets must be on loopback unless Options.AllowRemote is set: a
// load test is aimed on purpose, never by accident.
//
// The package also holds the measuring instruments behind `geotoll loadtest
// fidelity|zooms|ceiling`, which any build of the server can be measured
// with: [RunFidelity] ranks sampled tiles' prices ([SampleTiles]) against
// their database time ([Spearman], ties averaged) as a [TileTimer] (the
// layer's SQL) or a [ServerTimer] (the server's own statements) measures
// it; [RunZooms] tabulates bytes, features and database time per zoom; and
// [RunCeiling] runs the densest tiles ([CeilingLists]) through pgbench with
// the layer's own query ([PgbenchScript]) and through the server
// ([Client.Loop]), for tiles per second as a share of the database's.
// [RunProtect] measures an honest caller's latency alone and beside an
// abuser's flood, throttled and in shadow mode ([WriteProtectTable],
// [WriteProtectSVG]); [RunCrawl], behind `geotoll loadtest crawl`, an
// honest key's latency alone and beside anonymous crawlers, each from its
// own loopback address.
//
// For users who prefer k6, the k6/ folder holds equivalent scripts (k6 is
// AGPL; geotoll ships scripts for it, and does not link it).
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/tiles"
)

// Profiles name the target lists.
var Profiles = []string{"z14", "z8-10", "z0-3", "within", "healthz"}

// Options bound one run.
type Options struct {
	BaseURL  string        // e.g. http://127.0.0.1:8080
	Profile  string        // one of Profiles, default "z14"
	Layer    string        // tile layer, default "places"
	Rate     int           // requests per second, 1..5000
	Duration time.Duration // 1s..10m
	Key      string        // API key sent as X-API-Key ("" = anonymous)
	// AllowRemote permits a non-loopback BaseURL.
	AllowRemote bool
	Timeout     time.Duration // per request, default 10 s
}

// Limits of a run.
const (
	MaxRate     = 5000
	MaxDuration = 10 * time.Minute
	// MaxWorkers bounds the requests a run keeps in flight at once (see
	// attackWorkers).
	MaxWorkers = 10000
	// MinSentShare is the least share of the asked rate a run must send
	// before its report warns that the load generator fell behind.
	MinSentShare = 0.95
)

// attackWorkers is how many requests a run of rate requests a second may
// keep in flight: enough for every request of timeout's span to be
// outstanding at once, so that a slow server never holds the next request
// back (vegeta waits for a free worker once it has MaxWorkers of them
// busy, and its fixed rate becomes a closed loop that under-reports
// latency), and at most MaxWorkers.
func attackWorkers(rate int, timeout time.Duration) uint64 {
	n := math.Ceil(float64(rate) * timeout.Seconds())
	return uint64(max(1, min(n, MaxWorkers)))
}

// rateShortfall reports whether a run that sent requests at sent per
// second fell below MinSentShare of the rate asked for. A run of one
// request has no rate to judge.
func rateShortfall(asked int, sent float64, requests uint64) bool {
	return requests > 1 && sent < MinSentShare*float64(asked)
}

// Validate checks o as Run does before it sends anything. Its errors name
// the options by the flags of `geotoll loadtest`.
func (o Options) Validate() error { return o.validate() }

func (o *Options) validate() error {
	if o.Profile == "" {
		o.Profile = "z14"
	}
	if o.Layer == "" {
		o.Layer = "places"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	var errs []error
	if o.Rate < 1 || o.Rate > MaxRate {
		errs = append(errs, fmt.Errorf("-rate %d must be within 1..%d", o.Rate, MaxRate))
	}
	if o.Duration < time.Second || o.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("-duration %s must be within 1s..%s", o.Duration, MaxDuration))
	}
	if _, err := Paths(o.Profile, o.Layer); err != nil {
		errs = append(errs, fmt.Errorf("-profile %q, -layer %q: %w", o.Profile, o.Layer, err))
	}
	u, err := parseBase(o.BaseURL)
	if err != nil {
		errs = append(errs, fmt.Errorf("-%w", err))
	} else if !o.AllowRemote && !isLoopback(u.Hostname()) {
		errs = append(errs, fmt.Errorf("-url host %q is not loopback; pass -allow-remote to load test another machine", u.Hostname()))
	}
	return errors.Join(errs...)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// layerList is a layer's name as the server's routes take it, or a
// composite: names joined by commas.
var layerList = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64})*$`)

// Paths returns the request paths of a profile, in a fixed order, for
// layer: a layer's name or, with a tile profile, a composite of them (a
// text of any other kind would be sent as part of the path; a composite
// of anything but tiles, which alone have them, asked for a 404 each
// time).
func Paths(profile, layer string) ([]string, error) {
	if !layerList.MatchString(layer) {
		return nil, fmt.Errorf("layer %q is not a layer's name (letters, digits, _ and -, up to 64) nor a comma-separated list of them", layer)
	}
	names := strings.Split(layer, ",")
	if len(names) > tiles.MaxComposite {
		return nil, fmt.Errorf("layer %q names %d layers: a composite holds at most %d", layer, len(names), tiles.MaxComposite)
	}
	for i, name := range names {
		if slices.Contains(names[:i], name) {
			return nil, fmt.Errorf("layer %q names %q twice", layer, name)
		}
	}
	if len(names) > 1 && (profile == "within" || profile == "healthz") {
		return nil, fmt.Errorf("layer %q is a composite, which only tiles have: profile %s asks for no tile (the tile profiles are z14, z8-10 and z0-3)", layer, profile)
	}
	tile := func(t maptile.Tile) string {
		return fmt.Sprintf("/tiles/%s/%d/%d/%d.mvt", layer, t.Z, t.X, t.Y)
	}
	var out []string
	switch profile {
	case "z14":
		// 3×3 dense tiles around every city centre.
		for _, c := range demo.Cities {
			centre := maptile.At(orb.Point{c.Lon, c.Lat}, 14)
			for dx := -1; dx <= 1; dx++ {
				for dy := -1; dy <= 1; dy++ {
					out = append(out, tile(maptile.New(centre.X+uint32(dx), centre.Y+uint32(dy), 14)))
				}
			}
		}
	case "z8-10":
		for _, c := range demo.Cities {
			for z := maptile.Zoom(8); z <= 10; z++ {
				out = append(out, tile(maptile.At(orb.Point{c.Lon, c.Lat}, z)))
			}
		}
	case "z0-3":
		for z := maptile.Zoom(0); z <= 3; z++ {
			n := uint32(1) << z
			for x := uint32(0); x < n; x++ {
				for y := uint32(0); y < n; y++ {
					out = append(out, tile(maptile.New(x, y, z)))
				}
			}
		}
	case "within":
		for _, c := range demo.Cities {
			for _, r := range []int{10, 500, 5000} {
				out = append(out, fmt.Sprintf("/geofence/within?layer=%s&lng=%g&lat=%g&radius=%d&limit=50", layer, c.Lon, c.Lat, r))
			}
		}
	case "healthz":
		out = append(out, "/healthz")
	default:
		return nil, fmt.Errorf("unknown profile %q (one of %s)", profile, strings.Join(Profiles, ", "))
	}
	return out, nil
}

// Report is the outcome of one run.
type Report struct {
	Profile     string
	Asked       int // requests per second asked for (Options.Rate)
	Requests    uint64
	Duration    time.Duration
	Rate        float64 // requests sent per second
	Succeeded   uint64  // successes: 2xx and 304 answers (see Success)
	Throughput  float64 // successes per second
	StatusCodes map[string]int
	// P50 … Max are the latencies of the successes: a refusal is answered
	// at once and a request cut at its timeout late, and neither is a tile
	// or a query served. Zero when nothing succeeded.
	P50, P95 time.Duration
	P99, Max time.Duration
	// All is the latencies of every request, the failed and refused ones
	// too.
	All             LatencySummary
	Tokens          float64 // sum of X-Request-Cost over the charged responses (see Charged)
	ChargedRequests int     // the charged responses
	// ShadowAdmitted counts the answers a shadow tier admitted though the
	// bucket could not pay (ShadowAdmitted), and ShadowTokens sums the
	// prices they were admitted at: nothing was spent for them, and
	// Tokens leaves them out.
	ShadowAdmitted int
	ShadowTokens   float64
	CacheHits      int
	Errors         []string
}

// LatencySummary is percentiles of a run's request latencies.
type LatencySummary struct{ P50, P95, P99, Max time.Duration }

// summarize is l's percentiles, of n latencies (none: zeros).
func summarize(l *vegeta.LatencyMetrics, n uint64) LatencySummary {
	if n == 0 {
		return LatencySummary{}
	}
	return LatencySummary{P50: l.Quantile(0.50), P95: l.Quantile(0.95), P99: l.Quantile(0.99), Max: l.Max}
}

// Success reports whether an answer of status code is a success of the
// load test: a 2xx, or a 304 (the tile not modified). Refusals, errors,
// redirects (not followed) and no answer (0) are not.
func Success(code int) bool {
	return (code >= 200 && code < 300) || code == http.StatusNotModified
}

// Run attacks the server and returns the report. It stops at Duration or
// when ctx ends, whichever is first.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	paths, err := Paths(o.Profile, o.Layer)
	if err != nil {
		return Report{}, err
	}
	hdr := http.Header{}
	if o.Key != "" {
		hdr.Set("X-API-Key", o.Key)
	}
	hdr.Set("Accept-Encoding", "gzip")
	base := strings.TrimRight(o.BaseURL, "/")
	targets := make([]vegeta.Target, len(paths))
	for i, p := range paths {
		targets[i] = vegeta.Target{Method: http.MethodGet, URL: base + p, Header: hdr}
	}
	// Redirects are not followed: one could aim the load at a host -url
	// could not name (a 3xx is counted as the answer it is).
	atk := vegeta.NewAttacker(vegeta.Timeout(o.Timeout), vegeta.MaxWorkers(attackWorkers(o.Rate, o.Timeout)),
		vegeta.KeepAlive(true), vegeta.Redirects(vegeta.NoFollow))
	rate := vegeta.Rate{Freq: o.Rate, Per: time.Second}
	var (
		m    vegeta.Metrics
		succ vegeta.LatencyMetrics // of the successes
	)
	rep := Report{Profile: o.Profile, Asked: o.Rate}
	results := atk.Attack(vegeta.NewStaticTargeter(targets...), rate, o.Duration, "geotoll-"+o.Profile)
	done := ctx.Done()
loop:
	for {
		select {
		case r, ok := <-results:
			if !ok {
				break loop
			}
			m.Add(r)
			if Success(int(r.Code)) {
				rep.Succeeded++
				succ.Add(r.Latency)
			}
			c, err := strconv.ParseFloat(r.Headers.Get("X-Request-Cost"), 64)
			switch shadow := r.Headers.Get("X-RateLimit-Shadow"); {
			case ShadowAdmitted(int(r.Code), shadow):
				rep.ShadowAdmitted++
				if err == nil {
					rep.ShadowTokens += c
				}
			case err == nil && Charged(int(r.Code), r.Headers.Get("X-Request-Cost-Estimate"), shadow):
				rep.Tokens += c
				rep.ChargedRequests++
			}
			if r.Headers.Get("X-Cache") == "HIT" {
				rep.CacheHits++
			}
		case <-done:
			atk.Stop()
			done = nil
		}
	}
	m.Close()
	rep.Requests = m.Requests
	// The time the requests were sent over, one interval a request:
	// vegeta's Duration runs from the first to the last, n − 1 intervals,
	// which made a short run's rates look high (one request at 1/s: "in
	// 0s", 135/s succeeded).
	rep.Duration = m.Duration + time.Second/time.Duration(o.Rate)
	rep.Rate = float64(m.Requests) / rep.Duration.Seconds()
	rep.Throughput = float64(rep.Succeeded) / (rep.Duration + m.Wait).Seconds()
	rep.StatusCodes = m.StatusCodes
	s := summarize(&succ, rep.Succeeded)
	rep.P50, rep.P95, rep.P99, rep.Max = s.P50, s.P95, s.P99, s.Max
	rep.All = summarize(&m.Latencies, m.Requests)
	rep.Errors = m.Errors
	return rep, nil
}

// Behind reports whether the run sent less than MinSentShare of the rate
// asked for: the load generator fell behind (every one of MaxWorkers
// requests in flight, or a saturated host), and its latencies leave out
// the time the requests it did not send would have waited.
func (r Report) Behind() bool { return rateShortfall(r.Asked, r.Rate, r.Requests) }

// WriteText prints the report for people.
func (r Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "profile      %s\n", r.Profile)
	fmt.Fprintf(w, "requests     %d in %s (%.1f/s sent, %.1f/s succeeded)\n", r.Requests, r.Duration.Round(time.Millisecond), r.Rate, r.Throughput)
	if r.Behind() {
		fmt.Fprintf(w, "warning      sent %.1f/s of the %d/s asked for (under %.0f %%): the load generator fell behind, "+
			"so the latencies below understate what callers at that rate would see\n", r.Rate, r.Asked, 100*MinSentShare)
	}
	codes := make([]string, 0, len(r.StatusCodes))
	for c := range r.StatusCodes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	fmt.Fprint(w, "status      ")
	for _, c := range codes {
		fmt.Fprintf(w, " %s×%d", c, r.StatusCodes[c])
	}
	fmt.Fprintln(w)
	if r.Succeeded == 0 {
		fmt.Fprintf(w, "latency      none: no request succeeded (2xx, 304)\n")
	} else {
		fmt.Fprintf(w, "latency      p50 %s  p95 %s  p99 %s  max %s  of the %d successes (2xx, 304)\n",
			r.P50.Round(time.Microsecond), r.P95.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Succeeded)
	}
	if r.Succeeded < r.Requests {
		fmt.Fprintf(w, "all latency  p50 %s  p95 %s  p99 %s  max %s  of all %d requests, refused and failed ones too\n",
			r.All.P50.Round(time.Microsecond), r.All.P95.Round(time.Microsecond), r.All.P99.Round(time.Microsecond), r.All.Max.Round(time.Microsecond), r.Requests)
	}
	fmt.Fprintf(w, "tokens       %.1f charged to %d requests (%.3f per charged request)\n", r.Tokens, r.ChargedRequests, r.Tokens/math.Max(1, float64(r.ChargedRequests)))
	if r.ShadowAdmitted > 0 {
		fmt.Fprintf(w, "shadow       %d admitted unpaid (X-RateLimit-Shadow: %s), priced %.1f tokens in all, not charged\n",
			r.ShadowAdmitted, ShadowWouldRefuse, r.ShadowTokens)
	}
	fmt.Fprintf(w, "cache hits   %d\n", r.CacheHits)
	for i, e := range r.Errors {
		if i == 5 {
			fmt.Fprintf(w, "errors       … %d more\n", len(r.Errors)-5)
			break
		}
		fmt.Fprintf(w, "error        %s\n", e)
	}
}

// Charged reports whether an answer of status code, with estimate its
// X-Request-Cost-Estimate header and shadow its X-RateLimit-Shadow header
// ("" when absent), was charged its X-Request-Cost: every answer below
// 400, and an admitted request that failed — any answer carrying the
// price it paid at the door, such as a 503 cut at its deadline (charged
// what ran) or a 4xx its handler gave after admission. A refusal (429,
// 422, 401…) carries the price it was refused at in X-Request-Cost and no
// estimate: nothing was charged; nor was a 5xx without one (the server
// refused before admitting it, its budget store unreachable); nor was an
// answer admitted in shadow (ShadowAdmitted), whatever its status.
func Charged(code int, estimate, shadow string) bool {
	if code <= 0 || ShadowAdmitted(code, shadow) {
		return false
	}
	return code < 400 || estimate != ""
}

// ShadowWouldRefuse is the X-RateLimit-Shadow of an answer a shadow tier
// admitted though its bucket could not pay.
const ShadowWouldRefuse = "would-refuse"

// ShadowAdmitted reports whether an answer of status code, with shadow
// its X-RateLimit-Shadow header ("" when absent), is of a request a
// shadow tier admitted though its bucket could not pay its price: the
// request ran, its X-Request-Cost is the price it was admitted at, and
// nothing was spent for it (it carries no X-Request-Cost-Estimate).
func ShadowAdmitted(code int, shadow string) bool {
	return code > 0 && strings.EqualFold(strings.TrimSpace(shadow), ShadowWouldRefuse)
}
