package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
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
}

// ProtectPhase is what one phase measured.
type ProtectPhase struct {
	Name     string
	Honest   Latencies // every honest request
	PerSec   []Latencies
	Status   map[int]int // the honest caller's, 0: transport errors
	Abuser   AbuserResult
	Duration time.Duration
}

// Latencies summarises the latencies of some requests.
type Latencies struct {
	N        int
	P50, P99 time.Duration
}

// AbuserResult is what the flood got.
type AbuserResult struct {
	Requests, Admitted int
	Status             map[int]int
	// Cost is what the admitted requests were charged (X-Request-Cost).
	Cost float64
}

// Phases of RunProtect, in order.
const (
	PhaseAlone    = "honest alone"
	PhaseThrottle = "with abuser, throttle on"
	PhaseShadow   = "with abuser, throttle off (shadow)"
)

// RunProtect runs the three phases one after another, each for Phase.
func RunProtect(ctx context.Context, o ProtectOptions) ([]ProtectPhase, error) {
	if err := o.Client.check(); err != nil {
		return nil, err
	}
	if len(o.Honest) == 0 || len(o.Flood) == 0 || o.Workers < 1 || o.Rate < 1 || o.Rate > MaxRate || o.Phase < time.Second {
		return nil, fmt.Errorf("protect: %d honest paths at %d/s, %d flood paths through %d connections, phases of %s",
			len(o.Honest), o.Rate, len(o.Flood), o.Workers, o.Phase)
	}
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
	ctx, cancel := context.WithTimeout(ctx, o.Phase)
	defer cancel()
	p := ProtectPhase{Name: name}
	var wg sync.WaitGroup
	var floodErr error
	if abuser != "" {
		wg.Go(func() { p.Abuser, floodErr = o.flood(ctx, abuser) })
	}
	start := time.Now()
	samples, status := honest(ctx, o.Client, o.Honest, o.Rate)
	p.Duration = time.Since(start)
	wg.Wait()
	p.Status = status
	var all []time.Duration
	p.PerSec = make([]Latencies, max(1, int(o.Phase/time.Second)))
	for _, s := range samples {
		all = append(all, s.lat)
	}
	for sec := range p.PerSec {
		var lat []time.Duration
		for _, s := range samples {
			if int(s.at/time.Second) == sec {
				lat = append(lat, s.lat)
			}
		}
		p.PerSec[sec] = summarise(lat)
	}
	p.Honest = summarise(all)
	return p, floodErr
}

type honestSample struct{ at, lat time.Duration }

// honest sends paths in turn at rate per second through c until ctx ends
// (an open loop: a slow answer does not delay the next request), and
// waits for the answers. A request still unanswered 10 s after its phase
// is cut and counted as a transport error.
func honest(ctx context.Context, c *Client, paths []string, rate int) ([]honestSample, map[int]int) {
	var (
		mu      sync.Mutex
		samples []honestSample
		status  = map[int]int{}
		wg      sync.WaitGroup
	)
	answers, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(10*time.Second, cancel) })
	defer stop()
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; ; i++ {
		// On schedule, not by a ticker (which drops ticks when this
		// goroutine is late on a loaded machine): a late request goes at
		// once.
		wait := time.NewTimer(time.Until(start.Add(time.Duration(i) * every)))
		select {
		case <-ctx.Done():
			wait.Stop()
			wg.Wait()
			return samples, status
		case <-wait.C:
		}
		path := paths[i%len(paths)]
		wg.Go(func() {
			t0 := time.Now()
			code := 0
			if resp, err := c.get(answers, path, false); err == nil {
				code = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			status[code]++
			if code == http.StatusOK || code == http.StatusNoContent {
				samples = append(samples, honestSample{at: t0.Sub(start), lat: lat})
			}
		})
	}
}

// flood asks for the flood paths through Workers connections with key
// until ctx ends, each connection one request at a time.
func (o *ProtectOptions) flood(ctx context.Context, key string) (AbuserResult, error) {
	results := make([]AbuserResult, o.Workers)
	errs := make([]error, o.Workers)
	var wg sync.WaitGroup
	for w := range o.Workers {
		cn, err := newConn(o.Client.BaseURL, "X-API-Key: "+key)
		if err != nil {
			return AbuserResult{}, err
		}
		wg.Go(func() {
			defer cn.Close()
			r := AbuserResult{Status: map[int]int{}}
			for i := w; !ended(ctx); i += o.Workers {
				resp, err := cn.get(ctx, o.Flood[i%len(o.Flood)], "X-Request-Cost")
				if err != nil && ended(ctx) {
					break
				}
				r.Requests++
				r.Status[resp.status]++
				if resp.status == http.StatusOK || resp.status == http.StatusNoContent {
					r.Admitted++
					cost, err := strconv.ParseFloat(resp.headers["X-Request-Cost"], 64)
					if err != nil {
						errs[w] = fmt.Errorf("an admitted flood request without X-Request-Cost: %q", resp.headers["X-Request-Cost"])
					}
					r.Cost += cost
				}
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

func summarise(lat []time.Duration) Latencies {
	if len(lat) == 0 {
		return Latencies{}
	}
	slices.Sort(lat)
	return Latencies{N: len(lat), P50: lat[len(lat)/2], P99: lat[min(len(lat)-1, len(lat)*99/100)]}
}
