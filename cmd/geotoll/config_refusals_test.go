package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
)

// refuses runs validate on the defaults changed by set and fails unless
// it refuses them naming want.
func refuses(t *testing.T, what string, set func(*Config), want string) {
	t.Helper()
	cfg := DefaultConfig()
	set(&cfg)
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want an error naming %s", what, err, want)
	}
}

// accepts runs validate on the defaults changed by set and fails if it
// refuses them.
func accepts(t *testing.T, what string, set func(*Config)) {
	t.Helper()
	cfg := DefaultConfig()
	set(&cfg)
	if err := cfg.validate(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// TestConfigReadinessIsBounded: a round of readiness checks pings the
// database and Redis, so http.ready_interval 1ns pinged them as fast as
// they answered (1340 transactions in 3 s), and ready_timeout 1h let a
// round hang for an hour: both are held to 100ms..1m, named.
func TestConfigReadinessIsBounded(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 99 * time.Millisecond, time.Minute + time.Second, time.Hour} {
		refuses(t, "ready_interval "+d.String(), func(c *Config) { c.HTTP.ReadyInterval = d }, "http.ready_interval")
		refuses(t, "ready_timeout "+d.String(), func(c *Config) { c.HTTP.ReadyTimeout = d }, "http.ready_timeout")
	}
	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, time.Minute} {
		accepts(t, "ready_interval and ready_timeout "+d.String(), func(c *Config) { c.HTTP.ReadyInterval, c.HTTP.ReadyTimeout = d, d })
	}
	code, out, errOut := cliRun(t, "config", "check", "-http-ready-interval", "1ns")
	if code != exitError || !strings.Contains(errOut, "http.ready_interval 1ns must be within 100ms..1m0s") {
		t.Errorf("config check -http-ready-interval 1ns: exit %d, want 1 and the key named:\n%s%s", code, out, errOut)
	}
}

// TestConfigReadyRoundsAreAnIntervalApart: a round of readiness checks
// slower than the interval is followed by the next an interval after it
// ended, not at once (a ticker's tick was waiting by then).
func TestConfigReadyRoundsAreAnIntervalApart(t *testing.T) {
	const interval, round = server.MinReadyInterval, 150 * time.Millisecond
	var (
		mu           sync.Mutex
		starts, ends []time.Time
	)
	check := func(context.Context) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(round)
		mu.Lock()
		ends = append(ends, time.Now())
		mu.Unlock()
		return nil
	}
	rd := server.NewReadiness(map[string]server.Check{"slow": check}, interval, time.Second)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); rd.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(starts)
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds in 10s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts) && i <= len(ends); i++ {
		if gap := starts[i].Sub(ends[i-1]); gap < interval-5*time.Millisecond {
			t.Errorf("round %d started %s after round %d ended, want at least the interval, %s", i+1, gap, i, interval)
		}
	}
}

// TestConfigTracingEndpointIsAURL: tracing.endpoint "127.0.0.1:4318" (no
// scheme: the exporter posted to https://localhost:4318), "ftp://x" and
// "not a url" passed config check; the endpoint must be an http or https
// URL with a host, and the error shows no password.
func TestConfigTracingEndpointIsAURL(t *testing.T) {
	for _, e := range []string{"127.0.0.1:4318", "localhost:4318", "ftp://x", "not a url", "http://", "http:///v1/traces",
		"http://collector:0", "https://u:hunter2@collector:99999", "ftp://u:hunter2@collector"} {
		refuses(t, "endpoint "+e, func(c *Config) { c.Tracing.Endpoint = e }, "tracing.endpoint")
		cfg := DefaultConfig()
		cfg.Tracing.Endpoint = e
		if err := cfg.validate(); err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("endpoint %q: the error shows the password: %v", e, err)
		}
	}
	for _, e := range []string{"http://127.0.0.1:4318", "https://otel.example.com/v1/traces", "http://[::1]:4318", "http://u:p@collector:4318"} {
		accepts(t, "endpoint "+e, func(c *Config) { c.Tracing.Endpoint = e })
	}
}

