package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/calibrate"
	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/redact"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// Config is geotoll's whole configuration. Precedence, lowest first:
// DefaultConfig, the YAML file (-config), the environment, flags (see
// setting for the names).
type Config struct {
	Listen string `yaml:"listen"`
	// MetricsListen, when set, is a second listener serving /metrics,
	// /healthz and the detailed /readyz only (the production setting); the
	// public listener then serves no /metrics and a /readyz without
	// detail.
	MetricsListen string `yaml:"metrics_listen"`
	// BasePath is the path prefix a reverse proxy serves geotoll under
	// ("/maps"): every URL the server writes starts with it.
	BasePath  string         `yaml:"base_path"`
	LogLevel  string         `yaml:"log_level"`  // debug, info, warn, error
	LogFormat string         `yaml:"log_format"` // json or text
	Database  DatabaseConfig `yaml:"database"`
	Redis     RedisConfig    `yaml:"redis"`
	HTTP      HTTPConfig     `yaml:"http"`
	Tracing   TracingConfig  `yaml:"tracing"`
	Throttle  ThrottleConfig `yaml:"throttle"`
	// DemoLayers keeps the demo tables' layers (places, districts,
	// geofences) that the configured ones merge into; false starts from
	// none.
	DemoLayers bool           `yaml:"demo_layers"`
	Layers     LayerList      `yaml:"layers"`
	Tiles      TilesConfig    `yaml:"tiles"`
	Geofence   GeofenceConfig `yaml:"geofence"`
}

// RedisConfig configures the shared budget store.
type RedisConfig struct {
	// URL of Redis (env REDIS_URL). Empty, and no Addrs: buckets live in
	// this process (single-instance mode).
	URL string `yaml:"url" secret:"true"`
	// Addrs are the seed nodes of a Redis Cluster (with Cluster) or the
	// Sentinels (with MasterName), instead of URL.
	Addrs      []string `yaml:"addrs"`
	Cluster    bool     `yaml:"cluster"`
	MasterName string   `yaml:"master_name"`
	Username   string   `yaml:"username"` // with Addrs (a URL carries its own)
	Password   string   `yaml:"password" secret:"true"`

	Timeout     time.Duration `yaml:"timeout"`      // bound of one budget call on the hot path
	DialTimeout time.Duration `yaml:"dial_timeout"` // bound of one connection attempt
	FailMode    string        `yaml:"fail_mode"`    // open | closed | local
	Replicas    int           `yaml:"replicas"`     // geotoll processes sharing the budget (fail_mode local)
	// ProbeInterval: after a failure, budgets follow fail_mode for this
	// long before one request tries Redis again.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// MaxClockSkew is how far Redis's clock may run ahead of geotoll's; a
	// spend reaching Redis later than its deadline plus this is not charged
	// (its request already fell back).
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// LeaseRequests is how many requests' price a lease of a caller takes
	// out of its bucket ahead (at most an eighth of it), with one in-flight
	// slot; the process admits up to twice as many of the caller's requests
	// in process on it, and its give-back replays them, dated, with the
	// caller's next call. Redis counts what a lease took as leased while it
	// is out. 0: every request is a Redis call; at most 64.
	LeaseRequests int `yaml:"lease_requests"`
	// LeaseHold is how long such a lease admits requests, counted from
	// when the call that took it was sent; then what is left of it goes
	// back to the bucket, with the record of what it admitted.
	LeaseHold time.Duration `yaml:"lease_hold"`
	// PeekReuse is how long after Redis last answered about a caller's
	// bucket that answer (with the settlements since) answers the caller's
	// budget reads (/budget, dry runs) without a Redis call; 0: every read
	// is a call.
	PeekReuse time.Duration `yaml:"peek_reuse"`
}

