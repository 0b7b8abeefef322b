package serving_test

import (
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// A layer removed from the configuration keeps its storage in the
// registry, readable by the read role, until a run with Options.Prune
// retires it: such a run reports it Removed (NotConfigured), leaves the
// layers it was given and the layers Prune does not name alone, and a run
// without Prune retires nothing it was not given.
func TestPruneRetiresTheStorageOfLayersNotConfigured(t *testing.T) {
	t.Parallel()
	owner, f, kept := setup(t, true, "prune_kept_")
	gone, other := unique("prune_gone_"), unique("prune_other_")
	testenv.ForgetStorage(t, owner, gone)
	testenv.ForgetStorage(t, owner, other)
	layer := func(name string) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
			Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}}
	}
	c := catalog(t, layer(kept), layer(gone), layer(other))
	o := serving.Options{Builders: []serving.Builder{serving.Overview{}}}
	for _, r := range serving.Prepare(t.Context(), owner, c.Layers(), o) {
		if r.Err != nil {
			t.Fatalf("build %s: %v", r.Layer, r.Err)
		}
	}
	for _, name := range []string{kept, gone, other} {
		if len(registry(t, owner, name)) == 0 {
			t.Fatalf("layer %s: no storage built", name)
		}
	}
	mine := func(layer string) bool { return layer == kept || layer == gone || layer == other }

	// Without Prune, a run of one layer leaves the others' storage.
	if r := one(t, owner, c.Layer(kept), o); r.Status != serving.Unchanged {
		t.Fatalf("kept: %+v", r)
	}
	if len(registry(t, owner, gone)) == 0 {
		t.Fatal("a run without Prune retired the storage of a layer it was not given")
	}

	// With Prune naming gone (not other): gone's storage is retired.
	o.Prune = func(layer string) bool { return mine(layer) && layer != other }
	results := prepareResults(t, owner, []*tiles.Layer{c.Layer(kept)}, o)
	want := []serving.Result{
		{Layer: kept, Builder: "overview", Status: serving.Unchanged},
		{Layer: gone, Builder: "overview", Status: serving.Removed, Reason: serving.NotConfigured},
	}
	if len(results) != len(want) {
		t.Fatalf("results %+v, want %+v", results, want)
	}
	for i, r := range results {
		if r.Layer != want[i].Layer || r.Builder != want[i].Builder || r.Status != want[i].Status || r.Reason != want[i].Reason || r.Err != nil {
			t.Errorf("result %d: %+v, want %+v", i, r, want[i])
		}
	}
	if n := len(registry(t, owner, gone)); n != 0 {
		t.Errorf("gone still has %d relations in the registry", n)
	}
	var retired int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM geotoll_serving.retired WHERE layer = $1`, gone).Scan(&retired); err != nil {
		t.Fatal(err)
	}
	if retired == 0 {
		t.Error("gone's relations are not listed as retired (to be dropped by a later run)")
	}
	if len(registry(t, owner, kept)) == 0 || len(registry(t, owner, other)) == 0 {
		t.Error("Prune retired the storage of a layer it was given, or of one Prune does not name")
	}
}
