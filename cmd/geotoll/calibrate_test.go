package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

func TestFitLine(t *testing.T) {
	a, b, ok := fitLine([]float64{0, 1, 2, 3}, []float64{2, 5, 8, 11})
	if !ok || a != 2 || b != 3 {
		t.Fatalf("fit = %v + %v·x (%v), want 2 + 3·x", a, b, ok)
	}
	if _, _, ok := fitLine([]float64{1}, []float64{1}); ok {
		t.Fatal("one point fitted")
	}
	if _, _, ok := fitLine([]float64{1, 1}, []float64{1, 2}); ok {
		t.Fatal("vertical line fitted")
	}
}

func TestSuggestAreaWeight(t *testing.T) {
	w := throttle.Weights{Base: 1, AreaWeight: 0.5, MaxCost: 60}
	rows := []calibrationRow{
		{Zoom: 14, Area: 0.0004, MedianMS: 2.0004, Price: 1.0002},
		{Zoom: 10, Area: 0.1, MedianMS: 2.1, Price: 1.05},
		{Zoom: 8, Area: 1.6, MedianMS: 3.6, Price: 1.8},
		{Zoom: 4, Area: 400, MedianMS: 100, Price: 60}, // clamped: ignored
	}
	got, ok := suggestAreaWeight(rows, w)
	// ms = 2 + 1·area, so a tile of area A costs (2 + A)/2 base units: weight 0.5.
	if !ok || got < 0.499 || got > 0.501 {
		t.Fatalf("suggestion %v (%v), want 0.5", got, ok)
	}
}

func TestCalibrateAgainstPostGIS(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	var out bytes.Buffer
	err := calibrate(context.Background(), cfg, calibration{layer: "places", samples: 2, minZ: 10, maxZ: 13}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"layer places", "median ms", "\n10 ", "\n13 "} {
		if !strings.Contains(strings.ReplaceAll(text, "  ", " "), strings.TrimSpace(want)) {
			t.Fatalf("calibrate output lacks %q:\n%s", want, text)
		}
	}
	if err := calibrate(context.Background(), cfg, calibration{layer: "nope", samples: 8, minZ: 4, maxZ: 16}, &out, io.Discard); err == nil {
		t.Fatal("unknown layer accepted")
	}
}
