package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Deadlines must nest — every statement_timeout < http.request_timeout <
// http.write_timeout — and a configuration that breaks it names both
// fields.
func TestValidateDeadlines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		wants []string // each error must mention all of these; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"layer timeout at the write timeout", func(c *Config) {
			c.Layers[1].StatementTimeout = 30 * time.Second
		}, []string{`layers[1].statement_timeout (layer "districts") 30s`, "http.write_timeout 30s"}},
		{"layer timeout at the request deadline", func(c *Config) {
			c.Layers[0].StatementTimeout = 20 * time.Second
		}, []string{`layers[0].statement_timeout (layer "places") 20s`, "http.request_timeout 20s"}},
		{"geofence timeout beyond the write timeout", func(c *Config) {
			c.Geofence.StatementTimeout = time.Minute
		}, []string{"geofence.statement_timeout 1m0s", "http.write_timeout 30s"}},
		{"geofence layer timeout at the request deadline", func(c *Config) {
			c.Geofence.Layers[2].StatementTimeout = 25 * time.Second
		}, []string{`geofence.layers[2].statement_timeout (layer "geofences") 25s`, "http.request_timeout 20s"}},
		{"fence write timeout at the request deadline", func(c *Config) {
			c.Geofence.WriterDatabaseURL = "postgres://geotoll_fence_writer@localhost/geotoll"
			c.Geofence.FenceWriteTimeout = 20 * time.Second
		}, []string{"geofence.fence_write_timeout 20s", "http.request_timeout 20s"}},
		{"fence write timeout without fence writes", func(c *Config) {
			c.HTTP.RequestTimeout, c.HTTP.WriteTimeout = 3*time.Second, 4*time.Second
		}, nil},
		{"discovered layers", func(c *Config) {
			c.Tiles.Discover = DiscoverConfig{Schemas: []string{"public"}, StatementTimeout: 40 * time.Second}
		}, []string{"tiles.discover.statement_timeout 40s", "http.write_timeout 30s"}},
		{"request deadline at the write timeout", func(c *Config) {
			c.HTTP.RequestTimeout = 30 * time.Second
		}, []string{"http.request_timeout 30s", "http.write_timeout 30s"}},
		{"no request deadline", func(c *Config) { c.HTTP.RequestTimeout = 0 }, []string{"http.request_timeout"}},
		{"no cancel wait", func(c *Config) { c.Database.CancelWait = 0 }, []string{"database.cancel_wait"}},
		{"a layer left at its default timeout", func(c *Config) {
			c.Layers[0].StatementTimeout = 0
			c.HTTP.RequestTimeout, c.HTTP.WriteTimeout = 2*time.Second, 5*time.Second
		}, []string{`layers[0].statement_timeout (layer "places") 2s`, "http.request_timeout 2s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tc.edit(&cfg)
			errs := cfg.validateDeadlines()
			if len(tc.wants) == 0 {
				if len(errs) != 0 {
					t.Fatalf("valid deadlines refused: %v", errs)
				}
				return
			}
			for _, err := range errs {
				if containsAll(err.Error(), tc.wants) {
					return
				}
			}
			t.Fatalf("errors %v; want one naming %q", errs, tc.wants)
		})
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// A configuration file whose layer statement_timeout reaches the write
// timeout refuses to start, naming both fields — whether it is loaded
// (`geotoll serve -config`) or opened as a Main.
func TestStatementTimeoutBeyondWriteTimeoutRefusesToStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "geotoll.yaml")
	if err := os.WriteFile(path, []byte(`
demo_layers: false
http:
  write_timeout: 30s
layers:
  - name: borders
    table: geotoll.districts
    geometry_column: geom_3857
    statement_timeout: 30s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{`layers[0].statement_timeout (layer "borders") 30s`, "http.write_timeout 30s"}
	_, _, err := LoadConfig([]string{"-config", path})
	if err == nil || !containsAll(err.Error(), want) {
		t.Fatalf("LoadConfig: %v; want a refusal naming %q", err, want)
	}

	cfg := DefaultConfig()
	cfg.Database.URL = "postgres://nobody@127.0.0.1:1/none"
	cfg.Layers[0].StatementTimeout = 45 * time.Second
	m := &Main{Config: cfg, Logger: quietLog(), ModelShelf: testShelf}
	err = m.Open(context.Background())
	defer m.Close()
	if err == nil || !containsAll(err.Error(), []string{`layers[0].statement_timeout (layer "places") 45s`, "http.write_timeout 30s"}) {
		t.Fatalf("Main.Open: %v; want a refusal naming both fields", err)
	}
}