// TestConfigTracingLogHidesThePassword: the "tracing on" log line showed
// the endpoint's password.
func TestConfigTracingLogHidesThePassword(t *testing.T) {
	var logs bytes.Buffer
	m := &Main{Config: DefaultConfig(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	m.Config.Tracing.Endpoint = "http://tracer:hunter2@127.0.0.1:9"
	if err := m.openTracing(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.closeTracing()
	if !strings.Contains(logs.String(), "tracing on") || !strings.Contains(logs.String(), "127.0.0.1:9") || strings.Contains(logs.String(), "hunter2") {
		t.Errorf("log, want the endpoint without its password:\n%s", logs.String())
	}
}

// TestConfigOfOneDocument: only the first YAML document of a config was
// read (and a file whose first document was empty was ignored entirely);
// a config or weights file of more than one document is refused.
func TestConfigOfOneDocument(t *testing.T) {
	clearConfigEnv(t)
	for _, body := range []string{"---\n---\nlisten: \":9\"\n", "listen: \":9\"\n---\nlog_level: debug\n", "listen: \":9\"\n---\n---\nlog_level: debug\n"} {
		_, _, err := LoadConfig([]string{"-config", writeFile(t, "two.yaml", body)})
		if err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
			t.Errorf("%q: %v, want it refused as more than one document", body, err)
		}
	}
	// Empty documents after it (a trailing ---, comments alone) lose nothing.
	for _, body := range []string{"---\nlisten: \":9\"\n...\n", "listen: \":9\"\n---\n", "listen: \":9\"\n---\n# nothing here\n---\n"} {
		cfg, _, err := LoadConfig([]string{"-config", writeFile(t, "one.yaml", body)})
		if err != nil || cfg.Listen != ":9" {
			t.Errorf("%q: %v, listen %q", body, err, cfg.Listen)
		}
	}
	cfg := DefaultConfig()
	cfg.Throttle.WeightsFile = writeFile(t, "weights.yaml", "tiles: {}\n---\ntiles: {}\n")
	if _, err := cfg.weightsFile(); err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
		t.Errorf("a weights file of two documents: %v", err)
	}
}

// TestConfigTierMaxCostIsMeetable: a tier's max_cost of +Inf was accepted,
// and so was one below the least price any request has (its weights'
// base), which refused every request of the tier (422).
func TestConfigTierMaxCostIsMeetable(t *testing.T) {
	tier := func(mc float64) func(*Config) {
		return func(c *Config) {
			tc := c.Throttle.Tiers["free"]
			tc.MaxCost = mc
			c.Throttle.Tiers["free"] = tc
		}
	}
	refuses(t, "max_cost +Inf", tier(math.Inf(1)), "throttle.tiers.free.max_cost")
	refuses(t, "max_cost below the base", tier(0.005), "throttle.tiers.free.max_cost 0.005 is below 0.01")
	accepts(t, "max_cost at the base", tier(0.01))
	accepts(t, "no max_cost", tier(0))
	// A layer's base below the default's: a request of it costs that little.
	cheap := func(c *Config) {
		base := 0.002
		c.Layers[0].Weights = &WeightsConfig{Base: &base}
	}
	accepts(t, "max_cost above a layer's base", func(c *Config) { cheap(c); tier(0.005)(c) })
	refuses(t, "max_cost below every base", func(c *Config) { cheap(c); tier(0.001)(c) }, "throttle.tiers.free.max_cost")
	code, out, errOut := cliRun(t, "config", "check", "-throttle-tiers-pro-max-cost", "+Inf")
	if code != exitError || !strings.Contains(errOut, "throttle.tiers.pro.max_cost") {
		t.Errorf("config check -throttle-tiers-pro-max-cost +Inf: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestConfigListenIsAnAddress: listen "" passed config check and served
// on a random port of every interface; a port out of range, or listen and
// metrics_listen on one address (also spelled as localhost and
// 127.0.0.1), passed config check and failed serve after its start-up.
func TestConfigListenIsAnAddress(t *testing.T) {
	refuses(t, "listen empty", func(c *Config) { c.Listen = "" }, "listen must be set")
	refuses(t, "listen without a port", func(c *Config) { c.Listen = "8080" }, "listen")
	refuses(t, "metrics_listen without a port", func(c *Config) { c.MetricsListen = "localhost" }, "metrics_listen")
	refuses(t, "listen past port 65535", func(c *Config) { c.Listen = "127.0.0.1:99999" }, "port 99999 is not within 0..65535")
	refuses(t, "listen on a negative port", func(c *Config) { c.Listen = ":-1" }, "listen")
	refuses(t, "metrics_listen past port 65535", func(c *Config) { c.MetricsListen = ":70000" }, "metrics_listen")
	refuses(t, "listen on an unknown service", func(c *Config) { c.Listen = ":no-such-service" }, "neither a number nor a known service")
	refuses(t, "one address twice", func(c *Config) { c.Listen, c.MetricsListen = "127.0.0.1:8080", "127.0.0.1:8080" }, "one address")
	refuses(t, "a port of every interface and of one", func(c *Config) { c.Listen, c.MetricsListen = ":8080", "127.0.0.1:8080" }, "one address")
	refuses(t, "localhost and its loopback", func(c *Config) { c.Listen, c.MetricsListen = "localhost:8080", "127.0.0.1:8080" }, "one address")
	refuses(t, "an IPv4-mapped address and its IPv4 one", func(c *Config) { c.Listen, c.MetricsListen = "[::ffff:127.0.0.1]:8080", "127.0.0.1:8080" }, "one address")
	refuses(t, "every interface spelled in full", func(c *Config) { c.Listen, c.MetricsListen = "[0:0:0:0:0:0:0:0]:8080", "127.0.0.1:8080" }, "one address")
	refuses(t, "a host name in capitals", func(c *Config) { c.Listen, c.MetricsListen = "LocalHost:8080", "localhost:8080" }, "one address")
	accepts(t, "listeners", func(c *Config) { c.Listen, c.MetricsListen = "127.0.0.1:0", ":9090" })
	accepts(t, "two random ports", func(c *Config) { c.Listen, c.MetricsListen = "127.0.0.1:0", "127.0.0.1:0" })
	accepts(t, "one port on two hosts", func(c *Config) { c.Listen, c.MetricsListen = "127.0.0.1:8080", "127.0.0.2:8080" })
	accepts(t, "port 65535", func(c *Config) { c.Listen = "127.0.0.1:65535" })
	code, out, errOut := cliRun(t, "config", "check", "-listen", "")
	if code != exitError || !strings.Contains(errOut, "listen must be set") {
		t.Errorf("config check -listen '': exit %d:\n%s%s", code, out, errOut)
	}
}

// TestConfigSecretsAreNotEchoed: geofence.admin_keys written as a string
// failed with a YAML type error quoting the key's first 7 characters; a
// secret's value is never shown, another key's still is.
func TestConfigSecretsAreNotEchoed(t *testing.T) {
	clearConfigEnv(t)
	_, _, err := LoadConfig([]string{"-config", writeFile(t, "secret.yaml", "geofence:\n  admin_keys: SUPERSECRETADMINKEY\n")})
	if err == nil || !strings.Contains(err.Error(), "line 2: cannot unmarshal !!str (a value on a line holding geofence.admin_keys, a secret: not shown) into []string") {
		t.Errorf("admin_keys as a string: %v, want the key named and its value hidden", err)
	}
	body := "geofence: {admin_keys: SUPERSECRETADMINKEY}\nredis:\n  password: [SUPERSECRETPASSWORD]\n  timeout: SOONISH\n"
	_, _, err = LoadConfig([]string{"-config", writeFile(t, "secrets.yaml", body)})
	if err == nil || strings.Contains(err.Error(), "SUPERSE") || !strings.Contains(err.Error(), "`SOONISH`") {
		t.Errorf("%q: %v, want the secrets hidden and the timeout shown", body, err)
	}
	// A flow-style line holding a secret and the key in error: the error is
	// not laid at the secret's door, and no value on the line is shown.
	body = "database: {url: postgres://u:SUPERSECRET@h/db, max_conns: notanumber}\n"
	_, _, err = LoadConfig([]string{"-config", writeFile(t, "flow.yaml", body)})
	if err == nil || strings.Contains(err.Error(), "SUPERSE") || strings.Contains(err.Error(), "database.url: cannot") ||
		!strings.Contains(err.Error(), "into int32") {
		t.Errorf("%q: %v, want the max_conns error, no value shown, not named as the url's", body, err)
	}
}

// TestConfigExampleSaysWhatZeroMeans: the example showed max_age: 0s,
// maxzoom: 0, buffer: 0 where 0 means the default (1m, 22, 64); each
// zero that means a default says which, and http.cors.max_age shows the
// 10m it is.
func TestConfigExampleSaysWhatZeroMeans(t *testing.T) {
	var b bytes.Buffer
	if err := writeExample(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"    maxzoom: 0 # 0 means 22\n", "    buffer: 0 # 0 means 64\n", "    max_age: 0s # 0s means 1m0s\n",
		"      tolerance_px: 0 # 0 means 1\n", "    max_age: 10m0s # GEOTOLL_HTTP_CORS_MAX_AGE\n",
		"    minzoom: 0\n", // a real 0
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the example has no line %q", want)
		}
	}
	var doc bytes.Buffer
	if err := writeDoc(&doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc.String(), "A number field of 0 (a duration of 0s, an empty text) means the field's default") {
		t.Error("the reference of layers does not say what 0 means")
	}
}

// TestConfigTileLayerPropertyNames: a tile layer's properties [""]
// passed config check and failed serve, [name, name] passed everywhere;
// both are refused, as geofence layers refuse them.
func TestConfigTileLayerPropertyNames(t *testing.T) {
	clearConfigEnv(t)
	for props, want := range map[string]string{`[""]`: "a property name is empty", "[name, kind, name]": `property "name" is listed twice`} {
		cfg, _, err := LoadConfig([]string{"-config", writeFile(t, "props.yaml", "layers: [{name: places, properties: "+props+"}]\n")})
		if err != nil {
			t.Fatalf("%s: %v", props, err)
		}
		if err := checkConfig(cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("properties %s: config check %v, want %q", props, err, want)
		}
	}
	l := tiles.Layer{Name: "a", Table: "t", GeometryColumn: "g", Properties: []string{"x", "y"}}
	if _, err := tiles.NewCatalog([]tiles.Layer{l}); err != nil {
		t.Errorf("two properties: %v", err)
	}
}

// TestConfigCheckOutFile: a path whose directory does not exist, or is a
// file, or that is a directory, cannot be written; a new file in a
// directory, or an existing file, can (and is left as it was).
func TestConfigCheckOutFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.json")
	if err := os.WriteFile(file, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "none", "x.json"): "does not exist",
		filepath.Join(file, "x.json"):        "is not a directory",
		dir:                                  "is a directory",
	} {
		if err := checkOutFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	for _, path := range []string{filepath.Join(dir, "new.json"), file} {
		if err := checkOutFile(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "kept" {
		t.Errorf("the existing file holds %q after the check", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the check left files behind: %v", entries)
	}
}

// YAML anchors and aliases work across the file: a tier or layer (each
// decoded on its own) naming an anchor defined elsewhere was refused
// ("unknown anchor 'r' referenced"), as were merge keys from one.
func TestConfigAliasesAcrossTheFile(t *testing.T) {
	clearConfigEnv(t)
	body := `throttle:
  failed_auth: {rate: &r 0.5, capacity: &c 7}
  tiers:
    free: &free {rate: *r, capacity: 50}
    gold:
      <<: *free
      capacity: *c
`
	cfg, _, err := LoadConfig([]string{"-config", writeFile(t, "aliases.yaml", body)})
	if err != nil {
		t.Fatalf("a config with aliases: %v", err)
	}
	free, gold := cfg.Throttle.Tiers["free"], cfg.Throttle.Tiers["gold"]
	if free.Rate != 0.5 || free.Capacity != 50 || gold.Rate != 0.5 || gold.Capacity != 7 {
		t.Errorf("tiers free %+v, gold %+v; want rate 0.5 both, capacity 50 and 7", free, gold)
	}
}

// A key given twice in a tier or layer is named without a line number of
// its own re-encoding: "already defined at line 1" pointed at the file's
// first line, while the tier's line was 4.
func TestConfigDuplicateKeyNamesNoWrongLine(t *testing.T) {
	clearConfigEnv(t)
	body := "log_level: info\nthrottle:\n  tiers:\n    free: {rate: 1, rate: 2, capacity: 5}\n"
	_, _, err := LoadConfig([]string{"-config", writeFile(t, "dup.yaml", body)})
	if err == nil || !strings.Contains(err.Error(), `throttle.tiers.free (line 4): mapping key "rate" already defined`) ||
		strings.Contains(err.Error(), "line 1") {
		t.Errorf("a key twice in a tier: %v", err)
	}
}

// An empty variable is ignored, as if unset; a list is emptied with ",",
// as the README says (CORS off).
func TestConfigEmptyListFromTheEnvironment(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("GEOTOLL_HTTP_CORS_ORIGINS", "")
	cfg, _, err := loadConfig(nil, true)
	if err != nil || len(cfg.HTTP.CORS.Origins) == 0 {
		t.Fatalf("an empty GEOTOLL_HTTP_CORS_ORIGINS: %v, origins %q; want the default kept", err, cfg.HTTP.CORS.Origins)
	}
	t.Setenv("GEOTOLL_HTTP_CORS_ORIGINS", ",")
	cfg, _, err = loadConfig(nil, true)
	if err != nil || len(cfg.HTTP.CORS.Origins) != 0 {
		t.Errorf("GEOTOLL_HTTP_CORS_ORIGINS=,: %v, origins %q; want none", err, cfg.HTTP.CORS.Origins)
	}
}

// A file whose aliases expand to more than any configuration holds (each
// merge of ten aliases of the entry before multiplies it by ten: 455
// bytes, a million layers) is refused at once, naming the aliases: the
// copies made of a layer's aliases before decoding it took every byte of
// memory and died with a stack trace.
func TestConfigRefusesAliasesThatExpandWithoutBound(t *testing.T) {
	clearConfigEnv(t)
	var b strings.Builder
	b.WriteString("layers:\n  - &m0 {name: a0, table: x.y, geometry_column: g}\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - &m%d {<<: [%s], name: a%d}\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d,", i-1), 10), ","), i)
	}
	start := time.Now()
	_, _, err := LoadConfig([]string{"-config", writeFile(t, "bomb.yaml", b.String())})
	if err == nil || !strings.Contains(err.Error(), "aliases") {
		t.Errorf("a file of %d bytes whose aliases expand to a million layers: %v, want an error naming the aliases", b.Len(), err)
	}
	t.Logf("refused after %v", time.Since(start))
}

// A whole-number setting given a fraction through an alias or a merge key
// (<<) is refused as one given it directly: the alias hid the 0.5 from
// the check, and the server started with max_in_flight 0 (the store's own
// cap, 256).
func TestConfigRefusesAFractionThroughAnAlias(t *testing.T) {
	loadEach(t, map[string]string{
		"tier":       "throttle:\n  tiers:\n    anonymous: {max_cost: &h 0.5, max_in_flight: *h}\n",
		"top level":  "throttle:\n  tiers:\n    anonymous: {max_cost: &h 0.5}\nhttp:\n  max_header_bytes: *h\n",
		"merge key":  "throttle: {tiers: {anonymous: {<<: {max_in_flight: 0.5}}}}\n",
		"merge list": "throttle: {tiers: {anonymous: {<<: [{max_in_flight: 0.5}]}}}\n",
		"merged map": "http: {<<: {max_header_bytes: 1000.5}}\n",
	}, func(name string, err error) {
		if err == nil || !strings.Contains(err.Error(), "is not a whole number") {
			t.Errorf("%s: a fraction through an alias: %v, want it refused as not a whole number", name, err)
		}
	})
}

// loadEach loads each configuration file of bodies (by name) and hands
// check the error.
func loadEach(t *testing.T, bodies map[string]string, check func(name string, err error)) {
	t.Helper()
	clearConfigEnv(t)
	for name, body := range bodies {
		_, _, err := LoadConfig([]string{"-config", writeFile(t, "config.yaml", body)})
		check(name, err)
	}
}

// A URL refused for its form is shown without its password: http.public_url
// (which may hold no user information) and a CORS origin showed it whole,
// and pgx hides a database URL's password only up to its first "@".
func TestConfigURLErrorsHideTheirPasswords(t *testing.T) {
	loadEach(t, map[string]string{
		"public_url":   "http:\n  public_url: http://u:SUPERSECRET11@tiles.example.com\n",
		"cors origin":  "http:\n  cors:\n    origins: ['http://u:SUPERSECRET11@maps.example.com']\n",
		"database url": "database:\n  url: 'postgres://u:p@SUPERSECRET11@host:abc/db'\n",
		"a / in it":    "http:\n  public_url: http://u:pa/SUPERSECRET11@tiles.example.com\n",
		"redis addrs":  "redis:\n  cluster: true\n  addrs: ['redis://u:SUPERSECRET11@127.0.0.1:6379']\n",
	}, func(name string, err error) {
		if err == nil || strings.Contains(err.Error(), "SUPERSECRET") {
			t.Errorf("%s: %v, want an error without the password", name, err)
		}
	})
	if code, _, errOut := cliRun(t, "loadtest", "-url", "http://u:SUPERSECRET11@127.0.0.1:8080"); code != exitUsage || strings.Contains(errOut, "SUPERSECRET") {
		t.Errorf("loadtest -url with a password: exit %d, %s", code, errOut)
	}
}

// An OTLP endpoint given by OTEL_EXPORTER_OTLP_ENDPOINT (or its traces'
// variable), which turns tracing on, is checked as tracing.endpoint is:
// "ftp://…" was posted to as https, "not a url" to a URL without a host,
// and config check said ok.
func TestConfigTracingEndpointFromTheEnvironmentIsAURL(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		for _, e := range []string{"ftp://u:hunter2@127.0.0.1:1", "not a url", "127.0.0.1:4318"} {
			t.Setenv(v, e)
			err := DefaultConfig().validate()
			if err == nil || !strings.Contains(err.Error(), v) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("%s=%q: %v, want it refused, named, its password hidden", v, e, err)
			}
		}
		t.Setenv(v, " http://127.0.0.1:4318 ") // the exporter trims it
		if err := DefaultConfig().validate(); err != nil {
			t.Errorf("%s=http://127.0.0.1:4318: %v", v, err)
		}
		t.Setenv(v, "")
	}
	// The traces' own variable wins, as in the exporter: the general one,
	// unused then, is not checked.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces")
	if err := DefaultConfig().validate(); err != nil {
		t.Errorf("both variables, the traces' a URL: %v", err)
	}
}

