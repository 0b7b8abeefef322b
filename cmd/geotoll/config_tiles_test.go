package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/tiles"
)

func loadYAML(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "geotoll.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig([]string{"-config", path})
	return cfg, err
}

func TestTilesConfig(t *testing.T) {
	t.Parallel()
	def := DefaultConfig()
	if def.Tiles.Cache.MaxBytes != 128<<20 || def.Tiles.Cache.TTL != time.Minute || len(def.Tiles.Discover.Schemas) != 0 ||
		!slices.Equal(def.HTTP.CORS.Origins, []string{"*"}) || def.HTTP.CORS.Credentials {
		t.Errorf("defaults: tiles %+v, cors %+v", def.Tiles, def.HTTP.CORS)
	}
	cfg, err := loadYAML(t, `
tiles:
  cache: {max_bytes: 1048576, ttl: 5m}
  discover: {schemas: [public, gis], minzoom: 3, max_features: 500, statement_timeout: 1s, max_age: 10m, max_properties: 4, max_text_length: 80}
http:
  trusted_proxies: [10.0.0.0/8]
  cors: {origins: ["https://maps.example.com"], credentials: true, max_age: 1h}
layers:
  - {name: roads, table: osm.roads, geometry_column: geom, srid: 4326, max_age: 2h, without_id: true}
`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tiles.Cache != (TileCacheConfig{MaxBytes: 1 << 20, TTL: 5 * time.Minute}) {
		t.Errorf("cache %+v", cfg.Tiles.Cache)
	}
	d := cfg.Tiles.Discover
	if !slices.Equal(d.Schemas, []string{"public", "gis"}) || d.MinZoom != 3 || d.MaxFeatures != 500 ||
		d.StatementTimeout != time.Second || d.MaxAge != 10*time.Minute || d.MaxProperties != 4 || d.MaxTextLength != 80 {
		t.Errorf("discover %+v", d)
	}
	if c := cfg.HTTP.CORS; !slices.Equal(c.Origins, []string{"https://maps.example.com"}) || !c.Credentials || c.MaxAge != time.Hour {
		t.Errorf("cors %+v", c)
	}
	if l := cfg.Layers[3].Layer; l.MaxAge != 2*time.Hour || !l.WithoutID {
		t.Errorf("layer %+v", l)
	}
}

func TestTilesConfigRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"star with credentials", "http: {cors: {credentials: true}}\n", "credentials"},
		{"origin with a path", `http: {cors: {origins: ["https://a.example/maps"]}}` + "\n", "https://a.example/maps"},
		{"negative cache", "tiles: {cache: {max_bytes: -1}}\n", "max_bytes"},
		{"zero ttl", "tiles: {cache: {ttl: 0s}}\n", "ttl"},
		{"unknown tiles key", "tiles: {cash: {}}\n", "cash"},
		{"negative discovered properties", "tiles: {discover: {max_properties: -1}}\n", "max_properties"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// TestDiscoverSettingsAreChecked: a tiles.discover setting no discovered
// layer could have is refused by the configuration (config check) and by
// serve's start, naming the key — not only once a table is discovered,
// naming the layer discovered from it.
func TestDiscoverSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		setting string
		key     string
		set     func(*DiscoverConfig)
	}{
		{"minzoom: -1", "minzoom", func(d *DiscoverConfig) { d.MinZoom = -1 }},
		{"maxzoom: 23", "maxzoom", func(d *DiscoverConfig) { d.MaxZoom = 23 }},
		{"minzoom: 10, maxzoom: 5", "minzoom", func(d *DiscoverConfig) { d.MinZoom, d.MaxZoom = 10, 5 }},
		{"max_features: -5", "max_features", func(d *DiscoverConfig) { d.MaxFeatures = -5 }},
		{"max_features: 1000000", "max_features", func(d *DiscoverConfig) { d.MaxFeatures = 1000000 }},
		{"max_age: -1s", "max_age", func(d *DiscoverConfig) { d.MaxAge = -time.Second }},
		{"statement_timeout: -1s", "statement_timeout", func(d *DiscoverConfig) { d.StatementTimeout = -time.Second }},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			t.Parallel()
			names := func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "tiles.discover") && strings.Contains(err.Error(), tc.key) &&
					!strings.Contains(err.Error(), `layer "`)
			}
			if _, err := loadYAML(t, "tiles: {discover: {"+tc.setting+"}}\n"); !names(err) {
				t.Errorf("config: %v, want an error naming tiles.discover and %s", err, tc.key)
			}
			cfg := DefaultConfig()
			cfg.Database.URL = "postgres://127.0.0.1:9/none?connect_timeout=1"
			cfg.Listen = "127.0.0.1:0"
			tc.set(&cfg.Tiles.Discover)
			m := &Main{Config: cfg, Logger: quietLog()}
			if err := m.Open(t.Context()); !names(err) {
				if err == nil {
					m.Close()
				}
				t.Errorf("serve's start: %v, want an error naming tiles.discover and %s", err, tc.key)
			}
		})
	}
}

// Discovered layers join the configured ones in the catalog, after them.
func TestTileCatalogWithDiscovered(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cat, err := cfg.tileCatalog([]tiles.Layer{{Name: "found", Schema: "gis", Table: `we"ird`, GeometryColumn: "g", WithoutID: true}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range cat.Layers() {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"places", "districts", "geofences", "found"}) {
		t.Errorf("catalog %v", names)
	}
	if _, err := cfg.tileCatalog([]tiles.Layer{{Name: "places", Table: "x", GeometryColumn: "g"}}); err == nil {
		t.Error("a discovered layer took a configured layer's name")
	}
}
