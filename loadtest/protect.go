package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// ProtectOptions configure RunProtect: an honest caller's paced traffic,
// alone and then beside an abuser flooding the server from many
// connections, once with the abuser's key in a tier the throttle limits
// and once with a key of a shadow tier (the throttle off for it).
type ProtectOptions struct {
	Client    *Client  // the server, and the honest caller's key
	Honest    []string // the honest caller's paths (tiles and geofence queries), sent in turn
	Rate      int      // honest requests per second, 1..MaxRate
	AbuserKey string   // the abuser's key, of a tier the throttle limits
	ShadowKey string   // the abuser's key in a shadow tier: priced, never refused
	Flood     []string // the abuser's paths (low-zoom tiles)
	Workers   int      // the abuser's connections, each one request at a time
	Phase     time.Duration
	// Warmup is honest traffic as in the phases, sent before the phase
	// alone and left out of every figure: the honest caller's first
	// connections, and the server's database backends' first tiles (a
	// fresh backend's first dense tile takes tens of times a warm one's),
	// are paid for there, not in the baseline. 0: DefaultWarmup;
	// negative: none.
	Warmup time.Duration
	// Timeout is each honest request's: one unanswered by then is cut and
	// failed (status 0). 0: DefaultHonestTimeout.
	Timeout time.Duration
}

const (
	// DefaultWarmup is the honest caller's warm-up before its phase alone
	// (ProtectOptions.Warmup, CrawlOptions.Warmup).
	DefaultWarmup = 2 * time.Second
	// DefaultHonestTimeout is each honest request's timeout, and what a
	// failed honest request counts as in the percentiles.
	DefaultHonestTimeout = 10 * time.Second
)

// ProtectPhase is what one phase measured.
type ProtectPhase struct {
	Name string
	// Honest is every honest request the phase sent, failed ones
	// included (Latencies).
	Honest Latencies
	PerSec []Latencies // the same, by the second of the phase each request was sent in
	Status map[int]int // the honest caller's, 0: transport errors and timeouts
	Abuser AbuserResult
	// Duration is the phase's own length, from its start until the
	// abuser stopped sending (Phase, unless the run was cancelled): the
	// span in which the abuser could be admitted. The honest answers
	// still due at its end are waited for after it.
	Duration time.Duration
}

// Latencies summarises the latencies of some requests: N counts every
// one sent and Failed those that did not get 200 or 204 (a refusal, an
// error, no answer within the timeout). A failed request counts in P50
// and P99 as the timeout, slower than any answered one — its caller got
// no tile — rather than being left out, which would make a server that
// refuses or stalls the honest caller look faster.
type Latencies struct {
	N, Failed int
	P50, P99  time.Duration
}

// Failed counts the honest requests that got neither 200 nor 204
// (transport errors and timeouts included).
func (p ProtectPhase) Failed() int { return failed(p.Status) }

// AbuserBound is what a token bucket of rate tokens a second and
// capacity, full at the phase's start, lets the abuser be charged in it:
// rate × Duration + capacity. Duration is the phase's own length, not
// the wait for the last honest answers after it, in which the abuser
// sent nothing.
func (p ProtectPhase) AbuserBound(rate, capacity float64) float64 {
	return rate*p.Duration.Seconds() + capacity
}

// AbuserResult is what the flood got.
type AbuserResult struct {
	Requests, Admitted int
	Status             map[int]int
	// Admitted counts the requests charged (Charged), answered or not;
	// Cost is what they were charged (X-Request-Cost): what the abuser's
	// bucket paid.
	Cost float64
	// Shadowed counts the requests a shadow tier admitted though the
	// bucket could not pay (ShadowAdmitted), answered or not, and
	// ShadowPrice sums the prices they were admitted at (X-Request-Cost).
	// Nothing was spent for them: neither Admitted nor Cost counts them.
	Shadowed    int
	ShadowPrice float64
}

// Phases of RunProtect, in order.
const (
	PhaseAlone    = "honest alone"
	PhaseThrottle = "with abuser, throttle on"
	PhaseShadow   = "with abuser, throttle off (shadow)"
)

