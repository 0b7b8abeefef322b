package tiles_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// switchDescriber describes each layer with the bounds it holds now, or
// fails for the layers it is told to.
type switchDescriber struct {
	mu     sync.Mutex
	bounds map[string][4]float64
	fail   map[string]bool
	slow   map[string]bool // fails by its statement timeout
	calls  atomic.Int32
}

func (d *switchDescriber) set(layer string, b [4]float64, fail bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bounds[layer], d.fail[layer] = b, fail
}

func (d *switchDescriber) Describe(_ context.Context, l *tiles.Layer) (tiles.LayerInfo, error) {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.slow[l.Name] {
		return tiles.LayerInfo{}, &problem.Error{Code: problem.Timeout, Detail: "too slow"}
	}
	if d.fail[l.Name] {
		return tiles.LayerInfo{}, errors.New("database down")
	}
	fields := map[string]string{}
	for _, p := range l.Properties {
		fields[p] = "Number"
	}
	return tiles.LayerInfo{Bounds: d.bounds[l.Name], Fields: fields}, nil
}

func newSwitchDescriber() *switchDescriber {
	return &switchDescriber{bounds: map[string][4]float64{}, fail: map[string]bool{}, slow: map[string]bool{}}
}

// describedHandler serves the demo layers' TileJSON described by d.
func describedHandler(t *testing.T, d tiles.Describer) (http.Handler, *tiles.Catalog) {
	t.Helper()
	cat := newCatalog(t, demoLayers()...)
	return tileRouter(&tiles.Handler{Catalog: cat, Store: &countingRenderer{}, Gate: &pricingGate{}, Logger: discardLogger(), Describer: d}), cat
}

func getTileJSON(t *testing.T, h http.Handler, path string, hdr ...string) (*httptest.ResponseRecorder, tileJSONDoc) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	var doc tileJSONDoc
	return getJSON(t, h, r, &doc), doc
}

// The fallback TileJSON of a layer the database could not describe — the
// whole world, every field a "String" — is true only until the database
// answers: no cache may keep it, so it is no-store (private, no-store with
// ?key=), has no ETag, and is sent whole whatever If-None-Match says.
func TestTileJSONFallbackIsNotStored(t *testing.T) {
	t.Parallel()
	h := metaHandler(t, &fakeDescriber{err: errors.New("database down")}, nil)
	for _, tc := range []struct {
		path, ifNoneMatch, cc string
	}{
		{"/tiles/places.json", "", "no-store"},
		{"/tiles/places.json", "*", "no-store"},
		{"/tiles/places,districts.json", "", "no-store"},
		{"/tiles/places.json?key=k1", "*", "private, no-store"},
	} {
		w, doc := getTileJSON(t, h, tc.path, "If-None-Match", tc.ifNoneMatch)
		if w.Code != http.StatusOK || len(doc.VectorLayers) == 0 {
			t.Fatalf("%s (If-None-Match %q): %d %s, want the fallback document", tc.path, tc.ifNoneMatch, w.Code, w.Body)
		}
		if cc, etag := w.Header().Get("Cache-Control"), w.Header().Get("ETag"); cc != tc.cc || etag != "" {
			t.Errorf("%s (If-None-Match %q): Cache-Control %q, ETag %q; want %q and no ETag", tc.path, tc.ifNoneMatch, cc, etag, tc.cc)
		}
	}
	// A layer the database described is public again, composites of it
	// too.
	d := newSwitchDescriber()
	d.set("places", [4]float64{1, 2, 3, 4}, false)
	d.set("districts", [4]float64{}, true)
	h, _ = describedHandler(t, d)
	if w, _ := getTileJSON(t, h, "/tiles/places.json"); w.Header().Get("Cache-Control") != "public, max-age=60" || w.Header().Get("ETag") == "" {
		t.Errorf("a described layer: Cache-Control %q, ETag %q", w.Header().Get("Cache-Control"), w.Header().Get("ETag"))
	}
	if w, _ := getTileJSON(t, h, "/tiles/places,districts.json"); w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("ETag") != "" {
		t.Errorf("a composite with a layer not described: Cache-Control %q, ETag %q", w.Header().Get("Cache-Control"), w.Header().Get("ETag"))
	}
}

