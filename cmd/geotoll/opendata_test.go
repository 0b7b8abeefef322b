package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestOpenDataConfig holds loadtest/opendata.yaml to today's config format
// and to what the measuring instruments need of it.
func TestOpenDataConfig(t *testing.T) {
	cfg, _, err := LoadConfig([]string{"-config", "../../loadtest/opendata.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	cat, _, err := cfg.catalog()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range cat.Layers() {
		names = append(names, l.Name+"="+l.Table)
	}
	if got := strings.Join(names, " "); got != "points=opendata.points countries=opendata.countries countries_simple=opendata.countries_simple countries_whole=opendata.countries" {
		t.Errorf("tile layers: %s", got)
	}
	if l := cat.Layer("countries_whole"); l == nil || !l.Subdivide.Off {
		t.Errorf("countries_whole must store its overviews whole (subdivide off): the baseline of BenchmarkCountriesOverviewPieces")
	}
	if len(cfg.Geofence.Layers) != 3 || cfg.Geofence.Layers[1].Table != "opendata.countries" {
		t.Errorf("geofence layers: %+v", cfg.Geofence.Layers)
	}
	if cfg.Tiles.Cache.MaxBytes != 0 {
		t.Errorf("tiles.cache.max_bytes %d: every measured tile must reach the database", cfg.Tiles.Cache.MaxBytes)
	}
	if b := cfg.Throttle.Tiers["bench"]; b.Rate < 1e6 || b.Capacity < 1e6 || b.MaxInFlight != 0 {
		t.Errorf("tier bench %+v must never refuse", b)
	}
}

func TestOpenDataRejectsBadFlags(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database.AdminURL = "postgres://127.0.0.1:1/none?connect_timeout=1"
	for _, args := range [][]string{{"-points", "0x"}, {"-nope"}} {
		if err := runWith(context.Background(), cfg, append([]string{"opendata"}, args...), io.Discard, io.Discard); err == nil {
			t.Errorf("opendata %v: no error", args)
		}
	}
}
