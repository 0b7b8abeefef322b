package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// lockFixture gives a test the owner's pool and a points layer of its own
// (overviews z0–z1) over a small copy of the demo places in a schema of
// its own; both, and the layer's storage, go when the test ends.
func lockFixture(t *testing.T) (*pgxpool.Pool, tiles.Layer) {
	t.Helper()
	owner := testenv.Pool(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	schema, name := "serving_lock_"+suffix, "lock_"+suffix
	s := pgx.Identifier{schema}.Sanitize()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
			t.Errorf("drop fixture: %v", err)
		}
	})
	testenv.ForgetStorage(t, owner, name)
	for _, sql := range []string{
		`CREATE SCHEMA ` + s,
		`CREATE TABLE ` + s + `.pts AS SELECT id, name, rank, geom_3857 AS geom FROM geotoll.places WHERE id % 100 = 0`,
		`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
		`GRANT SELECT ON ` + s + `.pts TO geotoll_reader`,
	} {
		if _, err := owner.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return owner, tiles.Layer{Name: name, Table: schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
		Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}, Overviews: tiles.Overviews{MaxZoom: 1}}
}

func catalogLayer(t *testing.T, l tiles.Layer) *tiles.Layer {
	t.Helper()
	c, err := tiles.NewCatalog([]tiles.Layer{l})
	if err != nil {
		t.Fatal(err)
	}
	return c.Layer(l.Name)
}

// prepareOne runs Prepare with the Overview builder on one layer and
// returns its result (other tests' retired storage aside).
func prepareOne(t *testing.T, pool *pgxpool.Pool, l *tiles.Layer, o Options) Result {
	t.Helper()
	o.Builders = []Builder{Overview{}}
	var out []Result
	for _, r := range Prepare(t.Context(), pool, []*tiles.Layer{l}, o) {
		if r.Builder != Retired {
			out = append(out, r)
		}
	}
	if len(out) != 1 {
		t.Fatalf("Prepare: %d results, want 1: %+v", len(out), out)
	}
	return out[0]
}

// layerRelations returns the relations the registry names for a layer,
// and how many of its relations are listed as retired.
func layerRelations(t *testing.T, pool *pgxpool.Pool, layer string) (map[string]bool, int) {
	t.Helper()
	rels, err := texts(t.Context(), pool, `SELECT relation FROM geotoll_serving.storage WHERE layer = $1`, layer)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range rels {
		out[r] = true
	}
	var retired int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM geotoll_serving.retired WHERE layer = $1`, layer).Scan(&retired); err != nil {
		t.Fatal(err)
	}
	return out, retired
}

// TestRemovalSkipsALayerAnotherRunHolds: while another connection (run)
// holds a layer's lock, a run that would remove its storage (overviews
// turned off) retires nothing and says so — skipped, because another run
// holds the layer — not removed; a forced rebuild is skipped alike. Once
// the lock is released, the next run removes it.
func TestRemovalSkipsALayerAnotherRunHolds(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	l := catalogLayer(t, base)
	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil {
		t.Fatalf("first build: %+v", r)
	}
	before, _ := layerRelations(t, owner, l.Name)
	if len(before) != 2 {
		t.Fatalf("registry holds %v, want 2 relations (z0, z1)", before)
	}

	other, err := owner.Begin(t.Context()) // the other run, on a connection of its own
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.Background()) }()
	if held, err := lockLayer(t.Context(), other, l.Name); err != nil || !held {
		t.Fatalf("the other run's lock: %v, %v", held, err)
	}

	offLayer := base
	offLayer.Overviews.Off = true
	off := catalogLayer(t, offLayer)
	if r := prepareOne(t, owner, off, Options{}); r.Status != Skipped || r.Reason != LayerBusy || r.Err != nil {
		t.Errorf("removal while another run holds the layer: %+v, want skipped (%s)", r, LayerBusy)
	}
	if after, retired := layerRelations(t, owner, l.Name); len(after) != len(before) || retired != 0 {
		t.Errorf("after the skipped removal the registry holds %v (%d retired), want %v and none retired", after, retired, before)
	}
	if r := prepareOne(t, owner, l, Options{Force: true}); r.Status != Skipped || r.Reason != LayerBusy || r.Err != nil {
		t.Errorf("forced rebuild while another run holds the layer: %+v, want skipped (%s)", r, LayerBusy)
	}

	if err := other.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := prepareOne(t, owner, off, Options{}); r.Status != Removed || r.Err != nil {
		t.Errorf("removal once the lock is released: %+v, want removed", r)
	}
	if after, retired := layerRelations(t, owner, l.Name); len(after) != 0 || retired != len(before) {
		t.Errorf("after the removal the registry holds %v (%d retired), want none and %d retired", after, retired, len(before))
	}
}

// TestBuildSkipsALayerAnotherRunBuilt: two overlapping runs on a layer
// without storage. Run B reads the registry (nothing) and finds the layer
// not current; run A then builds it and releases its lock; B, taking the
// lock afterwards, must check again and skip it — not build it a second
// time and retire what A just recorded. The interleaving is played in
// sequence: B's check before the lock is build's rows argument.
func TestBuildSkipsALayerAnotherRunBuilt(t *testing.T) {
	t.Parallel()
	owner, base := lockFixture(t)
	l := catalogLayer(t, base)
	o := Options{Builders: []Builder{Overview{}}}.withDefaults()
	targets := Overview{}.Targets(l, tiles.KindPoint)

	var seenByB []tiles.Storage // B's registry read: the layer has no storage yet

	if r := prepareOne(t, owner, l, Options{}); r.Status != Built || r.Err != nil { // run A
		t.Fatalf("run A: %+v", r)
	}
	builtByA, _ := layerRelations(t, owner, l.Name)

	r := build(t.Context(), owner, l, tiles.KindPoint, Overview{}, targets, seenByB, o) // run B, past its check
	if r.Status != Skipped || r.Reason != BuiltByOther || r.Err != nil {
		t.Errorf("run B after A built the layer: %+v, want skipped (%s)", r, BuiltByOther)
	}
	if after, retired := layerRelations(t, owner, l.Name); len(after) != len(builtByA) || retired != 0 {
		t.Errorf("after run B the registry holds %v (%d retired), want A's %v and none retired", after, retired, builtByA)
	} else {
		for rel := range builtByA {
			if !after[rel] {
				t.Errorf("run B replaced A's %s: %v", rel, after)
			}
		}
	}

	// Forced, B rebuilds all the same.
	o.Force = true
	if r := build(t.Context(), owner, l, tiles.KindPoint, Overview{}, targets, seenByB, o); r.Status != Built || r.Err != nil {
		t.Errorf("forced run B: %+v, want built", r)
	}
}