// HTTPConfig bounds the HTTP server.
type HTTPConfig struct {
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	// RequestTimeout is every request's own deadline: by then it has its
	// answer — a 503 with Retry-After if the database has not finished —
	// though it may go on waiting for the database to stop afterwards (see
	// database.cancel_wait). Every statement_timeout must be shorter, and
	// it must be shorter than WriteTimeout.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	IdleTimeout    time.Duration `yaml:"idle_timeout"`
	ShutdownGrace  time.Duration `yaml:"shutdown_grace"`
	// ShutdownDelay is how long a stopping server keeps serving, /readyz
	// answering 503, before it closes its listener: time for a load
	// balancer to see it unready and send it nothing new. 0: none.
	ShutdownDelay  time.Duration `yaml:"shutdown_delay"`
	MaxHeaderBytes int           `yaml:"max_header_bytes"`
	// TrustedProxies are the CIDRs whose X-Forwarded-For / Forwarded
	// headers are believed; from anyone else they are ignored.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ForwardedHeader is the one header the trusted proxies write the client
	// address into: X-Forwarded-For (default; the host and scheme then come
	// from X-Forwarded-Host and X-Forwarded-Proto) or Forwarded (for=,
	// host= and proto=). The other family is ignored, so a client cannot
	// pick its identity, nor the host of TileJSON's tile URLs, with it.
	ForwardedHeader string `yaml:"forwarded_header"`
	// PublicURL, when set, is the base of every absolute URL the server
	// writes — TileJSON's tile URLs and the catalog's — in place of the
	// request's scheme and host: "https://tiles.example.com/maps". Its
	// path is base_path. The URLs written without a host (a fence's
	// Location, the fence pages' next, the preview page, the OpenAPI
	// server) stay relative: they resolve against whatever URL the client
	// used and echo nothing it sent.
	PublicURL string `yaml:"public_url"`
	// CORS lets web pages on other origins call the API.
	CORS CORSConfig `yaml:"cors"`
	// ReadyInterval is how often the readiness checks run (in the
	// background: /readyz serves their latest results), each bounded by
	// ReadyTimeout.
	ReadyInterval time.Duration `yaml:"ready_interval"`
	ReadyTimeout  time.Duration `yaml:"ready_timeout"`
}

// LayerConfig is a tile layer plus its cost weights.
type LayerConfig struct {
	tiles.Layer `yaml:",inline"`
	// Weights price this layer's tiles; Shadow prices and records them but
	// never refuses them. Neither applies to a geofence layer of the same
	// name: its queries are not this layer's tiles.
	Weights *WeightsConfig `yaml:"weights,omitempty"`
	Shadow  bool           `yaml:"shadow"`
}

// GeofenceConfig configures the geofence API: its parameter limits
// (max_radius, max_limit, max_bbox_area, max_batch, max_body_bytes, …; see
// geofence.Limits), the layers within and bbox may search, and the fence
// admin.
type GeofenceConfig struct {
	geofence.Limits `yaml:",inline"`
	// AdminKeys may use the fence admin (/geofences), until identity moves
	// to the database. Each is at least 16 bytes.
	AdminKeys []string `yaml:"admin_keys" secret:"true"`
	// WriterDatabaseURL is the connection fence writes use; it should name
	// the geotoll_fence_writer role (env GEOTOLL_WRITER_DATABASE_URL).
	// Empty: fence writes answer 404 "fence admin not configured".
	WriterDatabaseURL string         `yaml:"writer_database_url" secret:"true"`
	Layers            FenceLayerList `yaml:"layers"`
}

func f(v float64) *float64 { return &v }

