package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/peterbourgon/ff/v3"
)

// overrides are the settings given as flags and environment variables,
// kept as text until the configuration file has been read: they win over
// it. Flags win over the environment; in it, a setting's own names — its
// variable (GEOTOLL_…) or, for a secret, the file its _FILE variable names
// — win over its older alias (envAliases). A secret given both ways is
// refused (see readEnv).
type overrides struct {
	settings []setting
	values   map[string]string // by key
	from     map[string]string // by key: "flag -listen", "GEOTOLL_LISTEN"…
	config   string            // -config / GEOTOLL_CONFIG
	// env: readEnv has read the environment, so the variables of the
	// tiers the file adds are read once it has been (fileTiers).
	env bool
}

// envAliases are the older environment variables that still set their
// key, each below the key's own GEOTOLL_ variable.
var envAliases = []struct{ env, key string }{
	{"LISTEN", "listen"},
	{"DATABASE_URL", "database.url"},
	{"REDIS_URL", "redis.url"},
	{"GEOTOLL_ADMIN_DATABASE_URL", "database.admin_url"},
	{"GEOTOLL_WRITER_DATABASE_URL", "geofence.writer_database_url"},
}

// flagAliases are older flag names.
var flagAliases = map[string]string{"admin-database-url": "database.admin_url"}

func newOverrides() *overrides {
	return &overrides{settings: settingsOf(DefaultConfig()), values: map[string]string{}, from: map[string]string{}}
}

// settingFlag records one setting's value.
type settingFlag struct {
	o      *overrides
	s      setting
	source string
}

func (f settingFlag) String() string {
	if f.o == nil {
		return ""
	}
	return f.o.values[f.s.Key]
}

func (f settingFlag) Set(raw string) error {
	if _, err := f.s.parse(raw); err != nil {
		return err
	}
	f.o.values[f.s.Key], f.o.from[f.s.Key] = raw, f.source
	return nil
}

func (f settingFlag) IsBoolFlag() bool { return f.s.typ.Kind() == reflect.Bool }

// configFlag records -config.
type configFlag struct{ o *overrides }

func (f configFlag) String() string {
	if f.o == nil {
		return ""
	}
	return f.o.config
}

func (f configFlag) Set(path string) error { f.o.config = path; return nil }

// register defines every setting as a flag of fs, and -config.
func (o *overrides) register(fs *flag.FlagSet) {
	fs.Var(configFlag{o}, "config", "YAML configuration `file` (env GEOTOLL_CONFIG)")
	for _, s := range o.settings {
		fs.Var(settingFlag{o, s, "flag -" + s.Flag}, s.Flag, "configuration key "+s.Key+" (env "+s.Env+")")
	}
	for name, key := range flagAliases {
		s, _ := o.setting(key)
		fs.Var(settingFlag{o, s, "flag -" + name}, name, "same as -"+s.Flag)
	}
}

func (o *overrides) setting(key string) (setting, bool) {
	for _, s := range o.settings {
		if s.Key == key {
			return s, true
		}
	}
	return setting{}, false
}

// readEnv fills the settings no flag gave from the environment: GEOTOLL_…
// (read by ff), then the secrets' _FILE variables, then the aliases. A
// deployment moving a secret into a file (GEOTOLL_DATABASE_URL_FILE) may
// still export the older DATABASE_URL that its scripts always set: the
// file must win, as the new name does. A secret whose variable and _FILE
// are both set is refused, even when a flag sets it: which of the two the
// operator meant cannot be told, and taking either would leave the other
// looking used.
func (o *overrides) readEnv() error {
	o.env = true
	fs := flag.NewFlagSet("environment", flag.ContinueOnError)
	if o.config == "" {
		fs.Var(configFlag{o}, "config", "")
	}
	for _, s := range o.settings {
		if _, set := o.values[s.Key]; !set {
			fs.Var(settingFlag{o, s, s.Env}, s.Flag, "")
		}
	}
	if err := ff.Parse(fs, nil, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return err
	}
	for _, s := range o.settings {
		if err := o.readSecretFile(s); err != nil {
			return err
		}
	}
	for _, a := range envAliases {
		if _, set := o.values[a.key]; set {
			continue
		}
		if v := os.Getenv(a.env); v != "" {
			s, _ := o.setting(a.key)
			if err := (settingFlag{o, s, a.env}).Set(v); err != nil {
				return fmt.Errorf("%s: %w", a.env, err)
			}
		}
	}
	return nil
}

