package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/throttle"
)

func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "geotoll.yaml")
	if err := os.WriteFile(path, []byte(`
listen: ":9000"
database:
  url: postgres://file/db
redis:
  url: redis://file:6379
  timeout: 80ms
throttle:
  tiers:
    pro: {rate: 5, capacity: 90}
layers:
  - name: only
    table: geotoll.places
    geometry_column: geom_3857
    weights: {area_weight: 2}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	clearConfigEnv(t)
	t.Setenv("DATABASE_URL", "postgres://env/db")
	t.Setenv("LISTEN", ":7000")
	cfg, rest, err := loadConfig([]string{"-config", path, "-redis-url", "redis://flag:1", "serve"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0] != "serve" {
		t.Errorf("rest = %q", rest)
	}
	if cfg.Listen != ":7000" || cfg.Database.URL != "postgres://env/db" || cfg.Database.AdminURL != "postgres://env/db" {
		t.Errorf("env did not override file: %+v", cfg)
	}
	if cfg.Redis.URL != "redis://flag:1" || cfg.Redis.Timeout != 80*time.Millisecond {
		t.Errorf("redis: %+v", cfg.Redis)
	}
	// A tiers map in the file merges into the defaults: pro is replaced,
	// anonymous and free stay.
	if cfg.Throttle.Tiers["pro"].Capacity != 90 || cfg.Throttle.Tiers["anonymous"] != DefaultConfig().Throttle.Tiers["anonymous"] {
		t.Errorf("throttle: %+v", cfg.Throttle)
	}
	cat, weights, err := cfg.catalog()
	if err != nil {
		t.Fatal(err)
	}
	// A layer with a new name joins the demo layers.
	if len(cat.Layers()) != 4 || weights["only"].AreaWeight != 2 || weights["only"].MaxCost != 60 {
		t.Errorf("layers/weights: %v %+v", cat.Layers(), weights["only"])
	}
}

func TestLoadConfigRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "nonsense: 1\n", "nonsense"},
		{"bad level", "log_level: loud\n", "log_level"},
		{"bad duration", "http: {read_timeout: 0s}\n", "read_timeout"},
		// yaml.v3 truncates a fraction into a whole number: max_in_flight
		// 0.5 would be 0, the default cap.
		{"fraction of a tier's whole number", "throttle: {tiers: {free: {max_in_flight: 0.5}}}\n", "throttle.tiers.free.max_in_flight"},
		{"fraction of connections", "database: {max_conns: 1.5}\n", "database.max_conns"},
		{"one background connection", "database: {background_conns: 1}\n", "database.background_conns 1 must be at least 2"},
		{"fraction of a layer's whole number", "layers: [{name: places, max_features: 100.5}]\n", "layers[0].max_features"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadConfig([]string{"-config", path})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

// TestThrottlePrefixRefusesBraces: a throttle.prefix holding '{' or '}'
// is a configuration error, named as such: in Redis Cluster its braces
// would become the keys' hash tag, so that every bucket lands in one slot,
// or a caller's keys in different ones (CROSSSLOT).
func TestThrottlePrefixRefusesBraces(t *testing.T) {
	for _, prefix := range []string{"geo{toll}", "{geotoll", "geotoll}"} {
		cfg := DefaultConfig()
		cfg.Throttle.Prefix = prefix
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "throttle.prefix") {
			t.Errorf("throttle.prefix %q: %v, want an error naming throttle.prefix", prefix, err)
		}
	}
	if err := DefaultConfig().validate(); err != nil {
		t.Fatalf("the default config: %v", err)
	}
}

// TestConnectionURLsAreParsed: every command refuses the connection URLs
// serve would refuse at start-up (naming the setting and never echoing a
// password); config check and serve refuse a database.url that sets
// pool_max_conns, which serve's configured pool sizes would silently
// override, while the commands that take it (migrate, prepare…) load it.
func TestConnectionURLsAreParsed(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"redis scheme", func(c *Config) { c.Redis.URL = "notaurl://x" }, "redis.url"},
		{"redis port", func(c *Config) { c.Redis.URL = "redis://:hunter2@h:badport/0" }, "redis.url"},
		{"database option", func(c *Config) { c.Database.URL = "postgres://u:hunter2@h:5432/x?pool_min_conns=abc" }, "database.url"},
		{"admin URL", func(c *Config) { c.Database.AdminURL = "postgres://u@h:notaport/x" }, "database.admin_url"},
		{"writer URL", func(c *Config) { c.Geofence.WriterDatabaseURL = "postgres://u@h/x?sslmode=sometimes" }, "geofence.writer_database_url"},
	} {
		cfg := DefaultConfig()
		tc.set(&cfg)
		err := cfg.validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Database.URL = "postgres://geotoll_reader@127.0.0.1:5432/geotoll?sslmode=disable&pool_min_conns=1"
	cfg.Redis.URL = "redis://127.0.0.1:6379/0"
	if err := cfg.validate(); err != nil {
		t.Errorf("good URLs: %v", err)
	}
	for _, conn := range []string{"postgres://u@h:5432/x?pool_max_conns=9", "host=h user=u pool_max_conns=9"} {
		cfg := DefaultConfig()
		cfg.Database.URL = conn
		if err := cfg.validate(); err != nil {
			t.Errorf("%s: %v: the commands that open one pool take its size", conn, err)
		}
		if err := checkConfig(cfg); err == nil || !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("config check of %s: %v, want an error naming pool_max_conns", conn, err)
		}
	}
	for _, conn := range []string{"postgres://u:pool_max_conns@h/x", "host=h dbname=pool_max_conns"} {
		cfg := DefaultConfig()
		cfg.Database.URL = conn
		if err := checkConfig(cfg); err != nil {
			t.Errorf("config check of %s: %v", conn, err)
		}
	}
}

// TestBasePathIsAPath: every URL the server writes (TileJSON, the
// catalog, a fence's Location, the preview page) starts with base_path as
// it is configured, so one that is not a clean absolute path is a
// configuration error naming base_path — not a server that answers
// below "/maps" while its TileJSON says "http://hostmaps/tiles/…".
func TestBasePathIsAPath(t *testing.T) {
	for _, good := range []string{"", "/", "/maps", "/maps/", "/a/b-c_d.e~f"} {
		cfg := DefaultConfig()
		cfg.BasePath = good
		if err := cfg.validate(); err != nil {
			t.Errorf("base_path %q: %v", good, err)
		}
	}
	for _, bad := range []string{"maps", "maps/", "/maps?x=1", "/maps#top", "/a b", "/a//b", "//maps", "/a/../b", "/./a", "/a/..", `/x"y`, "/%2e"} {
		cfg := DefaultConfig()
		cfg.BasePath = bad
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "base_path") {
			t.Errorf("base_path %q: %v, want an error naming base_path", bad, err)
		}
	}
}