// DefaultConfig serves the demo tables that `geotoll seed` loads.
func DefaultConfig() Config {
	return Config{
		Listen:     ":8080",
		LogLevel:   "info",
		LogFormat:  "json",
		DemoLayers: true,
		Tracing:    TracingConfig{ServiceName: defaultServiceName, SampleRatio: 1},
		Database: DatabaseConfig{MaxConns: 4, BackgroundConns: 6, AnonymousMaxConns: 2, RetryAfter: 2, AcquireTimeout: time.Second, ConnectTimeout: 2 * time.Second,
			CancelWait: time.Minute},
		Redis: RedisConfig{Timeout: 50 * time.Millisecond, DialTimeout: 500 * time.Millisecond, FailMode: "local", Replicas: 1,
			ProbeInterval: 500 * time.Millisecond, MaxClockSkew: time.Second, PeekReuse: time.Second,
			LeaseRequests: throttle.DefaultLeaseRequests, LeaseHold: throttle.DefaultLeaseHold},
		HTTP: HTTPConfig{
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			RequestTimeout:    20 * time.Second,
			IdleTimeout:       120 * time.Second,
			ShutdownGrace:     15 * time.Second,
			MaxHeaderBytes:    32 << 10,
			CORS:              DefaultCORSConfig(),
			ReadyInterval:     server.DefaultReadyInterval,
			ReadyTimeout:      server.DefaultReadyTimeout,
		},
		Throttle: ThrottleConfig{
			Prefix: "geotoll",
			Tiers: TierMap{
				toll.AnonymousTier: {Rate: 10, Capacity: 80, MaxInFlight: 8},
				"free":             {Rate: 20, Capacity: 100, MaxInFlight: 16},
				"pro":              {Rate: 100, Capacity: 600, MaxInFlight: 64},
			},
			FailedAuth: BucketConfig{Rate: 0.2, Capacity: 10},
			Weights:    defaultWeights(),
			// Four anonymous budgets per /48: a site's /64s share it.
			IPv6Aggregate: AggregateConfig{Prefix: 48, Rate: 40, Capacity: 320},
			Tarpit:        TarpitConfig{MaxHold: toll.DefaultTarpitMaxHold, MaxHeld: toll.DefaultTarpitMaxHeld},
			KeyRefresh:    10 * time.Second,
			KeyMaxAge:     time.Minute,
			MsPerToken:    toll.DefaultMsPerToken,
			TimeoutFactor: toll.DefaultTimeoutFactor,
			TimeoutFloor:  toll.DefaultTimeoutFloor,
			SettleFloor:   toll.DefaultSettleFloor,
			Pricing:       PricingDensity,
		},
		Layers: LayerList{
			{Layer: tiles.Layer{
				Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", SRID: 3857,
				IDColumn: "id", Properties: []string{"name", "kind", "city", "rank"},
				GeometryKind: tiles.KindPoint, OrderBy: []string{"rank"},
				MaxFeatures: 20000, StatementTimeout: 2 * time.Second,
			}},
			{Layer: tiles.Layer{
				Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom_3857", SRID: 3857,
				IDColumn: "id", Properties: []string{"name", "city", "population"},
				GeometryKind: tiles.KindPolygon, OrderBy: []string{"population desc"},
				MinZoom: 4, MaxFeatures: 5000, StatementTimeout: 2 * time.Second,
			}, Weights: &WeightsConfig{AreaWeight: f(0.25)}},
			{Layer: tiles.Layer{
				Name: "geofences", Table: "geotoll.geofences", GeometryColumn: "geom_3857", SRID: 3857,
				IDColumn: "id", Properties: []string{"name", "kind"}, GeometryKind: tiles.KindPolygon,
				MaxFeatures: 5000, StatementTimeout: 2 * time.Second,
			}, Weights: &WeightsConfig{AreaWeight: f(0.1)}},
		},
		Tiles: DefaultTilesConfig(),
		Geofence: GeofenceConfig{
			Limits: geofence.DefaultLimits(),
			Layers: FenceLayerList{
				{Name: "places", Table: "geotoll.places", GeometryColumn: "geom", IDColumn: "id",
					Properties: []string{"name", "kind", "city", "rank"}, StatementTimeout: 2 * time.Second},
				{Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom", IDColumn: "id",
					Properties: []string{"name", "city", "population"}, StatementTimeout: 2 * time.Second},
				{Name: "geofences", Table: "geotoll.geofences", GeometryColumn: "geom", IDColumn: "id",
					Properties: []string{"name", "kind"}, StatementTimeout: 2 * time.Second},
			},
		},
	}
}

// LoadConfig builds the configuration from args (flags, then the
// subcommand and its arguments, returned) and the file they name, without
// the environment (the commands read it too: cli.config).
func LoadConfig(args []string) (Config, []string, error) { return loadConfig(args, false) }

// loadConfig is LoadConfig, reading the environment when env is true.
func loadConfig(args []string, env bool) (Config, []string, error) {
	o := newOverrides()
	fs := flag.NewFlagSet("geotoll", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, err
	}
	if env {
		if err := o.readEnv(); err != nil {
			return Config{}, nil, err
		}
	}
	cfg, err := o.load()
	return cfg, fs.Args(), err
}

