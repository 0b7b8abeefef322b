package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/peterbourgon/ff/v3"
)

// overrides are the settings given as flags and environment variables,
// kept as text until the configuration file has been read: they win over
// it. Flags win over the environment; a setting's canonical variable
// (GEOTOLL_…) wins over its alias (envAliases); a secret's _FILE variable
// is read last.
type overrides struct {
	settings []setting
	values   map[string]string // by key
	from     map[string]string // by key: "flag -listen", "GEOTOLL_LISTEN"…
	config   string            // -config / GEOTOLL_CONFIG
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
// (read by ff), then the aliases, then the secrets' _FILE variables.
func (o *overrides) readEnv() error {
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
	for _, s := range o.settings {
		if _, set := o.values[s.Key]; set || !s.Secret {
			continue
		}
		path := os.Getenv(s.Env + "_FILE")
		if path == "" {
			continue
		}
		raw, err := os.ReadFile(path) //nolint:gosec // G703: the path is the operator's own _FILE variable, read once at start-up
		if err != nil {
			return fmt.Errorf("%s_FILE: %w", s.Env, err)
		}
		if err := (settingFlag{o, s, s.Env + "_FILE"}).Set(strings.TrimRight(string(raw), "\r\n")); err != nil {
			return fmt.Errorf("%s_FILE: %w", s.Env, err)
		}
	}
	return nil
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