// TestNoLimitTurnsOffSilently: a value a setting cannot mean — negative,
// NaN, or zero where zero is not its documented "off" — is a
// configuration error naming the key, never a limit that quietly goes
// away (an IPv6 aggregate, a global budget, a tier's max_cost or
// max_in_flight, a database 503's Retry-After, the header limit).
func TestNoLimitTurnsOffSilently(t *testing.T) {
	nan := math.NaN()
	tier := func(f func(*TierConfig)) func(*Config) {
		return func(c *Config) {
			tc := c.Throttle.Tiers["free"]
			f(&tc)
			c.Throttle.Tiers["free"] = tc
		}
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"ipv6 aggregate prefix 0 with a rate", func(c *Config) { c.Throttle.IPv6Aggregate.Prefix = 0 }, "throttle.ipv6_aggregate"},
		{"ipv6 aggregate rate negative", func(c *Config) { c.Throttle.IPv6Aggregate.Rate = -1 }, "throttle.ipv6_aggregate"},
		{"ipv6 aggregate rate NaN", func(c *Config) { c.Throttle.IPv6Aggregate.Rate = nan }, "throttle.ipv6_aggregate"},
		{"global rate negative", func(c *Config) { c.Throttle.Global = BucketConfig{Rate: -1, Capacity: 1000} }, "throttle.global"},
		{"global rate NaN", func(c *Config) { c.Throttle.Global = BucketConfig{Rate: nan, Capacity: 1000} }, "throttle.global"},
		{"tier max_cost negative", tier(func(t *TierConfig) { t.MaxCost = -1 }), "throttle.tiers.free.max_cost"},
		{"tier max_cost NaN", tier(func(t *TierConfig) { t.MaxCost = nan }), "throttle.tiers.free.max_cost"},
		{"tier max_in_flight negative", tier(func(t *TierConfig) { t.MaxInFlight = -1 }), "throttle.tiers.free.max_in_flight"},
		{"database retry_after 0", func(c *Config) { c.Database.RetryAfter = 0 }, "database.retry_after"},
		{"database retry_after negative", func(c *Config) { c.Database.RetryAfter = -1 }, "database.retry_after"},
		{"http max_header_bytes 0", func(c *Config) { c.HTTP.MaxHeaderBytes = 0 }, "http.max_header_bytes"},
		{"http max_header_bytes negative", func(c *Config) { c.HTTP.MaxHeaderBytes = -1 }, "http.max_header_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.set(&cfg)
			if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error naming %s", err, tc.want)
			}
		})
	}
	// The documented offs stay offs.
	cfg := DefaultConfig()
	cfg.Throttle.IPv6Aggregate = AggregateConfig{}
	cfg.Throttle.Global = BucketConfig{}
	tc := cfg.Throttle.Tiers["free"]
	tc.MaxCost, tc.MaxInFlight = 0, 0
	cfg.Throttle.Tiers["free"] = tc
	if err := cfg.validate(); err != nil {
		t.Fatalf("aggregate and global off, free without max_cost and max_in_flight: %v", err)
	}
}

