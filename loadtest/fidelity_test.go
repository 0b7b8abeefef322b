package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

func sample(z int, x uint32, price, ms float64, features int) FidelitySample {
	return FidelitySample{Tile: maptile.New(x, 0, maptile.Zoom(z)), Z: z, X: x, Price: price, Cost: price, DBms: ms, Features: features, Status: 200}
}

func TestFidelityReport(t *testing.T) {
	a := FidelityReport{Layer: "a", Seed: 1, Timer: "test", Took: time.Second, Samples: []FidelitySample{
		sample(2, 0, 60, 100, 900), sample(3, 1, 60, 0.2, 2), sample(8, 2, 1.2, 20, 500), sample(12, 3, 1, 0.1, 1),
	}}
	b := FidelityReport{Layer: "b", Seed: 1, Samples: []FidelitySample{sample(14, 4, 1, 0.3, 3), sample(6, 5, 16, 2, 40)}}
	dir := t.TempDir()
	var paths []string
	for _, r := range []FidelityReport{a, b} {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, r.Layer+".json")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	m, err := ReadFidelity(paths...)
	if err != nil {
		t.Fatal(err)
	}
	if m.Layer != "a+b" || len(m.Samples) != 6 || m.Samples[4].Tile != maptile.New(4, 0, 14) {
		t.Fatalf("merged %q with %d samples, fifth tile %v", m.Layer, len(m.Samples), m.Samples[4].Tile)
	}
	price := func(s FidelitySample) float64 { return s.Price }
	feats := func(s FidelitySample) float64 { return float64(s.Features) }
	if rho, n := m.Rho(feats, 0, 22); n != 6 || math.Abs(rho-1) > 1e-12 {
		t.Errorf("features rank exactly as time: ρ = %v over %d", rho, n)
	}
	if rho, n := m.Rho(price, 6, 10); n != 2 || rho != -1 {
		t.Errorf("z6–10: ρ = %v over %d, want -1 over 2", rho, n)
	}
	var out bytes.Buffer
	m.WriteText(&out)
	// The empty z3 tile at 60 tokens is the worst offender.
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		if strings.Contains(l, "tile  price") {
			if !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "3/1/0 ") {
				t.Errorf("worst offender %q, want 3/1/0", lines[i+1])
			}
		}
	}
	if !strings.Contains(out.String(), "3 tiles priced under 2 tokens; the slowest of them took 20.00 ms") {
		t.Errorf("report:\n%s", out.String())
	}
	if _, err := ReadFidelity(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file merged")
	}
}

func TestFidelityRanksTimedOutTilesAsTheSlowest(t *testing.T) {
	r := FidelityReport{Samples: []FidelitySample{
		sample(3, 0, 60, 5, 10), sample(9, 1, 1, 100, 10), sample(9, 2, 2, 1, 10),
	}}
	price := func(s FidelitySample) float64 { return s.Price }
	if rho, _ := r.Rho(price, 0, 22); math.Abs(rho+0.5) > 1e-12 {
		t.Fatalf("all finished: ρ = %v, want -0.5", rho)
	}
	r.Samples[0].Censored = true // 5 ms is only a lower bound: it outranks 100 ms
	if rho, _ := r.Rho(price, 0, 22); math.Abs(rho-0.5) > 1e-12 {
		t.Fatalf("with the timed-out tile: ρ = %v, want 0.5", rho)
	}
}

// fixedTimer times every tile at 1 ms, as if the database drew it.
type fixedTimer struct{}

func (fixedTimer) Time(context.Context, *tiles.Layer, maptile.Tile) (Timing, error) {
	return Timing{MS: 1, Bytes: 100, Features: 2}, nil
}
func (fixedTimer) String() string { return "fixed" }

