package catalog

import (
	"errors"
	"strings"
	"testing"
)

type layer struct {
	Name     string
	prepared bool
}

func (l *layer) Key() string { return l.Name }

func (l *layer) Prepare() error {
	if l.Name == "" {
		return errors.New("layer needs a name")
	}
	l.prepared = true
	return nil
}

func TestBuild(t *testing.T) {
	in := []layer{{Name: "a"}, {Name: "b"}}
	set, err := Build(in, "layer")
	if err != nil {
		t.Fatal(err)
	}
	order := set.Layers()
	if len(order) != 2 || order[0].Name != "a" || set.Layer("b") != order[1] || !order[0].prepared || set.Layer("c") != nil {
		t.Fatalf("built %v", order)
	}
	if in[0].prepared {
		t.Fatal("Build prepared the caller's layer instead of its own copy")
	}
	_, err = Build([]layer{{Name: "a"}, {Name: ""}, {Name: "a"}}, "geofence layer")
	if err == nil || !strings.Contains(err.Error(), "needs a name") || !strings.Contains(err.Error(), `geofence layer "a" is defined twice`) {
		t.Fatalf("errors not all reported: %v", err)
	}
}

func TestSQLQuoted(t *testing.T) {
	for name, want := range map[string]bool{
		`"MyTable"`:        true,
		`public."MyTable"`: true,
		`"GIS".places`:     true,
		`"my.schema"."t"`:  true,
		`"my.schema".t`:    true,
		`public."a.b"`:     true,
		`a"b".c`:           false,
		`""`:               true,
		`public.places`:    false,
		`we"ird`:           false,
		`"half`:            false,
		`a."b`:             false,
		`"`:                false,
		``:                 false,
	} {
		if got := SQLQuoted(name); got != want {
			t.Errorf("SQLQuoted(%q) = %v, want %v", name, got, want)
		}
	}
}
