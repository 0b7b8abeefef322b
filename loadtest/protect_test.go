package loadtest

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// RunProtect against a stand-in server: honest requests are answered,
// the throttled abuser's key gets 3 admitted requests at 2.5 tokens and
// then 429s, the shadow key is always admitted. Each phase reports what
// its side sent and got, and the honest rate is kept.
func TestRunProtect(t *testing.T) {
	var throttled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-API-Key") {
		case "honest":
			w.WriteHeader(http.StatusOK)
		case "abuser":
			if throttled.Add(1) > 3 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.Header().Set("X-Request-Cost", "2.5")
			_, _ = w.Write([]byte("tile"))
		case "shadow":
			w.Header().Set("X-Request-Cost", "1")
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
	if a := phases[2].Abuser; a.Admitted != a.Requests || a.Cost != float64(a.Admitted) || a.Requests < 10 {
		t.Errorf("shadow abuser %+v", a)
	}
	var table strings.Builder
	WriteProtectTable(&table, phases)
	if rows := strings.Count(table.String(), "\n"); rows != 5 || !strings.Contains(table.String(), "| with abuser, throttle on |") {
		t.Errorf("table:\n%s", table.String())
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