// A layer's description follows what the server sees of its data: a write
// of its table (Catalog.Written, as the fence admin's) makes TileJSON read
// it again, so that data written outside the old bounds is inside the
// new ones; without one, the description is kept.
func TestTileJSONDescriptionFollowsWrites(t *testing.T) {
	t.Parallel()
	d := newSwitchDescriber()
	d.set("places", [4]float64{1, 2, 3, 4}, false)
	h, cat := describedHandler(t, d)
	if _, doc := getTileJSON(t, h, "/tiles/places.json"); !slices.Equal(doc.Bounds, []float64{1, 2, 3, 4}) {
		t.Fatalf("bounds %v", doc.Bounds)
	}
	d.set("places", [4]float64{-5, 2, 3, 4}, false)
	if _, doc := getTileJSON(t, h, "/tiles/places.json"); !slices.Equal(doc.Bounds, []float64{1, 2, 3, 4}) || d.calls.Load() != 1 {
		t.Fatalf("bounds %v after %d Describe calls: nothing changed, the description is kept", doc.Bounds, d.calls.Load())
	}
	cat.Written("places")
	if _, doc := getTileJSON(t, h, "/tiles/places.json"); !slices.Equal(doc.Bounds, []float64{-5, 2, 3, 4}) {
		t.Errorf("bounds %v after a write of the layer's table, want [-5 2 3 4]", doc.Bounds)
	}
	if _, doc := getTileJSON(t, h, "/tiles/places.json"); !slices.Equal(doc.Bounds, []float64{-5, 2, 3, 4}) || d.calls.Load() != 2 {
		t.Errorf("bounds %v after %d Describe calls, want [-5 2 3 4] after 2", doc.Bounds, d.calls.Load())
	}
}

// A description that cannot be read again is kept, stale but of the
// layer's data, rather than replaced by the fallback: still public, with
// its ETag, and not asked again before the backoff ends.
func TestTileJSONKeepsItsDescriptionWhenARefreshFails(t *testing.T) {
	t.Parallel()
	d := newSwitchDescriber()
	d.set("places", [4]float64{1, 2, 3, 4}, false)
	h, cat := describedHandler(t, d)
	first, _ := getTileJSON(t, h, "/tiles/places.json")
	d.set("places", [4]float64{}, true)
	cat.Written("places")
	for range 2 {
		w, doc := getTileJSON(t, h, "/tiles/places.json")
		if !slices.Equal(doc.Bounds, []float64{1, 2, 3, 4}) || doc.VectorLayers[0].Fields["rank"] != "Number" {
			t.Fatalf("bounds %v, fields %v: the last description was not kept", doc.Bounds, doc.VectorLayers[0].Fields)
		}
		if w.Header().Get("Cache-Control") != "public, max-age=60" || w.Header().Get("ETag") != first.Header().Get("ETag") {
			t.Errorf("Cache-Control %q, ETag %q; want public and the first answer's ETag", w.Header().Get("Cache-Control"), w.Header().Get("ETag"))
		}
	}
	if n := d.calls.Load(); n != 2 {
		t.Errorf("Describe called %d times, want 2: a failed refresh backs off", n)
	}
}

// The backoff after a failed Describe ends as soon as the database answers
// another layer's: the fallback is not served for the rest of the backoff
// once the database is back.
func TestTileJSONBackoffEndsWhenTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	d := newSwitchDescriber()
	d.set("places", [4]float64{}, true)
	d.set("districts", [4]float64{5, 6, 7, 8}, false)
	h, _ := describedHandler(t, d)
	if w, _ := getTileJSON(t, h, "/tiles/places.json"); w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("fallback: Cache-Control %q", w.Header().Get("Cache-Control"))
	}
	d.set("places", [4]float64{1, 2, 3, 4}, false) // the database is back
	world := tiles.WorldBounds()
	if _, doc := getTileJSON(t, h, "/tiles/places.json"); !slices.Equal(doc.Bounds, world[:]) || d.calls.Load() != 1 {
		t.Fatalf("bounds %v after %d calls: within the backoff, nothing has told the database is back", doc.Bounds, d.calls.Load())
	}
	getTileJSON(t, h, "/tiles/districts.json") // it answers
	w, doc := getTileJSON(t, h, "/tiles/places.json")
	if !slices.Equal(doc.Bounds, []float64{1, 2, 3, 4}) || w.Header().Get("Cache-Control") != "public, max-age=60" {
		t.Errorf("after the database answered: bounds %v, Cache-Control %q; want [1 2 3 4], public", doc.Bounds, w.Header().Get("Cache-Control"))
	}
}

// A layer whose description timed out (its own slowness, not the
// database's absence) keeps its backoff when another layer is described:
// a client asking for layers in turn must not make the database run the
// slow one again and again.
func TestTileJSONBackoffOfASlowLayerOutlastsOthers(t *testing.T) {
	t.Parallel()
	d := newSwitchDescriber()
	d.mu.Lock()
	d.slow["places"] = true
	d.mu.Unlock()
	d.set("districts", [4]float64{5, 6, 7, 8}, false)
	h, _ := describedHandler(t, d)
	getTileJSON(t, h, "/tiles/places.json")
	getTileJSON(t, h, "/tiles/districts.json")
	before := d.calls.Load()
	for range 3 {
		getTileJSON(t, h, "/tiles/places.json")
	}
	if n := d.calls.Load() - before; n != 0 {
		t.Errorf("the slow layer was described %d more times within its backoff, after another layer's description", n)
	}
}

