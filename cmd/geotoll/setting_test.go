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
		// So does a tier left empty (its fields commented out): it
		// keeps the tier's defaults ("throttle.tiers.pro (line 3): EOF").
		{"an empty tier", "throttle:\n  tiers:\n    pro:\n      # rate: 50\n", func(c Config) string {
			if c.Throttle.Tiers["pro"] != DefaultConfig().Throttle.Tiers["pro"] {
				return "the empty pro tier is not the default one"
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
	// An entry of a list left empty is named as such (it was "layers[0]
	// (line 2): EOF").
	for _, bad := range []string{"layers:\n  -\n", "geofence:\n  layers:\n    - ~\n", "throttle:\n  tiers:\n    pro: &n\nlayers:\n  - *n\n"} {
		_, _, err := LoadConfig([]string{"-config", writeFile(t, "bad.yaml", bad)})
		if err == nil || !strings.Contains(err.Error(), "[0] (line ") || !strings.Contains(err.Error(), "an empty entry") {
			t.Errorf("%q: %v, want an empty entry named", bad, err)
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

// A secret's _FILE is one of its new names: it ranks above the older
// alias (DATABASE_URL, REDIS_URL…), below a flag, and a variable set
// beside its own _FILE is refused rather than one of them quietly
// ignored.
func TestSecretFileRanksAboveAlias(t *testing.T) {
	clearConfigEnv(t)
	t.Setenv("DATABASE_URL", "postgres://fromalias@h/db")
	t.Setenv("GEOTOLL_DATABASE_URL_FILE", writeFile(t, "db", "postgres://fromfile@h/db\n"))
	t.Setenv("REDIS_URL", "redis://fromalias:1")
	t.Setenv("GEOTOLL_REDIS_URL_FILE", writeFile(t, "redis", "redis://fromfile:1\n"))
	t.Setenv("GEOTOLL_WRITER_DATABASE_URL", "postgres://writeralias@h/db")
	t.Setenv("GEOTOLL_GEOFENCE_WRITER_DATABASE_URL_FILE", writeFile(t, "writer", "postgres://writerfile@h/db"))
	cfg, _, err := loadConfig(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.URL != "postgres://fromfile@h/db" || cfg.Redis.URL != "redis://fromfile:1" || cfg.Geofence.WriterDatabaseURL != "postgres://writerfile@h/db" {
		t.Errorf("an alias won over a _FILE: database %s, redis %s, writer %s", cfg.Database.URL, cfg.Redis.URL, cfg.Geofence.WriterDatabaseURL)
	}
	cfg, _, err = loadConfig([]string{"-database-url", "postgres://fromflag@h/db"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database.URL != "postgres://fromflag@h/db" {
		t.Errorf("a _FILE won over a flag: %s", cfg.Database.URL)
	}
	t.Setenv("GEOTOLL_DATABASE_URL", "postgres://fromvar@h/db")
	_, _, err = loadConfig(nil, true)
	if err == nil || !strings.Contains(err.Error(), "GEOTOLL_DATABASE_URL and GEOTOLL_DATABASE_URL_FILE") {
		t.Errorf("a variable and its _FILE both set: err = %v, want both named", err)
	}
}

// Every tier has its variables, the ones a file adds too; a
// GEOTOLL_THROTTLE_TIERS_ variable that names no tier's setting (a tier
// nobody configured, a misspelt field) is refused, not ignored.
func TestTierSettingsOfEveryTier(t *testing.T) {
	clearConfigEnv(t)
	file := writeFile(t, "partner.yaml", "throttle: {tiers: {partner: {rate: 200, capacity: 1200, max_cost: 30}, gold-plus: {rate: 5, capacity: 100}}}\n")
	t.Setenv("GEOTOLL_THROTTLE_TIERS_PARTNER_CAPACITY", "600")
	t.Setenv("GEOTOLL_THROTTLE_TIERS_GOLD_PLUS_SHADOW", "true")
	t.Setenv("GEOTOLL_THROTTLE_TIERS_FREE_RATE", "30")
	cfg, _, err := loadConfig([]string{"-config", file}, true)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Throttle.Tiers["partner"]; p.Capacity != 600 || p.Rate != 200 || p.MaxCost != 30 {
		t.Errorf("partner %+v: want the file's tier with the variable's capacity, 600", p)
	}
	if g := cfg.Throttle.Tiers["gold-plus"]; !g.Shadow || g.Capacity != 100 {
		t.Errorf("gold-plus %+v: want it shadowed", g)
	}
	if f := cfg.Throttle.Tiers["free"]; f.Rate != 30 || f.Capacity != 100 {
		t.Errorf("free %+v", f)
	}
	if err := checkConfig(cfg); err != nil {
		t.Errorf("config check: %v", err)
	}
	for _, c := range []struct{ env, args []string }{
		{[]string{"GEOTOLL_THROTTLE_TIERS_PARTNER_CAPACITY", "10"}, nil}, // no file: no partner
		{[]string{"GEOTOLL_THROTTLE_TIERS_FREE_CAPACTY", "10"}, []string{"-config", file}},
		{[]string{"GEOTOLL_THROTTLE_TIERS_GOLD_RATE", "10"}, []string{"-config", file}},
	} {
		clearConfigEnv(t)
		t.Setenv(c.env[0], c.env[1])
		_, _, err := loadConfig(c.args, true)
		if err == nil || !strings.Contains(err.Error(), c.env[0]) {
			t.Errorf("%s with %v: err = %v, want it refused by name", c.env[0], c.args, err)
		}
	}
}

// A name given twice in one file is refused: the second entry would
// otherwise merge into the first and one of them be lost. Merging into a
// default of the same name is what names are for, and still works
// (TestConfigMerge).
func TestNameTwiceInOneFileIsRefused(t *testing.T) {
	clearConfigEnv(t)
	for _, c := range []struct{ name, yaml, want string }{
		{"tile layers", "layers:\n  - {name: roads, table: osm.roads, geometry_column: geom}\n  - {name: roads, table: osm.rivers, geometry_column: geom}\n",
			`layers[1] (line 3): name "roads" is already layers[0] (line 2)`},
		{"a demo tile layer", "layers:\n  - {name: places, max_features: 10}\n  - {name: places, minzoom: 3}\n",
			`name "places" is already layers[0]`},
		{"geofence layers", "geofence:\n  layers:\n    - {name: parks, table: osm.parks, geometry_column: geom}\n    - {name: parks, table: osm.woods, geometry_column: geom}\n",
			`geofence.layers[1] (line 4): name "parks" is already geofence.layers[0] (line 3)`},
		{"tiers", "throttle:\n  tiers:\n    partner: {rate: 200, capacity: 1200}\n    partner: {rate: 1, capacity: 10}\n",
			`throttle.tiers.partner (line 4): already defined at line 3`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := LoadConfig([]string{"-config", writeFile(t, "twice.yaml", c.yaml)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}