// load builds the configuration: DefaultConfig, then the YAML file
// (-config; unknown keys are errors; see config_merge.go for how it merges
// into the defaults), then the flags and environment variables of o.
func (o *overrides) load() (Config, error) {
	cfg := DefaultConfig()
	var (
		raw []byte
		doc yaml.Node
	)
	if o.config != "" {
		var err error
		if raw, err = os.ReadFile(o.config); err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return cfg, fmt.Errorf("config %s: %w", o.config, err)
		}
		if err := singleDocument(raw); err != nil {
			return cfg, fmt.Errorf("config %s: %w", o.config, err)
		}
		if err := refuseAliasBombs(&doc); err != nil {
			return cfg, fmt.Errorf("config %s: %w", o.config, err)
		}
		if err := refuseFractions(&doc, reflect.TypeFor[Config](), ""); err != nil {
			return cfg, fmt.Errorf("config %s: %w", o.config, err)
		}
	}
	// demo_layers decides what the file's layers merge into: read it
	// (from the overrides, else the file) before anything else.
	if raw, ok := o.values["demo_layers"]; ok {
		cfg.DemoLayers, _ = strconv.ParseBool(raw) // checked when it was set
	} else if len(doc.Content) > 0 {
		var head struct {
			DemoLayers *bool `yaml:"demo_layers"`
		}
		if err := doc.Decode(&head); err == nil && head.DemoLayers != nil {
			cfg.DemoLayers = *head.DemoLayers
		}
	}
	if !cfg.DemoLayers {
		cfg.Layers, cfg.Geofence.Layers = nil, nil
	}
	if len(doc.Content) > 0 {
		before := cfg
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", o.config, hideSecrets(err, &doc))
		}
		keepWhereEmpty(&doc, &cfg, before)
	}
	if o.env {
		if err := o.fileTiers(cfg); err != nil {
			return cfg, err
		}
	}
	if err := o.apply(&cfg); err != nil {
		return cfg, err
	}
	if cfg.Database.AdminURL == "" {
		cfg.Database.AdminURL = cfg.Database.URL
	}
	return cfg, cfg.validate()
}

