package loadtest

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
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
