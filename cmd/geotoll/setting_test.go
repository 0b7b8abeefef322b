package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every key is named by one rule, and ff reads the variable the rule
// names; aliases rank below it; flags above both; secrets come from files.
func TestSettingsFromEnvironment(t *testing.T) {
	clearConfigEnv(t)
	secret := writeFile(t, "pw", "s3cret\n")
	t.Setenv("GEOTOLL_REDIS_TIMEOUT", "80ms")
	t.Setenv("GEOTOLL_THROTTLE_TIERS_FREE_SHADOW", "true")
	t.Setenv("GEOTOLL_HTTP_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.0.0/16")
	t.Setenv("GEOTOLL_DATABASE_URL", "postgres://canonical/db")
	t.Setenv("DATABASE_URL", "postgres://alias/db")
	t.Setenv("REDIS_URL", "redis://alias:1")
	t.Setenv("GEOTOLL_REDIS_PASSWORD_FILE", secret)
	t.Setenv("GEOTOLL_LOG_LEVEL", "warn")
	t.Setenv("GEOTOLL_THROTTLE_WEIGHTS_MAX_COST", "50")
	cfg, _, err := loadConfig([]string{"-log-level", "debug"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"redis.timeout", cfg.Redis.Timeout, 80 * time.Millisecond},
		{"free shadow", cfg.Throttle.Tiers["free"].Shadow, true},
		{"free rate kept", cfg.Throttle.Tiers["free"].Rate, 20.0},
		{"proxies", strings.Join(cfg.HTTP.TrustedProxies, " "), "10.0.0.0/8 192.168.0.0/16"},
		{"canonical over alias", cfg.Database.URL, "postgres://canonical/db"},
		{"alias", cfg.Redis.URL, "redis://alias:1"},
		{"_FILE", cfg.Redis.Password, "s3cret"},
		{"flag over env", cfg.LogLevel, "debug"},
		{"pointer", *cfg.Throttle.Weights.MaxCost, 50.0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestSettingNames(t *testing.T) {
	seen := map[string]string{}
	for _, s := range settingsOf(DefaultConfig()) {
		if s.Flag != strings.NewReplacer(".", "-", "_", "-").Replace(s.Key) || s.Env != "GEOTOLL_"+strings.ToUpper(strings.NewReplacer(".", "_").Replace(s.Key)) {
			t.Errorf("%s: flag %s env %s break the naming rule", s.Key, s.Flag, s.Env)
		}
		if other, dup := seen[s.Env]; dup {
			t.Errorf("%s and %s share %s", s.Key, other, s.Env)
		}
		seen[s.Env] = s.Key
	}
	for _, key := range []string{"database.url", "database.admin_url", "redis.url", "redis.password", "geofence.admin_keys", "geofence.writer_database_url"} {
		if s, ok := newOverrides().setting(key); !ok || !s.Secret {
			t.Errorf("%s is not a secret setting", key)
		}
	}
}

// A file's tier changes only the fields it sets; a layer merges by name
// into the demo layers, and demo_layers: false drops them.
func TestConfigMerge(t *testing.T) {
	clearConfigEnv(t)
	for _, tc := range []struct {
		name, yaml string
		check      func(Config) string
	}{
		{"one tier field", "throttle: {tiers: {free: {shadow: true}}}\n", func(c Config) string {
			if f, a := c.Throttle.Tiers["free"], c.Throttle.Tiers["anonymous"]; !f.Shadow || f.Rate != 20 || f.Capacity != 100 || f.MaxInFlight != 16 || a.Shadow {
				return "free not shadowed with its other fields kept, or another tier changed"
			}
			return ""
		}},
		{"a new tier", "throttle: {tiers: {partner: {rate: 200, capacity: 1200}}}\n", func(c Config) string {
			if len(c.Throttle.Tiers) != 4 || c.Throttle.Tiers["partner"].Capacity != 1200 {
				return "partner not added"
			}
			return ""
		}},
		{"one layer field", "layers: [{name: places, max_features: 500}]\ngeofence: {layers: [{name: districts, statement_timeout: 1s}]}\n", func(c Config) string {
			if len(c.Layers) != 3 || c.Layers[0].MaxFeatures != 500 || c.Layers[0].Table != "geotoll.places" || len(c.Layers[0].Properties) != 4 {
				return "places not merged"
			}
			if len(c.Geofence.Layers) != 3 || c.Geofence.Layers[1].StatementTimeout != time.Second || c.Geofence.Layers[1].Table != "geotoll.districts" {
				return "geofence districts not merged"
			}
			return ""
		}},
		{"no demo layers", "demo_layers: false\nlayers: [{name: roads, table: osm.roads, geometry_column: geom}]\n", func(c Config) string {
			if len(c.Layers) != 1 || c.Layers[0].Name != "roads" || len(c.Geofence.Layers) != 0 {
				return "demo layers kept"
			}
			return ""
		}},
		// A key left empty (its entries commented out) merges nothing, as
		// [] or {} does: it does not drop the demo layers or the tiers.
		{"empty layers and tiers", "layers:\n  # - name: roads\ngeofence:\n  layers:\nthrottle:\n  tiers:\n", func(c Config) string {
			if len(c.Layers) != 3 || len(c.Geofence.Layers) != 3 || len(c.Throttle.Tiers) != 3 {
				return "an empty key dropped the demo layers or the tiers"
			}
			return ""
		}},
		{"demo_layers after layers", "layers: [{name: roads, table: osm.roads, geometry_column: geom}]\ndemo_layers: false\n", func(c Config) string {
			if len(c.Layers) != 1 {
				return "demo layers kept"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := LoadConfig([]string{"-config", writeFile(t, "c.yaml", tc.yaml)})
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(cfg); msg != "" {
				t.Fatalf("%s: %+v %+v", msg, cfg.Throttle.Tiers, cfg.Layers)
			}
			if err := checkConfig(cfg); err != nil {
				t.Fatalf("config check: %v", err)
			}
		})
	}
	for _, bad := range []string{"throttle: {tiers: {free: {shadw: true}}}\n", "layers: [{name: places, max_feature: 1}]\n", "layers: {name: x}\n"} {
		if _, _, err := LoadConfig([]string{"-config", writeFile(t, "bad.yaml", bad)}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// config/geotoll.example.yaml is what `geotoll config example` prints, and
// loading it gives the defaults.
func TestExampleConfigInSync(t *testing.T) {
	clearConfigEnv(t)
	var b bytes.Buffer
	if err := writeExample(&b); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../../config/geotoll.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(file) {
		t.Fatal("config/geotoll.example.yaml is stale: go run ./cmd/geotoll config example > config/geotoll.example.yaml")
	}
	cfg, _, err := LoadConfig([]string{"-config", "../../config/geotoll.example.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	var got, want bytes.Buffer
	if err := writeYAML(&got, cfg); err != nil {
		t.Fatal(err)
	}
	if err := writeYAML(&want, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Fatalf("the example does not load as the defaults:\n%s\nwant\n%s", got.String(), want.String())
	}
}

func writeYAML(w *bytes.Buffer, cfg Config) error {
	out, err := yaml.Marshal(cfg)
	w.Write(out)
	return err
}

// Every key is documented, and README.md's reference is the generated one.
func TestConfigDocumented(t *testing.T) {
	docs := map[string]bool{}
	for _, d := range configDocs() {
		docs[d.Key] = true
	}
	keys := map[string]bool{"layers": true, "geofence.layers": true}
	for _, s := range settingsOf(DefaultConfig()) {
		keys[docKey(s.Key)] = true
		if !docs[docKey(s.Key)] {
			t.Errorf("configuration key %s is not documented (configDocs)", s.Key)
		}
	}
	for k := range docs {
		if !keys[k] {
			t.Errorf("configDocs documents %s, which is no key", k)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- config-reference: begin.*?-->\n(.*?)<!-- config-reference: end -->`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no config-reference markers")
	}
	var b bytes.Buffer
	if err := writeDoc(&b); err != nil {
		t.Fatal(err)
	}
	if string(m[1]) != b.String() {
		t.Fatal("README.md's configuration reference is stale: replace it with the output of `go run ./cmd/geotoll config doc`")
	}
}

// The README's configuration example does what the text around it says:
// the demo layers stay beside roads, and demo_layers: false leaves roads
// alone.
func TestREADMEConfigExample(t *testing.T) {
	clearConfigEnv(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)Example — the demo layers stay.*?```yaml\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: the configuration example is missing")
	}
	names := func(c Config) string {
		var n []string
		for _, l := range c.Layers {
			n = append(n, l.Name)
		}
		return strings.Join(n, ",")
	}
	cfg, _, err := LoadConfig([]string{"-config", writeFile(t, "readme.yaml", string(m[1]))})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cfg); got != "places,districts,geofences,roads" {
		t.Errorf("layers %s", got)
	}
	if pro := cfg.Throttle.Tiers["pro"]; pro.Rate != 50 || pro.Capacity != 300 || pro.MaxInFlight != 32 || cfg.Throttle.Tiers["partner"].MaxCost != 30 {
		t.Errorf("tiers %+v", cfg.Throttle.Tiers)
	}
	if err := checkConfig(cfg); err != nil {
		t.Errorf("config check: %v", err)
	}
	cfg, _, err = LoadConfig([]string{"-config", writeFile(t, "readme.yaml", "demo_layers: false\n"+string(m[1]))})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cfg); got != "roads" || len(cfg.Geofence.Layers) != 0 {
		t.Errorf("with demo_layers: false: layers %s, geofence layers %d", got, len(cfg.Geofence.Layers))
	}
}

// Every process takes token-carrying leases, one replica or several:
// their tokens Redis counts as leased while they are out, so that a refund
// by another replica cannot fill the bucket beyond its capacity less them
// (throttle's TestLeaseAndAnotherReplicasRefundsStayWithinTheCapacity),
// and their give-back replays what they admitted at its moments (throttle's
// TestFullBucketCallerIsLeasedOnEveryReplica). lease_requests 0 takes none.
func TestTokenLeasesOnEveryReplica(t *testing.T) {
	for _, c := range []struct{ requests, replicas, want int }{
		{8, 1, 8}, {8, 0, 8}, {8, 2, 8}, {8, 16, 8}, {0, 1, -1}, {0, 3, -1},
	} {
		r := RedisConfig{LeaseRequests: c.requests, Replicas: c.replicas}
		if got := r.storeOptions(); got.LeaseRequests != c.want {
			t.Errorf("lease_requests %d, replicas %d: leases %d, want %d", c.requests, c.replicas, got.LeaseRequests, c.want)
		}
	}
}