// readSecretFile sets secret s from the file its _FILE variable names,
// unless a flag set it.
func (o *overrides) readSecretFile(s setting) error {
	path := os.Getenv(s.Env + "_FILE")
	if !s.Secret || path == "" {
		return nil
	}
	if os.Getenv(s.Env) != "" {
		return fmt.Errorf("%s and %s_FILE are both set: set one of them", s.Env, s.Env)
	}
	if _, set := o.values[s.Key]; set {
		return nil
	}
	raw, err := os.ReadFile(path) //nolint:gosec // G703: the path is the operator's own _FILE variable, read once at start-up
	if err != nil {
		return fmt.Errorf("%s_FILE: %w", s.Env, err)
	}
	if err := (settingFlag{o, s, s.Env + "_FILE"}).Set(strings.TrimRight(string(raw), "\r\n")); err != nil {
		return fmt.Errorf("%s_FILE: %w", s.Env, err)
	}
	return nil
}

// tierEnvPrefix starts the variables of every tier's settings.
var tierEnvPrefix = envName("throttle.tiers") + "_"

// fileTiers adds the settings of the tiers cfg (the defaults and the file)
// has beyond the defaults' and reads their variables, once the file has
// been read: a tier the file adds is set by the environment as a default
// tier is. Their flags cannot be: flags are defined before the file is
// read, so only the defaults' tiers have them. A set GEOTOLL_THROTTLE_TIERS_
// variable that names no tier's field (a tier nobody configured, a
// misspelt field) is refused: ignored, a deployment's budget would be
// silently other than it says; so is one that two tiers' names share
// ("Gold" and "gold").
func (o *overrides) fileTiers(cfg Config) error {
	byEnv := map[string][]setting{}
	have := map[string]bool{}
	for _, s := range o.settings {
		have[s.Key] = true
	}
	for _, s := range settingsOf(cfg) {
		if !strings.HasPrefix(s.Env, tierEnvPrefix) || strings.Count(s.Key, ".") != 3 {
			continue // a tier whose name holds a "." has no settings
		}
		byEnv[s.Env] = append(byEnv[s.Env], s)
		if !have[s.Key] {
			o.settings = append(o.settings, s)
			have[s.Key] = true
		}
	}
	var errs []error
	for _, kv := range os.Environ() {
		env, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(env, tierEnvPrefix) || v == "" {
			continue
		}
		switch ss := byEnv[env]; {
		case len(ss) == 0:
			errs = append(errs, fmt.Errorf("%s sets no tier's setting: throttle.tiers has %s, each with %s", env,
				strings.Join(tierNames(cfg), ", "), strings.Join(tierFields(), ", ")))
		case len(ss) > 1:
			errs = append(errs, fmt.Errorf("%s names %s and %s alike: rename one of the tiers", env, ss[0].Key, ss[1].Key))
		default:
			if _, set := o.values[ss[0].Key]; set {
				continue // by a flag, or read already
			}
			if err := (settingFlag{o, ss[0], env}).Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	}
	return errors.Join(errs...)
}

// tierFields are the YAML keys of a tier.
func tierFields() []string {
	var out []string
	for _, s := range settingsOf(Config{Throttle: ThrottleConfig{Tiers: TierMap{"t": {}}}}) {
		if name, ok := strings.CutPrefix(s.Key, "throttle.tiers.t."); ok {
			out = append(out, name)
		}
	}
	return out
}

// apply stores the overrides in cfg.
func (o *overrides) apply(cfg *Config) error {
	for _, s := range o.settings {
		raw, ok := o.values[s.Key]
		if !ok {
			continue
		}
		if err := s.set(cfg, raw); err != nil {
			return fmt.Errorf("%s: %w", o.from[s.Key], err)
		}
	}
	return nil
}