func (c Config) validate() error {
	var errs []error
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if err := validateBasePath(c.BasePath); err != nil {
		errs = append(errs, err)
	} else if err := validatePublicURL(c.HTTP.PublicURL, c.BasePath); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("log_format %q must be json or text", c.LogFormat))
	}
	if c.Database.MaxConns < 1 || c.Database.AnonymousMaxConns < 0 || c.Database.KeyMaxConns < 0 {
		errs = append(errs, fmt.Errorf("database.max_conns %d must be at least 1, anonymous_max_conns %d at least 0 (off), key_max_conns %d at least 0 (no cap)",
			c.Database.MaxConns, c.Database.AnonymousMaxConns, c.Database.KeyMaxConns))
	}
	if c.Database.BackgroundConns < 2 {
		errs = append(errs, fmt.Errorf("database.background_conns %d must be at least 2 (a price model's build and a refresh at once)",
			c.Database.BackgroundConns))
	}
	if c.Throttle.KeyRefresh < time.Second {
		errs = append(errs, fmt.Errorf("throttle.key_refresh %s must be at least 1s", c.Throttle.KeyRefresh))
	}
	if c.Throttle.KeyMaxAge < 2*c.Throttle.KeyRefresh {
		errs = append(errs, fmt.Errorf("throttle.key_max_age %s must be at least twice throttle.key_refresh (%s)", c.Throttle.KeyMaxAge, c.Throttle.KeyRefresh))
	}
	if strings.ContainsAny(c.Throttle.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("throttle.prefix %q must not contain '{' or '}': Redis Cluster would take its braces for the keys' hash tag (every bucket in one slot, or a caller's keys in different ones: CROSSSLOT)", c.Throttle.Prefix))
	}
	if c.Throttle.Pricing != PricingDensity && c.Throttle.Pricing != PricingSize {
		errs = append(errs, fmt.Errorf("throttle.pricing %q must be %q or %q", c.Throttle.Pricing, PricingDensity, PricingSize))
	}
	if th := c.Throttle; !(th.MsPerToken > 0) || math.IsInf(th.MsPerToken, 1) || !(th.TimeoutFactor >= 1) || math.IsInf(th.TimeoutFactor, 1) ||
		th.TimeoutFloor < 10*time.Millisecond || th.SettleFloor <= 0 {
		errs = append(errs, fmt.Errorf("throttle.ms_per_token (%g) must be positive and finite, timeout_factor (%g) at least 1 and finite, timeout_floor (%s) at least 10ms, settle_floor (%s) positive (1ns settles every request)",
			th.MsPerToken, th.TimeoutFactor, th.TimeoutFloor, th.SettleFloor))
	}
	if err := c.Throttle.Tarpit.validate(c.HTTP.RequestTimeout); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Throttle.validateLimits()...)
	errs = append(errs, c.validateTierCosts()...)
	for i, k := range c.Geofence.AdminKeys {
		if len(k) < geofence.MinAdminKeyLen || strings.TrimSpace(k) != k || strings.ContainsAny(k, "\r\n") {
			errs = append(errs, fmt.Errorf("geofence.admin_keys[%d] must be at least %d bytes on one line without surrounding spaces (keys are comma-separated)",
				i, geofence.MinAdminKeyLen))
		}
	}
	if c.HTTP.MaxHeaderBytes < 1 {
		errs = append(errs, fmt.Errorf("http.max_header_bytes %d must be positive (0 would be Go's default, 1 MiB)", c.HTTP.MaxHeaderBytes))
	}
	if c.Redis.Replicas < 1 {
		errs = append(errs, fmt.Errorf("redis.replicas %d must be at least 1", c.Redis.Replicas))
	}
	h := c.HTTP
	for name, d := range map[string]time.Duration{
		"read_header_timeout": h.ReadHeaderTimeout, "read_timeout": h.ReadTimeout,
		"write_timeout": h.WriteTimeout, "idle_timeout": h.IdleTimeout, "shutdown_grace": h.ShutdownGrace,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("http.%s must be positive", name))
		}
	}
	if h.ShutdownDelay < 0 || h.ShutdownDelay > time.Minute {
		errs = append(errs, fmt.Errorf("http.shutdown_delay %s must be from 0s to 1m", h.ShutdownDelay))
	}
	errs = append(errs, h.validateReadiness()...)
	errs = append(errs, c.validateListeners()...)
	if err := c.validateTiles(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Tracing.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateResilience()...)
	errs = append(errs, c.validateDeadlines()...)
	errs = append(errs, c.validateURLs()...)
	return errors.Join(errs...)
}

// validateBasePath: base_path is written verbatim into every URL the
// server writes (TileJSON, the catalog, a fence's Location, the preview
// page), so it must be a clean absolute path that needs no escaping
// anywhere: "/" then segments of RFC 3986's unreserved characters, none of
// them empty, "." or "..". One trailing "/" is allowed (it is dropped).
func validateBasePath(base string) error {
	if base == "" || base == "/" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("base_path %q must be a path such as \"/maps\": %s", base, why)
	}
	if !strings.HasPrefix(base, "/") {
		return bad("it must start with /")
	}
	for seg := range strings.SplitSeq(strings.TrimSuffix(base[1:], "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("no empty, . or .. segment")
		}
		if i := strings.IndexFunc(seg, func(r rune) bool { return !unreserved(r) }); i >= 0 {
			return bad(fmt.Sprintf("%q is not a letter, digit, -, ., _ or ~", seg[i:i+1]))
		}
	}
	return nil
}