// TestNonFiniteSettingsAreRefused: an infinite or NaN number (YAML .inf,
// .nan; Inf, NaN in the environment) is no price unit, timeout factor or
// sample ratio: refused, naming the key. ms_per_token .inf made every
// price the base price, timeout_factor .inf overflowed every request's
// statement budget to the 250 ms floor.
func TestNonFiniteSettingsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"ms_per_token inf", func(c *Config) { c.Throttle.MsPerToken = math.Inf(1) }, "throttle.ms_per_token"},
		{"timeout_factor inf", func(c *Config) { c.Throttle.TimeoutFactor = math.Inf(1) }, "timeout_factor"},
		{"sample_ratio NaN", func(c *Config) { c.Tracing.SampleRatio = math.NaN() }, "tracing.sample_ratio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.set(&cfg)
			if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestAdminKeysAreCheckedWithTheConfig: a static fence admin key shorter
// than 16 bytes (or with surrounding spaces) refuses serve; `config check`
// and every other command must refuse it too, naming geofence.admin_keys,
// rather than call a configuration ok that serve will not start with.
func TestAdminKeysAreCheckedWithTheConfig(t *testing.T) {
	// Two keys on two lines of GEOTOLL_GEOFENCE_ADMIN_KEYS_FILE are one key
	// holding a line break, which no HTTP header can carry.
	for _, keys := range [][]string{{"short"}, {"0123456789abcdef", " 0123456789abcdef"}, {"0123456789abcdef\nfedcba9876543210"}} {
		cfg := DefaultConfig()
		cfg.Geofence.AdminKeys = keys
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "geofence.admin_keys") {
			t.Errorf("admin keys %q: %v, want an error naming geofence.admin_keys", keys, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Geofence.AdminKeys = []string{"0123456789abcdef"}
	if err := cfg.validate(); err != nil {
		t.Errorf("a 16-byte admin key: %v", err)
	}
}

func TestDefaultConfigIsPayable(t *testing.T) {
	toll, err := DefaultConfig().toll()
	if err != nil {
		t.Fatal(err)
	}
	toll.Store = throttle.NewMemoryStore(throttle.MemoryOptions{})
	if err := toll.Validate(); err != nil {
		t.Fatalf("default tiers cannot pay the default prices: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Throttle.Tiers["anonymous"] = TierConfig{Rate: 10, Capacity: 50} // below max_cost 60
	toll, _ = cfg.toll()
	toll.Store = throttle.NewMemoryStore(throttle.MemoryOptions{})
	if err := toll.Validate(); err == nil {
		t.Fatal("a tier below max_cost was accepted")
	}
}

// The IPv6 aggregate is on by default (/48, four anonymous budgets), can be
// turned off with rate 0, and must be able to pay the dearest request.
func TestIPv6AggregateConfig(t *testing.T) {
	toll, err := DefaultConfig().toll()
	if err != nil {
		t.Fatal(err)
	}
	if a := toll.IPv6Aggregate; a.Bits != 48 || a.Limit.Rate != 40 || a.Limit.Capacity != 320 {
		t.Fatalf("default aggregate %+v", a)
	}
	cfg := DefaultConfig()
	cfg.Throttle.IPv6Aggregate.Rate = 0
	if toll, _ = cfg.toll(); toll.IPv6Aggregate.Bits != 0 {
		t.Fatalf("rate 0 left the aggregate on: %+v", toll.IPv6Aggregate)
	}
	for _, bad := range []AggregateConfig{{Prefix: 64, Rate: 1, Capacity: 320}, {Prefix: 48, Rate: 1, Capacity: 50}} {
		cfg.Throttle.IPv6Aggregate = bad
		toll, _ = cfg.toll()
		toll.Store = throttle.NewMemoryStore(throttle.MemoryOptions{})
		if err := toll.Validate(); err == nil || !strings.Contains(err.Error(), "ipv6 aggregate") {
			t.Errorf("aggregate %+v: %v", bad, err)
		}
	}
}

// The tarpit is on by default (1 s, 1,024 held), off with max_hold 0s,
// and a hold must end well before the request's deadline.
func TestTarpitConfig(t *testing.T) {
	toll, err := DefaultConfig().toll()
	if err != nil {
		t.Fatal(err)
	}
	if tp := toll.Tarpit; tp == nil || tp.MaxHold != time.Second || tp.MaxHeld != 1024 {
		t.Fatalf("default tarpit %+v", tp)
	}
	cfg := DefaultConfig()
	cfg.Throttle.Tarpit.MaxHold = 0
	if toll, _ = cfg.toll(); toll.Tarpit != nil || cfg.validate() != nil {
		t.Fatalf("max_hold 0s left the tarpit on: %+v (%v)", toll.Tarpit, cfg.validate())
	}
	for _, bad := range []TarpitConfig{{MaxHold: -time.Second, MaxHeld: 1}, {MaxHold: 11 * time.Second, MaxHeld: 1}, {MaxHold: time.Second}} {
		cfg.Throttle.Tarpit = bad
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "throttle.tarpit") {
			t.Errorf("tarpit %+v: %v", bad, err)
		}
	}
}

// The anonymous callers share 2 of the 4 connections by default; 0 is no
// share, and a share as large as the pool leaves the keyed callers one
// connection (a pool of one is all the share's).
func TestAnonymousShareConfig(t *testing.T) {
	toll, err := DefaultConfig().toll()
	if err != nil {
		t.Fatal(err)
	}
	if s := toll.AnonymousShare; s == nil || s.Size() != 2 {
		t.Fatalf("default anonymous share %+v", s)
	}
	cfg := DefaultConfig()
	cfg.Database.AnonymousMaxConns = 0
	if toll, _ = cfg.toll(); toll.AnonymousShare != nil || cfg.validate() != nil {
		t.Fatalf("anonymous_max_conns 0 left a share: %+v (%v)", toll.AnonymousShare, cfg.validate())
	}
	cfg.Database.AnonymousMaxConns = -1
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "anonymous_max_conns") {
		t.Errorf("anonymous_max_conns -1: %v", err)
	}
	// A pool as large as the share: the keyed callers keep one.
	cfg.Database.AnonymousMaxConns, cfg.Database.MaxConns = 2, 2
	if toll, _ = cfg.toll(); cfg.validate() != nil || toll.AnonymousShare == nil || toll.AnonymousShare.Size() != 1 {
		t.Errorf("max_conns 2: %v, share %+v", cfg.validate(), toll.AnonymousShare)
	}
	// A pool smaller than the share: the share is the whole pool.
	cfg.Database.AnonymousMaxConns, cfg.Database.MaxConns = 2, 1
	if toll, _ = cfg.toll(); cfg.validate() != nil || toll.AnonymousShare == nil || toll.AnonymousShare.Size() != 1 {
		t.Errorf("max_conns 1: %v, share %+v", cfg.validate(), toll.AnonymousShare)
	}
}

// TestPublicURLConfig: http.public_url is the base of every absolute URL
// the server writes, so it must be an absolute http or https URL with a
// valid host[:port], no user information, query or fragment, and a path
// that is base_path (the routes answer below base_path, and the URLs
// written without a host — a fence's Location, the fence pages' next,
// the preview page — start with it): anything else is a configuration
// error naming http.public_url. Loaded from YAML and from
// GEOTOLL_HTTP_PUBLIC_URL alike.
func TestPublicURLConfig(t *testing.T) {
	for _, tc := range []struct {
		url, basePath string
		ok            bool
	}{
		{"", "", true},
		{"https://tiles.example.com", "", true},
		{"https://tiles.example.com/", "", true},
		{"http://127.0.0.1:8080", "", true},
		{"https://[2001:db8::1]:8443", "", true},
		{"HTTPS://Tiles.Example.com:443", "", true},
		{"https://tiles.example.com/maps", "/maps", true},
		{"https://tiles.example.com/maps/", "/maps", true},
		{"https://tiles.example.com/maps", "/maps/", true},
		{"https://tiles.example.com/a/b", "/a/b", true},

		{"tiles.example.com", "", false},
		{"//tiles.example.com", "", false},
		{"/maps", "/maps", false},
		{"ftp://tiles.example.com", "", false},
		{"https://", "", false},
		{"https:///maps", "/maps", false},
		{"https://tiles.example.com?x=1", "", false},
		{"https://tiles.example.com/?", "", false},
		{"https://tiles.example.com#top", "", false},
		{"https://tiles.example.com/#", "", false},
		{"https://user:secret@tiles.example.com", "", false},
		{"https://tiles.example.com:abc", "", false},
		{"https://tiles.example.com:0", "", false},
		{"https://tiles.example.com:65536", "", false},
		{"https://tiles.example.com:", "", false},
		{"https://tiles example.com", "", false},
		{"https://tiles.example.com/maps", "", false},
		{"https://tiles.example.com", "/maps", false},
		{"https://tiles.example.com/other", "/maps", false},
		{"https://tiles.example.com/m%61ps", "/maps", false},
		{"https://tiles.example.com/maps/../maps", "/maps", false},
	} {
		cfg := DefaultConfig()
		cfg.HTTP.PublicURL, cfg.BasePath = tc.url, tc.basePath
		err := cfg.validate()
		switch {
		case tc.ok && err != nil:
			t.Errorf("http.public_url %q (base_path %q): %v", tc.url, tc.basePath, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "http.public_url")):
			t.Errorf("http.public_url %q (base_path %q): %v, want an error naming http.public_url", tc.url, tc.basePath, err)
		}
	}

	clearConfigEnv(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "public.yaml")
	if err := os.WriteFile(path, []byte("base_path: /maps\nhttp: {public_url: \"https://tiles.example.com/maps\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig([]string{"-config", path})
	if err != nil || cfg.HTTP.PublicURL != "https://tiles.example.com/maps" {
		t.Fatalf("from YAML: %q, %v", cfg.HTTP.PublicURL, err)
	}
	t.Setenv("GEOTOLL_HTTP_PUBLIC_URL", "https://tiles.example.com:abc/maps")
	if _, _, err := loadConfig([]string{"-config", path}, true); err == nil || !strings.Contains(err.Error(), "http.public_url") {
		t.Fatalf("from the environment, an invalid port: %v, want an error naming http.public_url", err)
	}
}

// An API key's statements use at most key_max_conns connections at once
// when it is set below the pool; by default, or at the pool or above, no
// cap.
func TestKeyShareConfig(t *testing.T) {
	for _, tc := range []struct {
		name          string
		maxConns, key int32
		want          int // 0: no share
	}{
		{"default", 4, 0, 0},
		{"all but one", 4, 3, 3},
		{"set", 4, 2, 2},
		{"the whole pool", 4, 4, 0},
		{"more than the pool", 4, 9, 0},
		{"a pool of one", 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Database.MaxConns, cfg.Database.KeyMaxConns = tc.maxConns, tc.key
			if err := cfg.validate(); err != nil {
				t.Fatal(err)
			}
			toll, err := cfg.toll()
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			if toll.KeyShares != nil {
				got = toll.KeyShares.Size()
			}
			if got != tc.want {
				t.Errorf("a key's share: %d connections, want %d", got, tc.want)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Database.KeyMaxConns = -1
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "key_max_conns -1") {
		t.Errorf("key_max_conns -1: %v", err)
	}
}

// A tile layer's shadow and weights apply to its tiles only, not to the
// geofence layer of the same name (the demo serves places as both).
func TestTileLayerSettingsStayOffTheGeofenceLayer(t *testing.T) {
	clearConfigEnv(t)
	path := filepath.Join(t.TempDir(), "geotoll.yaml")
	if err := os.WriteFile(path, []byte(`
layers:
  - name: places
    shadow: true
    weights: {max_cost: 5, radius_weight: 9}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := LoadConfig([]string{"-config", path})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := cfg.toll()
	if err != nil {
		t.Fatal(err)
	}
	gate.Store = throttle.NewMemoryStore(throttle.MemoryOptions{})
	if got := gate.LayerWeights["places"].MaxCost; got != 5 || !gate.ShadowLayers["places"] {
		t.Fatalf("the places tile layer: max_cost %v, shadow %v", got, gate.ShadowLayers["places"])
	}
	within := geofence.Demand{Kind: geofence.KindWithin, Layer: "places", RadiusM: 50000, Limit: 100, Points: 1}
	if got, want := gate.GeofencePrice(within), cfg.Throttle.Weights.apply(throttle.DefaultWeights()).MaxCost; got != want {
		t.Errorf("within 50 km on places costs %v, want the default max_cost %v", got, want)
	}
	codes := make([]int, 2) // the anonymous bucket (80) pays one 60-token query
	for i := range codes {
		r := httptest.NewRequest(http.MethodGet, "/geofence/within", nil)
		r.RemoteAddr = "192.0.2.44:5000"
		w := httptest.NewRecorder()
		gate.AdmitGeofence(w, r, within)
		codes[i] = w.Code
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests {
		t.Fatalf("two 50 km within queries on places: %v, want [200 429]", codes)
	}
}
