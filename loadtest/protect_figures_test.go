package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// statusTotal is how many requests status counts.
func statusTotal(status map[int]int) int {
	n := 0
	for _, c := range status {
		n += c
	}
	return n
}

// slowFailures is a stand-in server on which every fifth honest request
// waits 1.2 s and then fails with 503; the rest, and every other key's,
// are answered at once.
func slowFailures(t *testing.T) *httptest.Server {
	var honest atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "honest" && honest.Add(1)%5 == 0 {
			time.Sleep(1200 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Request-Cost", "1")
		_, _ = w.Write([]byte("tile"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The honest figures count every honest request, the failed ones too: a
// server that answers one in five slowly with 503 shows it in the count
// and in p99, not only in the failures. And a phase's Duration is the
// phase's length, not the wait for its last answers after it: the
// abuser's bound is the bucket's over the span it could send in.
func TestRunProtectCountsEveryHonestRequest(t *testing.T) {
	srv := slowFailures(t)
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		AbuserKey: "abuser", ShadowKey: "shadow", Flood: []string{"/z0"}, Workers: 2, Phase: time.Second}
	phases, err := RunProtect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range phases {
		sent, bad := statusTotal(p.Status), failed(p.Status)
		if p.Honest.N != sent || sent < 25 {
			t.Errorf("%s: %d honest requests in the figures, %d sent (status %v): the failed ones left out", p.Name, p.Honest.N, sent, p.Status)
		}
		if bad < sent/10 || p.Status[http.StatusServiceUnavailable] != bad {
			t.Errorf("%s: status %v, want one in five 503", p.Name, p.Status)
		}
		// One in five failed after 1.2 s: p99 is a failure's, not an
		// answered request's.
		if p.Honest.P99 < 1200*time.Millisecond {
			t.Errorf("%s: honest p99 %s with %d of %d requests failed after 1.2 s", p.Name, p.Honest.P99, bad, sent)
		}
		perSec := 0
		for _, s := range p.PerSec {
			perSec += s.N
		}
		if perSec != sent {
			t.Errorf("%s: %d requests in the seconds' figures, %d sent", p.Name, perSec, sent)
		}
		// The last 503s come 1.2 s after the phase's end.
		if p.Duration < o.Phase || p.Duration > o.Phase+200*time.Millisecond {
			t.Errorf("%s: Duration %s for a phase of %s", p.Name, p.Duration, o.Phase)
		}
	}
}

func TestRunCrawlCountsEveryHonestRequest(t *testing.T) {
	srv := slowFailures(t)
	o := CrawlOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		Crawl: []string{"/z0"}, Crawlers: 2, From: DefaultCrawlerFrom, Phase: time.Second}
	phases, err := RunCrawl(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range phases {
		sent, bad := statusTotal(p.Status), p.Failed()
		if p.Honest.N != sent || sent < 25 || bad < sent/10 {
			t.Errorf("%s: %d honest requests in the figures, %d sent, %d failed (status %v)", p.Name, p.Honest.N, sent, bad, p.Status)
		}
		if p.Honest.P99 < 1200*time.Millisecond {
			t.Errorf("%s: honest p99 %s with %d of %d requests failed after 1.2 s", p.Name, p.Honest.P99, bad, sent)
		}
		if p.Duration < o.Phase || p.Duration > o.Phase+200*time.Millisecond {
			t.Errorf("%s: Duration %s for a phase of %s", p.Name, p.Duration, o.Phase)
		}
	}
}

// coldStart is a stand-in server whose first ten honest requests take
// 400 ms each (a fresh connection, a fresh database backend), the rest
// none; it counts the honest requests it was sent.
func coldStart(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var honest atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "honest" && honest.Add(1) <= 10 {
			time.Sleep(400 * time.Millisecond)
		}
		w.Header().Set("X-Request-Cost", "1")
		_, _ = w.Write([]byte("tile"))
	}))
	t.Cleanup(srv.Close)
	return srv, &honest
}

// The honest caller warms up before its phase alone, and the warm-up's
// requests are in no figure: the cold start is not the baseline.
func TestRunProtectWarmsUpBeforeAlone(t *testing.T) {
	srv, served := coldStart(t)
	o := ProtectOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		AbuserKey: "abuser", ShadowKey: "shadow", Flood: []string{"/z0"}, Workers: 2, Phase: time.Second}
	phases, err := RunProtect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	warmedUp(t, int(served.Load()), phases, func(p ProtectPhase) map[int]int { return p.Status }, phases[0].Honest)
}

func TestRunCrawlWarmsUpBeforeAlone(t *testing.T) {
	srv, served := coldStart(t)
	o := CrawlOptions{Client: &Client{BaseURL: srv.URL, Key: "honest"}, Honest: []string{"/a"}, Rate: 50,
		Crawl: []string{"/z0"}, Crawlers: 1, From: DefaultCrawlerFrom, Phase: time.Second}
	phases, err := RunCrawl(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	warmedUp(t, int(served.Load()), phases, func(p CrawlPhase) map[int]int { return p.Status }, phases[0].Honest)
}

// warmedUp fails t unless the server was sent some 50 honest requests more
// than the phases counted (2 s of warm-up at 50 a second: about 100 sent
// and counted nowhere), and the phase alone's p99 is not the cold
// start's 400 ms.
func warmedUp[P any](t *testing.T, served int, phases []P, status func(P) map[int]int, alone Latencies) {
	t.Helper()
	counted := 0
	for _, p := range phases {
		counted += statusTotal(status(p))
	}
	if served-counted < 50 {
		t.Errorf("the server was sent %d honest requests, the phases counted %d: no warm-up", served, counted)
	}
	if alone.P99 >= 400*time.Millisecond {
		t.Errorf("honest alone: p99 %s, the cold start's (%+v)", alone.P99, alone)
	}
}
