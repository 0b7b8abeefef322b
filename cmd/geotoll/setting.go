package main

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// setting is one configuration key that a flag and an environment variable
// can set, named by one rule from its YAML path:
//
//	redis.timeout                flag -redis-timeout             env GEOTOLL_REDIS_TIMEOUT
//	throttle.tiers.free.shadow   flag -throttle-tiers-free-shadow env GEOTOLL_THROTTLE_TIERS_FREE_SHADOW
//
// Every scalar key of Config is one (lists of strings are comma-separated
// values), and so is every field of the tiers the defaults name, and of
// those the file adds (environment variables only: overrides.fileTiers).
// The layer lists (layers, geofence.layers) are set in the YAML file only.
type setting struct {
	Key  string // YAML path
	Flag string
	Env  string
	// Secret: its value may also come from the file named by the
	// environment variable Env+"_FILE" (and it is never printed).
	Secret bool
	typ    reflect.Type
}

// envPrefix starts every environment variable of a setting.
const envPrefix = "GEOTOLL"

// flagName and envName are the naming rule.
func flagName(key string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(key)
}

func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

var durationType = reflect.TypeFor[time.Duration]()

// settingsOf lists the settings of cfg's shape, in YAML order. The tiers
// it lists are cfg's.
func settingsOf(cfg Config) []setting {
	var out []setting
	walkSettings(reflect.ValueOf(cfg), "", &out)
	return out
}

func walkSettings(v reflect.Value, prefix string, out *[]setting) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlName(f)
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if inline {
			walkSettings(fv, prefix, out)
			continue
		}
		key := prefix + name
		switch {
		case isLeaf(f.Type):
			*out = append(*out, setting{Key: key, Flag: flagName(key), Env: envName(key), Secret: f.Tag.Get("secret") == "true", typ: f.Type})
		case f.Type.Kind() == reflect.Struct:
			walkSettings(fv, key+".", out)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			names := make([]string, 0, fv.Len())
			for _, k := range fv.MapKeys() {
				names = append(names, k.String())
			}
			slices.Sort(names)
			for _, n := range names {
				walkSettings(fv.MapIndex(reflect.ValueOf(n)), key+"."+n+".", out)
			}
		}
		// Lists of records (layers) are YAML only.
	}
}

// yamlName is a field's YAML key, and whether it is inlined.
func yamlName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if opts == "inline" {
		return "", true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false
}

func isLeaf(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		return true
	case reflect.Pointer:
		return t.Elem().Kind() == reflect.Float64
	case reflect.Slice:
		return t.Elem().Kind() == reflect.String
	}
	return false
}

// parse turns raw into a value of the setting's type.
func (s setting) parse(raw string) (reflect.Value, error) {
	v := reflect.New(s.typ).Elem()
	var err error
	switch {
	case s.typ == durationType:
		var d time.Duration
		d, err = time.ParseDuration(raw)
		v.SetInt(int64(d))
	case s.typ.Kind() == reflect.String:
		v.SetString(raw)
	case s.typ.Kind() == reflect.Bool:
		var b bool
		b, err = strconv.ParseBool(raw)
		v.SetBool(b)
	case s.typ.Kind() == reflect.Float64:
		var f float64
		f, err = strconv.ParseFloat(raw, 64)
		v.SetFloat(f)
	case s.typ.Kind() == reflect.Pointer:
		var f float64
		f, err = strconv.ParseFloat(raw, 64)
		v.Set(reflect.ValueOf(&f))
	case s.typ.Kind() == reflect.Slice:
		var list []string
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	default: // the integers
		var n int64
		n, err = strconv.ParseInt(raw, 10, s.typ.Bits())
		v.SetInt(n)
	}
	if err != nil {
		return v, fmt.Errorf("%s: %q is not a %s", s.Key, raw, typeWord(s.typ))
	}
	return v, nil
}

func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration (e.g. 250ms, 2s, 1m)"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.Float64, t.Kind() == reflect.Pointer:
		return "number"
	case t.Kind() == reflect.Slice:
		return "comma-separated list"
	case t.Kind() == reflect.String:
		return "string"
	}
	return "whole number"
}

// set parses raw and stores it at the setting's path in cfg. A tier the
// path names that cfg lacks is created.
func (s setting) set(cfg *Config, raw string) error {
	val, err := s.parse(raw)
	if err != nil {
		return err
	}
	return setPath(reflect.ValueOf(cfg).Elem(), strings.Split(s.Key, "."), val)
}

// setPath stores val at path below v (a struct, or a map of structs).
func setPath(v reflect.Value, path []string, val reflect.Value) error {
	if v.Kind() == reflect.Map {
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		key := reflect.ValueOf(path[0])
		elem := reflect.New(v.Type().Elem()).Elem()
		if cur := v.MapIndex(key); cur.IsValid() {
			elem.Set(cur)
		}
		if err := setPath(elem, path[1:], val); err != nil {
			return err
		}
		v.SetMapIndex(key, elem)
		return nil
	}
	f, ok := fieldByYAML(v, path[0])
	if !ok {
		return fmt.Errorf("no configuration key %q", path[0])
	}
	if len(path) == 1 {
		f.Set(val)
		return nil
	}
	return setPath(f, path[1:], val)
}

// fieldByYAML finds the field of struct v whose YAML key is name, looking
// into inlined structs.
func fieldByYAML(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		n, inline := yamlName(t.Field(i))
		if inline {
			if f, ok := fieldByYAML(v.Field(i), name); ok {
				return f, true
			}
			continue
		}
		if n == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
