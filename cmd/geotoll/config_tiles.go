package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
)

// TilesConfig configures tile serving beyond the layers themselves.
type TilesConfig struct {
	Cache    TileCacheConfig `yaml:"cache"`
	Discover DiscoverConfig  `yaml:"discover"`
	// StorageRefresh is how often `serve` re-reads the serving registry
	// (and the geometry kinds not yet known), so that storage `geotoll
	// prepare` builds or rebuilds is read within this long.
	StorageRefresh time.Duration `yaml:"storage_refresh"`
}

// TileCacheConfig sizes the in-memory tile cache. Concurrent requests for
// one uncached tile share one query whatever the size.
type TileCacheConfig struct {
	// MaxBytes bounds the memory of cached tiles (each as rendered, plus
	// its gzip form once a gzip client asked for it); 0
	// disables caching.
	MaxBytes int64 `yaml:"max_bytes"`
	// TTL is how long a rendered tile is served from memory.
	TTL time.Duration `yaml:"ttl"`
}

// DiscoverConfig turns on auto-discovery: at start-up every table or view
// with a geometry column in Schemas that the read role may SELECT becomes a
// layer (see tiles.Discover), priced with the default weights. The other
// fields are the discovered layers' settings; unset ones take the layer
// defaults.
type DiscoverConfig struct {
	Schemas          []string      `yaml:"schemas"` // empty: no discovery
	MinZoom          int           `yaml:"minzoom"`
	MaxZoom          int           `yaml:"maxzoom"`
	MaxFeatures      int           `yaml:"max_features"`
	StatementTimeout time.Duration `yaml:"statement_timeout"`
	MaxAge           time.Duration `yaml:"max_age"`
	// MaxProperties caps each discovered layer's properties, and
	// MaxTextLength the declared length of a text column offered as one
	// (unbounded text is never discovered); 0 takes the tiles defaults
	// (16, 256).
	MaxProperties int `yaml:"max_properties"`
	MaxTextLength int `yaml:"max_text_length"`
}

// CORSConfig lets web pages on other origins call the API.
type CORSConfig struct {
	// Origins are "scheme://host[:port]" or "*"; empty sends no CORS
	// headers.
	Origins []string `yaml:"origins"`
	// Credentials allows cookies and HTTP auth across origins; it cannot be
	// combined with "*".
	Credentials bool `yaml:"credentials"`
	// MaxAge is how long a browser may reuse a preflight; 0 is
	// server.DefaultCORSMaxAge, not 0.
	MaxAge time.Duration `yaml:"max_age"`
}

// DefaultTilesConfig caches 128 MiB of tiles for a minute; no discovery;
// the serving registry re-read every 30 s.
func DefaultTilesConfig() TilesConfig {
	return TilesConfig{Cache: TileCacheConfig{MaxBytes: 128 << 20, TTL: time.Minute}, StorageRefresh: 30 * time.Second}
}

// DefaultCORSConfig lets any page fetch tiles, without credentials (API
// keys travel in X-API-Key or ?key=, not cookies).
func DefaultCORSConfig() CORSConfig {
	return CORSConfig{Origins: []string{"*"}, MaxAge: server.DefaultCORSMaxAge}
}

func (c CORSConfig) cors() server.CORS {
	return server.CORS{Origins: c.Origins, Credentials: c.Credentials, MaxAge: c.MaxAge}
}

func (c Config) validateTiles() error {
	var errs []error
	if c.Tiles.Cache.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("tiles.cache.max_bytes %d must not be negative", c.Tiles.Cache.MaxBytes))
	}
	if err := c.Tiles.Discover.discovery().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("tiles.discover: %w", err))
	}
	if c.Tiles.Cache.TTL <= 0 {
		errs = append(errs, fmt.Errorf("tiles.cache.ttl %s must be positive", c.Tiles.Cache.TTL))
	}
	if c.Tiles.StorageRefresh < time.Second {
		errs = append(errs, fmt.Errorf("tiles.storage_refresh %s must be at least 1s", c.Tiles.StorageRefresh))
	}
	if err := c.HTTP.CORS.cors().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("http.%w", err))
	}
	return errors.Join(errs...)
}

// discoverLayers runs auto-discovery (when configured) through q, leaving
// out tables the configured layers already serve.
func (c Config) discoverLayers(ctx context.Context, q tiles.Querier) ([]tiles.Layer, error) {
	d := c.Tiles.Discover
	if len(d.Schemas) == 0 {
		return nil, nil
	}
	configured := make([]tiles.Layer, len(c.Layers))
	for i, lc := range c.Layers {
		configured[i] = lc.Layer
	}
	return tiles.Discover(ctx, q, d.discovery(), configured)
}

// discovery is d as package tiles takes it.
func (d DiscoverConfig) discovery() tiles.Discovery {
	return tiles.Discovery{
		Schemas: d.Schemas, MaxProperties: d.MaxProperties, MaxTextLength: d.MaxTextLength,
		Template: tiles.Layer{
			MinZoom: d.MinZoom, MaxZoom: d.MaxZoom, MaxFeatures: d.MaxFeatures,
			StatementTimeout: d.StatementTimeout, MaxAge: d.MaxAge,
		},
	}
}

// tileCatalog is the catalog of the configured layers plus discovered ones.
func (c Config) tileCatalog(discovered []tiles.Layer) (*tiles.Catalog, error) {
	layers := make([]tiles.Layer, 0, len(c.Layers)+len(discovered))
	for _, lc := range c.Layers {
		layers = append(layers, lc.Layer)
	}
	return tiles.NewCatalog(append(layers, discovered...))
}
