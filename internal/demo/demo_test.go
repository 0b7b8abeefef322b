package demo

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/paulmach/orb/planar"
)

func digest(d Data) string {
	h := sha256.New()
	fmt.Fprint(h, d.Places, d.Districts, d.Fences)
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestGenerateIsDeterministic(t *testing.T) {
	opts := Options{Seed: 7, Points: 5000, Fences: 40}
	a, b := Generate(opts), Generate(opts)
	if digest(a) != digest(b) {
		t.Fatal("same seed gave different data")
	}
	if c := Generate(Options{Seed: 8, Points: 5000, Fences: 40}); digest(c) == digest(a) {
		t.Fatal("different seeds gave the same data")
	}
}

func TestGenerateShape(t *testing.T) {
	d := Generate(Options{Seed: 1, Points: 20000})
	if len(d.Places) != 20000 || len(d.Fences) != 300 || len(d.Districts) != len(Cities)*36 {
		t.Fatalf("sizes %d %d %d", len(d.Places), len(d.Fences), len(d.Districts))
	}
	ids := map[int64]bool{}
	near, far := 0, 0
	for _, p := range d.Places {
		if ids[p.ID] {
			t.Fatalf("duplicate id %d", p.ID)
		}
		ids[p.ID] = true
		if p.Lon < -180 || p.Lon > 180 || p.Lat < -85 || p.Lat > 85 {
			t.Fatalf("place out of bounds: %+v", p)
		}
		if p.City == "Berlin" {
			dx, dy := p.Lon-13.405, p.Lat-52.52
			switch r2 := dx*dx + dy*dy; {
			case r2 < 0.05*0.05:
				near++
			case r2 > 0.5*0.5:
				far++
			}
		}
	}
	// Dense core, sparse edge: most of Berlin's points are within ~5 km.
	if near < 5*far || far == 0 {
		t.Errorf("Berlin core %d vs edge %d: not clustered", near, far)
	}
	for _, f := range d.Fences {
		if ring := f.Geom[0]; len(ring) < 4 || ring[0] != ring[len(ring)-1] {
			t.Fatalf("fence %d ring not closed", f.ID)
		}
		if planar.Area(f.Geom) <= 0 {
			t.Fatalf("fence %d has no area", f.ID)
		}
	}
}

// Negative sizes are refused by Validate (Generate panicked in make with
// "len out of range"); zero takes the default.
func TestValidateRefusesNegativeSizes(t *testing.T) {
	for _, o := range []Options{{Points: -1}, {Fences: -1}, {Districts: -1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "points -1 must not be negative") {
			t.Errorf("Generate with -1 points panicked with %v, want the reason", r)
		}
	}()
	Generate(Options{Points: -1})
}