// A GEOTOLL_ variable that sets nothing — a misspelt setting's
// (GEOTOLL_REDIS_TIMEOUTT), a non-secret's _FILE — is named in a warning,
// with the setting it likely misspells; the settings' own, their secrets'
// _FILE, the aliases and the scripts' and tests' variables are not. It was
// ignored without a word.
func TestConfigWarnsOfStrayEnvironmentVariables(t *testing.T) {
	o := newOverrides()
	got := o.strayEnv([]string{
		"GEOTOLL_REDIS_TIMEOUTT=1s", "GEOTOLL_LISTEN_FILE=/x", "GEOTOLL_NOTHING_LIKE_IT=1",
		"GEOTOLL_REDIS_TIMEOUT=1s", "GEOTOLL_REDIS_URL_FILE=/x", "GEOTOLL_WRITER_DATABASE_URL=x", "GEOTOLL_CONFIG=x",
		"GEOTOLL_TEST_DATABASE_URL=x", "GEOTOLL_READ_DATABASE_URL=x", "GEOTOLL_THROTTLE_TIERS_FREE_RATE=1",
		"GEOTOLL_EMPTY=", "LISTEN=:1", "HOME=/root",
	})
	want := [][2]string{
		{"GEOTOLL_REDIS_TIMEOUTT", "GEOTOLL_REDIS_TIMEOUT"},
		{"GEOTOLL_LISTEN_FILE", ""},
		{"GEOTOLL_NOTHING_LIKE_IT", ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("stray variables %q, want %q", got, want)
	}
	if n := strayNote(got[0]); !strings.Contains(n, "did you mean GEOTOLL_REDIS_TIMEOUT?") {
		t.Errorf("note %q", n)
	}
	// config check says so, on stderr, once, and still passes; so does a
	// command without a log of its own (keys, loadtest, calibrate), and
	// one with a log says it there.
	t.Setenv("GEOTOLL_REDIS_TIMEOUTT", "1s")
	code, out, errOut := cliRun(t, "config", "check")
	if code != exitOK || !strings.Contains(out, "ok") || strings.Count(errOut, "GEOTOLL_REDIS_TIMEOUTT sets nothing") != 1 {
		t.Errorf("config check with GEOTOLL_REDIS_TIMEOUTT: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"keys", "list"}, {"loadtest", "zooms", "-url", "http://127.0.0.1:1"}, {"migrate"}} {
		_, _, errOut := cliRun(t, args...)
		if strings.Count(errOut, "GEOTOLL_REDIS_TIMEOUTT sets nothing") != 1 {
			t.Errorf("geotoll %s with GEOTOLL_REDIS_TIMEOUTT: want the warning once:\n%s", strings.Join(args, " "), errOut)
		}
	}
}
