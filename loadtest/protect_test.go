package loadtest

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// RunProtect against a stand-in server: honest requests are answered,
// the throttled abuser's key gets 3 admitted requests at 2.5 tokens — the
// third cut at its deadline, a 503 charged what ran — and then 429s (their
// X-Request-Cost the price refused, not charged), the shadow key is
// always admitted: 5 requests its bucket pays for, then admitted unpaid
// (X-RateLimit-Shadow: would-refuse). Each phase reports what its side
// sent and got, and the honest rate is kept.
func TestRunProtect(t *testing.T) {
	var throttled, shadowed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-API-Key") {
		case "honest":
			w.WriteHeader(http.StatusOK)
		case "abuser":
			switch n := throttled.Add(1); {
			case n > 3:
				w.Header().Set("Retry-After", "1")
				w.Header().Set("X-Request-Cost", "4")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			case n == 3:
				w.Header().Set("X-Request-Cost-Estimate", "1")
				w.Header().Set("X-Request-Cost", "2.5")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("X-Request-Cost", "2.5")
			_, _ = w.Write([]byte("tile"))
		case "shadow":
			w.Header().Set("X-Request-Cost", "1")
			if shadowed.Add(1) <= 5 { // its bucket pays
				w.Header().Set("X-Request-Cost-Estimate", "1")
			} else { // admitted unpaid
				w.Header().Set("X-RateLimit-Shadow", "would-refuse")
			}
			time.Sleep(time.Millisecond)
			_, _ = w.Write([]byte("tile"))
		default:
			t.Errorf("key %q", r.Header.Get("X-API-Key"))
		}
	}))
	defer srv.Close()
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a", "/b"}, Rate: 50,
		AbuserKey: "abuser", ShadowKey: "shadow", Flood: []string{"/z0"}, Workers: 4, Phase: time.Second}
	phases, err := RunProtect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(phases) != 3 || phases[0].Name != PhaseAlone || phases[1].Name != PhaseThrottle || phases[2].Name != PhaseShadow {
		t.Fatalf("phases %+v", phases)
	}
	for _, p := range phases {
		// 50 a second for one second; a late sender catches up, but a
		// machine stalled for half the phase would lose the rest.
		if p.Honest.N < 25 || p.Honest.N > 51 || p.Status[200] != p.Honest.N || len(p.PerSec) == 0 || p.Honest.P99 < p.Honest.P50 {
			t.Errorf("%s: honest %+v, status %v, %d seconds", p.Name, p.Honest, p.Status, len(p.PerSec))
		}
	}
	if a := phases[0].Abuser; a.Requests != 0 {
		t.Errorf("an abuser while the honest caller is alone: %+v", a)
	}
	if a := phases[1].Abuser; a.Admitted != 3 || a.Cost != 7.5 || a.Status[429] != a.Requests-3 || a.Requests < 10 {
		t.Errorf("throttled abuser %+v", a)
	}
	if a := phases[1].Abuser; a.Shadowed != 0 || a.ShadowPrice != 0 {
		t.Errorf("throttled abuser admitted in shadow: %+v", a)
	}
	shadow := phases[2].Abuser
	if shadow.Admitted != 5 || shadow.Cost != 5 || shadow.Shadowed != shadow.Requests-5 || shadow.ShadowPrice != float64(shadow.Shadowed) ||
		shadow.Status[200] != shadow.Requests || shadow.Requests < 10 {
		t.Errorf("shadow abuser %+v, want 5 charged 1 token each, the rest admitted unpaid", shadow)
	}
	var table strings.Builder
	WriteProtectTable(&table, phases)
	if rows := strings.Count(table.String(), "\n"); rows != 5 || !strings.Contains(table.String(), "| with abuser, throttle on |") ||
		!strings.Contains(table.String(), "| abuser admitted and charged | abuser charged (tokens) | abuser admitted unpaid (shadow) |") {
		t.Errorf("table:\n%s", table.String())
	}
	if want := fmt.Sprintf("| %d | 5 | 5.0 | %d | %.1f |\n", shadow.Requests, shadow.Shadowed, shadow.ShadowPrice); !strings.HasSuffix(table.String(), want) {
		t.Errorf("shadow row of\n%s\nwant it to end %q", table.String(), want)
	}
	var svg strings.Builder
	if err := WriteProtectSVG(&svg, phases); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(svg.String(), "<polyline"); n != 2 {
		t.Errorf("%d lines plotted, want p50 and p99", n)
	}
	dec := xml.NewDecoder(strings.NewReader(svg.String()))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
	}
}