// A tile whose real request was not drawn stops fidelity with an error:
// with an empty bucket the dry run says would_allow false (a 200) and the
// real request is a 429, and ρ of such answers measures nothing. Only a
// drawn tile (200, 204) or one the server admitted and gave up on at its
// own timeout (503 timeout) is a sample.
func TestFidelityFailsUnlessTheTileIsDrawn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wouldAllow bool
		answer     func(w http.ResponseWriter, r *http.Request)
		err        string // "" for a sample
	}{
		{"empty bucket", false, func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 5})
		}, "would refuse"},
		{"refused", true, func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 5})
		}, "429"},
		{"rate limiter unavailable", true, answerUnavailable, "503"},
		{"drawn", true, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Request-Cost", "1.5")
			w.WriteHeader(http.StatusNoContent)
		}, ""},
		{"server timeout", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Cost", "9")
			problem.Write(w, r, &problem.Error{Code: problem.Timeout, Detail: "slow", RetryAfter: 2})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("dry_run") == "1" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"dry_run":true,"cost":1.5,"would_allow":%v,"retry_after":%d}`, tc.wouldAllow, map[bool]int{true: 0, false: 5}[tc.wouldAllow])
					return
				}
				tc.answer(w, r)
			}))
			defer srv.Close()
			c := &Client{BaseURL: srv.URL}
			if err := c.check(); err != nil {
				t.Fatal(err)
			}
			o := FidelityOptions{Client: c, Timer: fixedTimer{}, Layer: &tiles.Layer{Name: "l", MaxZoom: 16}}
			s, err := measure(t.Context(), o, maptile.New(1, 1, 3))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("a sample was wanted: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("sample %+v, error %v; want an error saying %q", s, err, tc.err)
			case tc.err == "" && (s.DBms != 1 || s.Cost == 0):
				t.Fatalf("sample %+v", s)
			}
		})
	}
}

// A zoom range that holds none of the layer's zooms is an error, before
// anything is measured: it gave no sample and a ρ of NaN.
func TestFidelityRefusesAnEmptyZoomRange(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := &tiles.Layer{Name: "l", MinZoom: 0, MaxZoom: 16}
	for _, z := range [][2]int{{17, 16}, {17, 22}, {5, 4}} {
		_, err := RunFidelity(t.Context(), FidelityOptions{Client: &Client{BaseURL: "http://127.0.0.1:1"}, Pool: pool, Timer: fixedTimer{},
			Layer: l, MinZoom: z[0], MaxZoom: z[1]})
		if err == nil || !strings.Contains(err.Error(), "no tile to ask for") {
			t.Errorf("z%d–%d of a z0–16 layer: error %v, want one saying there is no tile to ask for", z[0], z[1], err)
		}
		_, err = RunZooms(t.Context(), ZoomOptions{Client: &Client{BaseURL: "http://127.0.0.1:1"}, Pool: pool, Timer: fixedTimer{},
			Layer: l, MinZoom: z[0], MaxZoom: z[1]})
		if err == nil || !strings.Contains(err.Error(), "no tile to ask for") {
			t.Errorf("zooms z%d–%d of a z0–16 layer: error %v, want one saying there is no tile to ask for", z[0], z[1], err)
		}
	}
}

// A maximum zoom of 0 is z0, not "the default": the CLI passes its
// default of 16 itself.
func TestSamplingZoomZeroIsZ0(t *testing.T) {
	l := &tiles.Layer{Name: "l", MinZoom: 0, MaxZoom: 22}
	if seed, lo, hi := sampling(l, 0, 0, 0); seed != 1 || lo != 0 || hi != 0 {
		t.Errorf("sampling(0, 0..0) = seed %d, z%d–%d; want seed 1, z0–0", seed, lo, hi)
	}
	if _, lo, hi := sampling(&tiles.Layer{MinZoom: 2, MaxZoom: 14}, 7, 0, 16); lo != 2 || hi != 14 {
		t.Errorf("z0–16 of a z2–14 layer: z%d–%d", lo, hi)
	}
}

// A short run's duration is written to three significant digits: it was
// rounded to the second, and a run of 400 ms read "took 0s".
func TestFidelityReportSaysHowLongAShortRunTook(t *testing.T) {
	for _, c := range []struct {
		took time.Duration
		want string
	}{
		{400 * time.Millisecond, "took 400ms\n"},
		{1234567 * time.Microsecond, "took 1.23s\n"},
		{83*time.Second + 400*time.Millisecond, "took 1m23.4s\n"},
		{1500 * time.Microsecond, "took 1.5ms\n"},
	} {
		var out bytes.Buffer
		FidelityReport{Layer: "a", Took: c.took, Timer: "sql"}.WriteText(&out)
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("took %v: report begins %q, want %q in it", c.took, strings.SplitN(out.String(), "\n", 3)[0:2], c.want)
		}
	}
}