// A followed layer's bounds (Catalog.Follow: the server writes its table)
// include what was written since the table was last analyzed: they are its
// extent, not the planner's statistics, which follow the writes only at
// the next ANALYZE. Another layer's bounds are the statistics'.
func TestDescribeFollowedLayerReadsItsExtent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.fences (id int PRIMARY KEY, geom geometry(Point, 3857))`)
	f.exec(t, `INSERT INTO {s}.fences SELECT g, ST_Transform(ST_SetSRID(ST_MakePoint(g * 0.01, g * 0.01), 4326), 3857) FROM generate_series(1, 50) g`)
	f.exec(t, `ANALYZE {s}.fences`)
	f.exec(t, `INSERT INTO {s}.fences VALUES (99, ST_Transform(ST_SetSRID(ST_MakePoint(40, 30), 4326), 3857))`)
	f.exec(t, `GRANT SELECT ON {s}.fences TO geotoll_reader`)
	followed, plain := describeFollowedAndPlain(t, f.schema+".fences", 3857)
	if b := followed.Bounds; b[2] < 39.99 || b[3] < 29.99 || b[0] > 0.0101 || b[1] > 0.0101 {
		t.Errorf("followed layer: bounds %v, want about [0.01 0.01 40 30]: the row written after ANALYZE is outside", b)
	}
	if b := plain.Bounds; b[2] > 1 || b[3] > 1 {
		t.Errorf("plain layer: bounds %v, want the statistics' (about [0.01 0.01 0.5 0.5])", b)
	}
}

// A layer's bounds read from its table's extent (a followed layer, or one
// whose table has no statistics yet) cover its rows beside one whose
// coordinate is NaN. ST_Extent over such a row lost the other
// rows' sides: the bounds were a sliver at the one row west of the rest,
// and a map asks for no tile outside them.
func TestDescribeExtentBesideANonFiniteRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// No ANALYZE (autovacuum off): the unanalyzed layer has no statistics,
	// and reads the extent too.
	f.exec(t, `CREATE TABLE {s}.pts (id int PRIMARY KEY, geom geometry(Point, 4326)) WITH (autovacuum_enabled = false)`)
	// In this order: ST_Extent's box, once NaN, took the next row's sides.
	f.exec(t, `INSERT INTO {s}.pts SELECT g, ST_SetSRID(ST_MakePoint(10 + g % 50, 40 + g % 10), 4326) FROM generate_series(1, 200) g`)
	f.exec(t, `INSERT INTO {s}.pts VALUES (-2, ST_SetSRID(ST_MakePoint('NaN'::float8, 45), 4326))`)
	f.exec(t, `INSERT INTO {s}.pts VALUES (-1, ST_SetSRID(ST_MakePoint(-170, 45), 4326))`)
	f.exec(t, `GRANT SELECT ON {s}.pts TO geotoll_reader`)
	followed, unanalyzed := describeFollowedAndPlain(t, f.schema+".pts", 4326)
	for name, info := range map[string]tiles.LayerInfo{"followed": followed, "unanalyzed": unanalyzed} {
		if b := info.Bounds; b[0] > -170 || b[1] > 40 || b[2] < 59 || b[3] < 49 {
			t.Errorf("%s: bounds %v, want at least [-170 40 59 49]", name, b)
		}
	}
}

// describeFollowedAndPlain describes two point layers of table (in srid):
// one followed (Catalog.Follow), whose bounds are the table's extent, and
// one not, whose bounds are its statistics' (or the extent, without them).
func describeFollowedAndPlain(t *testing.T, table string, srid int) (followed, plain tiles.LayerInfo) {
	t.Helper()
	layer := func(name string) tiles.Layer {
		return tiles.Layer{Name: name, Table: table, GeometryColumn: "geom", SRID: srid, IDColumn: "id", GeometryKind: tiles.KindPoint}
	}
	cat := newCatalog(t, layer("followed"), layer("plain"))
	cat.Follow("followed")
	store := tiles.NewStore(testenv.ReadPool(t))
	var err error
	if followed, err = store.Describe(t.Context(), cat.Layer("followed")); err != nil {
		t.Fatalf("followed: %v", err)
	}
	if plain, err = store.Describe(t.Context(), cat.Layer("plain")); err != nil {
		t.Fatalf("plain: %v", err)
	}
	return followed, plain
}