func TestRunProtectRefusesRemoteAndEmptyRuns(t *testing.T) {
	for _, o := range []ProtectOptions{
		{Client: &Client{BaseURL: "http://192.0.2.1:8080"}, Honest: []string{"/a"}, Rate: 1, Flood: []string{"/z"}, Workers: 1, Phase: time.Second},
		{Client: &Client{BaseURL: "http://127.0.0.1:1"}, Rate: 1, Flood: []string{"/z"}, Workers: 1, Phase: time.Second},
		{Client: &Client{BaseURL: "http://127.0.0.1:1"}, Honest: []string{"/a"}, Rate: 0, Flood: []string{"/z"}, Workers: 1, Phase: time.Second},
	} {
		if _, err := RunProtect(context.Background(), o); err == nil {
			t.Errorf("RunProtect(%+v) ran", o)
		}
	}
}

func TestLogScaleTicks(t *testing.T) {
	s := newLogScale(1.7, 240)
	ticks := s.ticks()
	if ticks[0] != 1 || ticks[len(ticks)-1] != 1000 {
		t.Fatalf("ticks %v, want 1 ms … 1000 ms", ticks)
	}
	if s.y(1) != float64(plotH-plotBottom) || s.y(1000) != float64(plotTop) || s.y(10) >= s.y(5) {
		t.Fatalf("y(1) %g, y(5) %g, y(10) %g, y(1000) %g", s.y(1), s.y(5), s.y(10), s.y(1000))
	}
}

// The abuser's bound is its bucket's over the phase's own length: a
// phase of 10 s that waited 4 s more for its last honest answers allows
// 20 × 10 + 100 tokens, not 20 × 14 + 100.
func TestProtectAbuserBound(t *testing.T) {
	p := ProtectPhase{Duration: 10 * time.Second}
	if got := p.AbuserBound(20, 100); got != 300 {
		t.Errorf("AbuserBound(20/s, 100) over 10 s = %g, want 300", got)
	}
	if got := (ProtectPhase{Duration: 1500 * time.Millisecond}).AbuserBound(2, 5); got != 8 {
		t.Errorf("AbuserBound(2/s, 5) over 1.5 s = %g, want 8", got)
	}
}

// summariseHonest counts every request, a failed one (refused, or no
// answer) at the timeout: slower than any answered one, whatever its own
// latency.
func TestSummariseHonest(t *testing.T) {
	ms := time.Millisecond
	var samples []honestSample
	for i := range 95 {
		samples = append(samples, honestSample{lat: time.Duration(1+i%5) * ms, code: http.StatusOK})
	}
	samples = append(samples, honestSample{lat: 2 * ms, code: http.StatusNoContent},
		honestSample{lat: ms, code: http.StatusTooManyRequests}, // refused at once
		honestSample{lat: 3 * ms, code: http.StatusServiceUnavailable},
		honestSample{lat: 10 * time.Second, code: 0}, // cut at the timeout
		honestSample{lat: 40 * ms, code: http.StatusNotFound})
	l := summariseHonest(samples, 10*time.Second)
	if l.N != 100 || l.Failed != 4 || l.P50 != 3*ms || l.P99 != 10*time.Second {
		t.Errorf("summariseHonest = %+v, want 100 requests, 4 failed, p50 3 ms, p99 the timeout (10 s)", l)
	}
	if l := summariseHonest(samples[:95], 10*time.Second); l.N != 95 || l.Failed != 0 || l.P99 != 5*ms {
		t.Errorf("summariseHonest of the answered ones = %+v", l)
	}
	if l := summariseHonest(nil, time.Second); l != (Latencies{}) {
		t.Errorf("summariseHonest(nil) = %+v", l)
	}
}

// An honest request unanswered within Timeout is cut, counted as a
// transport error (status 0) and, in the percentiles, at Timeout.
func TestRunProtectHonestTimeout(t *testing.T) {
	var honest atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "honest" && honest.Add(1)%10 == 0 {
			select { // hangs until the client gives up
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Header().Set("X-Request-Cost", "1")
		_, _ = w.Write([]byte("tile"))
	}))
	defer srv.Close()
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		AbuserKey: "abuser", ShadowKey: "shadow", Flood: []string{"/z0"}, Workers: 1, Phase: time.Second,
		Warmup: -1, Timeout: 300 * time.Millisecond}
	start := time.Now()
	phases, err := RunProtect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// No warm-up; each phase waits at most 300 ms for its answers (a
	// generous bound: the machine may be busy).
	if took := time.Since(start); took > 3*(o.Phase+o.Timeout)+10*time.Second {
		t.Errorf("RunProtect took %s", took)
	}
	for _, p := range phases {
		if p.Status[0] < 3 || p.Honest.Failed != p.Failed() || p.Honest.Failed != p.Status[0] || p.Honest.P99 != o.Timeout {
			t.Errorf("%s: honest %+v, status %v; want one in ten cut, p99 at the timeout", p.Name, p.Honest, p.Status)
		}
	}
	o.Timeout = -time.Second
	if _, err := RunProtect(context.Background(), o); err == nil {
		t.Errorf("RunProtect ran with a negative timeout")
	}
}