// RunProtect runs the three phases one after another, each for Phase,
// after the honest caller's warm-up (Warmup), whose requests count
// nowhere.
func RunProtect(ctx context.Context, o ProtectOptions) ([]ProtectPhase, error) {
	if err := o.Client.check(); err != nil {
		return nil, err
	}
	if len(o.Honest) == 0 || len(o.Flood) == 0 || o.Workers < 1 || o.Rate < 1 || o.Rate > MaxRate || o.Phase < time.Second || o.Timeout < 0 {
		return nil, fmt.Errorf("protect: %d honest paths at %d/s, %d flood paths through %d connections, phases of %s, honest timeout %s",
			len(o.Honest), o.Rate, len(o.Flood), o.Workers, o.Phase, o.Timeout)
	}
	warmUp(ctx, o.Client, o.Honest, o.Rate, o.Warmup, o.Timeout)
	var out []ProtectPhase
	for _, ph := range []struct{ name, abuser string }{{PhaseAlone, ""}, {PhaseThrottle, o.AbuserKey}, {PhaseShadow, o.ShadowKey}} {
		p, err := o.phase(ctx, ph.name, ph.abuser)
		if err != nil {
			return out, fmt.Errorf("protect: %s: %w", ph.name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// phase runs the honest traffic for Phase, beside a flood with key abuser
// unless it is "".
func (o *ProtectOptions) phase(ctx context.Context, name, abuser string) (ProtectPhase, error) {
	ctx, cancel, length := timed(ctx, o.Phase)
	defer cancel()
	p := ProtectPhase{Name: name}
	var wg sync.WaitGroup
	var floodErr error
	if abuser != "" {
		wg.Go(func() { p.Abuser, floodErr = o.flood(ctx, abuser) })
	}
	samples, status := honest(ctx, o.Client, o.Honest, o.Rate, o.Timeout)
	wg.Wait()
	p.Duration = length()
	p.Status = status
	timeout := cmp.Or(o.Timeout, DefaultHonestTimeout)
	p.PerSec = make([]Latencies, max(1, int(o.Phase/time.Second)))
	for sec := range p.PerSec {
		var in []honestSample
		for _, s := range samples {
			// One sent as the phase ended is its last second's.
			if min(int(s.at/time.Second), len(p.PerSec)-1) == sec {
				in = append(in, s)
			}
		}
		p.PerSec[sec] = summariseHonest(in, timeout)
	}
	p.Honest = summariseHonest(samples, timeout)
	return p, floodErr
}

// timed is ctx cut after d, and a function answering, once ctx is done,
// how long it ran: from now until it was cut (by d, or by parent's end).
func timed(parent context.Context, d time.Duration) (context.Context, context.CancelFunc, func() time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, d)
	end := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() {
		t := time.Now()
		if dl, ok := ctx.Deadline(); ok && t.After(dl) {
			t = dl // the flood stops at the deadline (ended), not when its timer fires
		}
		end <- t
	})
	return ctx, cancel, sync.OnceValue(func() time.Duration { return (<-end).Sub(start) })
}

// warmUp sends the honest traffic for d (DefaultWarmup when 0, none when
// negative) and discards it.
func warmUp(ctx context.Context, c *Client, paths []string, rate int, d, timeout time.Duration) {
	if d = cmp.Or(d, DefaultWarmup); d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	honest(ctx, c, paths, rate, timeout)
}

// honestSample is one honest request: when it was sent (from the start
// of its phase), how long it took, and its status (0: no answer).
type honestSample struct {
	at, lat time.Duration
	code    int
}

func (s honestSample) ok() bool { return s.code == http.StatusOK || s.code == http.StatusNoContent }

// summariseHonest summarises every one of samples, a failed one at
// timeout (Latencies).
func summariseHonest(samples []honestSample, timeout time.Duration) Latencies {
	lat := make([]time.Duration, len(samples))
	failed := 0
	for i, s := range samples {
		lat[i] = s.lat
		if !s.ok() {
			lat[i] = timeout
			failed++
		}
	}
	l := summarise(lat)
	l.Failed = failed
	return l
}

// honest sends paths in turn at rate per second through c until ctx ends
// (an open loop: a slow answer does not delay the next request), and
// waits for the answers: every request, answered or not, is a sample. A
// request unanswered after timeout (DefaultHonestTimeout when 0) is cut
// and counted as a transport error.
func honest(ctx context.Context, c *Client, paths []string, rate int, timeout time.Duration) ([]honestSample, map[int]int) {
	var (
		mu      sync.Mutex
		samples []honestSample
		status  = map[int]int{}
		wg      sync.WaitGroup
	)
	timeout = cmp.Or(timeout, DefaultHonestTimeout)
	every := time.Second / time.Duration(rate)
	start := time.Now()
	end, bounded := ctx.Deadline()
	for i := 0; ; i++ {
		// On schedule, not by a ticker (which drops ticks when this
		// goroutine is late on a loaded machine): a late request goes at
		// once — but none scheduled at or after the phase's end, nor once
		// it ended (a late goroutine found the timer and the end ready at
		// once, and select picked either: 52 requests of a phase of 50).
		at := start.Add(time.Duration(i) * every)
		if bounded && !at.Before(end) {
			<-ctx.Done()
		}
		wait := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		if ctx.Err() != nil {
			wait.Stop()
			wg.Wait()
			return samples, status
		}
		path := paths[i%len(paths)]
		wg.Go(func() {
			// Its own timeout, not the phase's: a request sent at the
			// phase's end is waited for as long as one sent at its start.
			answer, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			t0 := time.Now()
			code := 0
			if resp, err := c.get(answer, path, false); err == nil {
				code = resp.StatusCode
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					code = 0 // the body cut short (by the timeout): no answer
				}
				resp.Body.Close()
			}
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			status[code]++
			samples = append(samples, honestSample{at: t0.Sub(start), lat: lat, code: code})
		})
	}
}

// flood asks for the flood paths through Workers connections with key
// until ctx ends, each connection one request at a time.
func (o *ProtectOptions) flood(ctx context.Context, key string) (AbuserResult, error) {
	results := make([]AbuserResult, o.Workers)
	errs := make([]error, o.Workers)
	// Every connection before any worker: one that fails leaves no
	// worker flooding on unseen.
	conns := make([]*conn, o.Workers)
	for w := range conns {
		cn, err := newConn(o.Client.BaseURL, "X-API-Key: "+key)
		if err != nil {
			for _, c := range conns[:w] {
				c.Close()
			}
			return AbuserResult{}, err
		}
		conns[w] = cn
	}
	var wg sync.WaitGroup
	for w, cn := range conns {
		wg.Go(func() {
			defer cn.Close()
			r := AbuserResult{Status: map[int]int{}}
			for i := w; !ended(ctx); i += o.Workers {
				resp, err := cn.get(ctx, o.Flood[i%len(o.Flood)], chargeHeaders...)
				cost, charged, cerr := resp.charge()
				price, shadowed, serr := resp.shadowPrice()
				if err != nil && ended(ctx) && !charged && !shadowed {
					break // cut by the phase's end before the server said anything
				}
				r.Requests++
				switch {
				case charged:
					r.Admitted++
					if cerr != nil {
						errs[w] = fmt.Errorf("an admitted flood request: %w", cerr)
					}
					r.Cost += cost
				case shadowed:
					r.Shadowed++
					if serr != nil {
						errs[w] = fmt.Errorf("a flood request admitted in shadow: %w", serr)
					}
					r.ShadowPrice += price
				}
				if err != nil { // no whole answer (status 0)
					r.Status[0]++
					pause(ctx, errorPause) // a refused connection: do not spin
					continue
				}
				r.Status[resp.status]++
			}
			results[w] = r
		})
	}
	wg.Wait()
	out := AbuserResult{Status: map[int]int{}}
	for _, r := range results {
		out.Requests += r.Requests
		out.Admitted += r.Admitted
		out.Cost += r.Cost
		out.Shadowed += r.Shadowed
		out.ShadowPrice += r.ShadowPrice
		for c, n := range r.Status {
			out.Status[c] += n
		}
	}
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// summarise sorts lat and returns its count and its nearest-rank P50 and
// P99 (percentile).
func summarise(lat []time.Duration) Latencies {
	if len(lat) == 0 {
		return Latencies{}
	}
	slices.Sort(lat)
	return Latencies{N: len(lat), P50: percentile(lat, 50), P99: percentile(lat, 99)}
}

// percentile is the pct-th percentile (0 < pct ≤ 100) of sorted, by
// nearest rank: the smallest value at least pct % of sorted are at or
// below, the one of rank ⌈pct·n/100⌉ (index ⌈pct·n/100⌉ − 1). Of 100
// values P99 is the 99th, not the largest; of one, every percentile is
// that one. Zero when sorted is empty.
func percentile(sorted []time.Duration, pct int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := (n*pct + 99) / 100 // ⌈n·pct/100⌉ in integers: no rounding of 0.99·n
	return sorted[min(max(rank, 1), n)-1]
}