// validatePublicURL: http.public_url is written verbatim ahead of the
// paths of TileJSON's and the catalog's URLs, so it must be an absolute
// http or https URL whose host is a valid host[:port] (a port from 1 to
// 65535), without user information, query or fragment (they would end up
// in the middle of every URL). Its path must be base_path (one trailing
// "/" aside): the routes answer below base_path, and the URLs written
// without a host start with it, so a public_url with another path would
// hand out absolute URLs that disagree with the relative ones. base is a
// valid base_path.
func validatePublicURL(public, base string) error {
	if public == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("http.public_url %q must be an absolute http or https URL such as \"https://tiles.example.com\": %s",
			redact.URL(public), redact.URL(why))
	}
	u, err := url.Parse(public)
	switch {
	case err != nil:
		return bad(err.Error())
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("its scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return bad("it needs a host")
	case u.User != nil:
		return bad("no user information (user@ or user:password@)")
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(public, "?"):
		return bad("no query")
	case u.Fragment != "" || strings.Contains(public, "#"):
		return bad("no fragment")
	case !forwarded.ValidHost(u.Host):
		return bad(fmt.Sprintf("%q is not a valid host[:port] (a name or an IP address, and a port from 1 to 65535)", u.Host))
	}
	path, want := strings.TrimSuffix(u.EscapedPath(), "/"), strings.TrimSuffix(base, "/")
	if path != want {
		shown := want
		if shown == "" {
			shown = "none"
		}
		return bad(fmt.Sprintf("its path %q must be base_path (%s): the routes answer below base_path and the URLs written without a host (a fence's Location, the preview page) start with it; set both to the prefix your proxy serves geotoll under, passing it through",
			u.EscapedPath(), shown))
	}
	return nil
}

// publicBase is http.public_url (validated) as the base of written URLs:
// the scheme in lower case, the host as configured, then base_path
// without a trailing "/"; "" when unset.
func (c Config) publicBase() string {
	u, err := url.Parse(c.HTTP.PublicURL)
	if c.HTTP.PublicURL == "" || err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
}

// unreserved reports whether r is one of RFC 3986's unreserved characters.
func unreserved(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log_level %q: %w", s, err)
	}
	return l, nil
}

// catalog builds the tile catalog and the tile layers' weights: the
// defaults, then throttle.weights, then the layer's work model from the
// weights file, then the layer's own weights. They are toll.LayerWeights,
// which price tiles only: a geofence layer (often named as a tile layer
// is) has no weights of its own and is priced with throttle.weights and
// its work model from the weights file's geofence section.
func (c Config) catalog() (*tiles.Catalog, map[string]throttle.Weights, error) {
	file, err := c.weightsFile()
	if err != nil {
		return nil, nil, err
	}
	base := c.Throttle.Weights.apply(throttle.DefaultWeights())
	layers := make([]tiles.Layer, 0, len(c.Layers))
	weights := make(map[string]throttle.Weights, len(c.Layers))
	for _, lc := range c.Layers {
		layers = append(layers, lc.Layer)
		w := base
		if m, ok := file.Tiles[lc.Name]; ok {
			w.Work = m
		}
		weights[lc.Name] = lc.Weights.apply(w)
	}
	cat, err := tiles.NewCatalog(layers)
	return cat, weights, err
}

// hasTileLayer and hasFenceLayer report whether the configuration has a
// tile layer, or a geofence layer, of that name.
func (c Config) hasTileLayer(name string) bool {
	return slices.ContainsFunc(c.Layers, func(l LayerConfig) bool { return l.Name == name })
}

func (c Config) hasFenceLayer(name string) bool {
	return slices.ContainsFunc(c.Geofence.Layers, func(l geofence.Layer) bool { return l.Name == name })
}

// weightsFile reads throttle.weights_file, if set: every layer it names
// must be one the config serves.
func (c Config) weightsFile() (calibrate.File, error) {
	if c.Throttle.WeightsFile == "" {
		return calibrate.File{}, nil
	}
	f, err := readWeightsFile(c.Throttle.WeightsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("throttle.weights_file: %w (write it with `geotoll calibrate`)", err)
	}
	if err != nil {
		return f, fmt.Errorf("throttle.weights_file: %w", err)
	}
	var errs []error
	for name := range f.Tiles {
		if !c.hasTileLayer(name) {
			errs = append(errs, fmt.Errorf("throttle.weights_file %s: tile layer %q is not in the config", c.Throttle.WeightsFile, name))
		}
	}
	for _, m := range []map[string]throttle.WorkModel{f.Geofence, f.Containment} {
		for name := range m {
			if !c.hasFenceLayer(name) {
				errs = append(errs, fmt.Errorf("throttle.weights_file %s: geofence layer %q is not in the config", c.Throttle.WeightsFile, name))
			}
		}
	}
	return f, errors.Join(errs...)
}