// A flood against an address where nothing listens counts its failed
// requests as status 0 and pauses after each, as the crawlers do: it does
// not spin through thousands of refused dials a second.
func TestFloodPausesAfterATransportError(t *testing.T) {
	o := ProtectOptions{Client: &Client{BaseURL: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))}, // nothing listens
		Flood: []string{"/z0"}, Workers: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r, err := o.flood(ctx, "abuser")
	if err != nil {
		t.Fatal(err)
	}
	// 2 workers, 0.5 s, a 10 ms pause after each failure: at most ~100.
	if r.Requests == 0 || r.Status[0] != r.Requests || r.Requests > 150 {
		t.Errorf("flood of a closed port: %+v, want every request a status 0, at most ~100 in 0.5 s", r)
	}
}

// An answer whose head says it was charged counts in the abuser's charge
// even when its body is cut short (a write timeout, a reset): the server
// charged it. It is no whole answer: status 0.
func TestFloodCountsTheChargeOfACutAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		c, buf, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Request-Cost: 2\r\nX-Request-Cost-Estimate: 1\r\n\r\nabc")
		_ = buf.Flush()
	}))
	defer srv.Close()
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL}, Flood: []string{"/z0"}, Workers: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := o.flood(ctx, "abuser")
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 || r.Status[0] != r.Requests || r.Admitted != r.Requests || r.Cost != 2*float64(r.Requests) {
		t.Errorf("cut answers: %+v, want each a status 0, admitted and charged 2", r)
	}
}

// In shadow mode a request its bucket cannot pay is admitted and answered
// (X-RateLimit-Shadow: would-refuse, X-Request-Cost the price at the door,
// no X-Request-Cost-Estimate) and spends nothing: the flood's charge is
// what its bucket paid for alone, the shadow admissions counted apart.
func TestFloodChargesNothingForShadowAdmissions(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Cost", "2")
		if n.Add(1) <= 3 {
			w.Header().Set("X-Request-Cost-Estimate", "2")
		} else {
			w.Header().Set("X-RateLimit-Shadow", "would-refuse")
		}
		_, _ = w.Write([]byte("tile"))
	}))
	defer srv.Close()
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL}, Flood: []string{"/z0"}, Workers: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := o.flood(ctx, "shadow")
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests < 10 || r.Status[200] != r.Requests || r.Admitted != 3 || r.Cost != 6 ||
		r.Shadowed != r.Requests-3 || r.ShadowPrice != 2*float64(r.Shadowed) {
		t.Errorf("shadow flood %+v, want 3 charged 2 tokens each, the rest admitted unpaid at a price of 2", r)
	}
}

// Percentiles are nearest-rank: P50 and P99 of 1..100 ms are 50 and 99 ms.
func TestSummariseNearestRank(t *testing.T) {
	ms := time.Millisecond
	var lat []time.Duration
	for i := range 100 {
		lat = append(lat, time.Duration(100-i)*ms)
	}
	if l := summarise(lat); l.N != 100 || l.P50 != 50*ms || l.P99 != 99*ms {
		t.Errorf("summarise(1..100 ms) = %+v, want p50 50 ms, p99 99 ms", l)
	}
}

// percentile is nearest-rank: the value of rank ⌈p·n⌉, index ⌈p·n⌉ − 1.
func TestPercentile(t *testing.T) {
	upTo := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(i + 1) // the value is its rank
		}
		return out
	}
	for _, tc := range []struct {
		n, pct int
		want   time.Duration
	}{
		{0, 50, 0},
		{1, 50, 1}, {1, 99, 1},
		{2, 50, 1}, {2, 99, 2},
		{3, 50, 2},
		{4, 50, 2},
		{10, 50, 5}, {10, 99, 10},
		{99, 99, 99},
		{100, 50, 50}, {100, 99, 99}, {100, 100, 100},
		{101, 99, 100},
		{200, 99, 198},
		{1000, 50, 500}, {1000, 99, 990},
		{1001, 99, 991},
	} {
		if got := percentile(upTo(tc.n), tc.pct); got != tc.want {
			t.Errorf("P%d of 1..%d = %d, want %d", tc.pct, tc.n, got, tc.want)
		}
	}
}
