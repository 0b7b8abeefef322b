package tiles_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// discoverFixture creates tables with hostile names, all with points near
// lon/lat (0.01, 0.01)…(0.05, 0.05), readable by the read role except
// "hidden".
func discoverFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	pt := func(srid int) string {
		if srid == 4326 {
			return "ST_SetSRID(ST_MakePoint(g * 0.01, g * 0.01), 4326)"
		}
		return "ST_Transform(ST_SetSRID(ST_MakePoint(g * 0.01, g * 0.01), 4326), 3857)"
	}
	f.exec(t, `CREATE TABLE {s}."we""ird; drop" (
		id int PRIMARY KEY, "na""me; --" varchar(64), n float8, ok bool, at timestamptz, geom geometry(Point, 3857))`)
	f.exec(t, `INSERT INTO {s}."we""ird; drop" SELECT g, 'n' || g, g / 2.0, g % 2 = 0, now(), `+pt(3857)+` FROM generate_series(1, 5) g`)
	f.exec(t, `CREATE TABLE {s}."dotted.name" (label varchar(32), g geometry(Point, 4326))`) // no key: served without ids
	f.exec(t, `INSERT INTO {s}."dotted.name" SELECT 'l' || g, `+pt(4326)+` FROM generate_series(1, 5) g`)
	f.exec(t, `CREATE TABLE {s}.two (id bigint PRIMARY KEY, label text, a geometry(Point, 3857), b geometry(Point, 4326))`)
	f.exec(t, `INSERT INTO {s}.two SELECT g, 't' || g, `+pt(3857)+`, `+pt(4326)+` FROM generate_series(1, 5) g`)
	f.exec(t, `ANALYZE {s}.two`) // its bounds come from ST_EstimatedExtent
	f.exec(t, `CREATE TABLE {s}.hidden (id int PRIMARY KEY, g geometry(Point, 3857))`)
	f.exec(t, `CREATE TABLE {s}.nosrid (id int PRIMARY KEY, g geometry)`)
	f.exec(t, `GRANT SELECT ON {s}."we""ird; drop", {s}."dotted.name", {s}.two, {s}.nosrid TO geotoll_reader`)
	return f
}

func TestDiscover(t *testing.T) {
	t.Parallel()
	f := discoverFixture(t)
	pool := testenv.ReadPool(t)
	existing := demoLayers()
	// A configured layer already serves two.a, and takes the name two_b.
	existing = append(existing, tiles.Layer{Name: "two_b", Table: f.schema + ".two", GeometryColumn: "a"})
	found, err := tiles.Discover(t.Context(), pool, tiles.Discovery{
		Schemas:  []string{f.schema, "no_such_schema"},
		Template: tiles.Layer{MinZoom: 2, MaxFeatures: 100},
	}, existing)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	byTable := map[string]tiles.Layer{}
	for _, l := range found {
		if l.Schema != f.schema {
			t.Errorf("layer %q from schema %q", l.Name, l.Schema)
		}
		byTable[l.Table+"."+l.GeometryColumn] = l
	}
	if len(found) != 3 {
		t.Fatalf("discovered %d layers %+v, want 3 (hostile, dotted, two.b)", len(found), found)
	}

	weird, ok := byTable[`we"ird; drop.geom`]
	if !ok {
		t.Fatalf("hostile table not discovered: %+v", found)
	}
	if weird.Name != "we_ird__drop" || weird.IDColumn != "id" || weird.WithoutID || weird.SRID != 3857 ||
		!slices.Equal(weird.Properties, []string{`na"me; --`, "n", "ok"}) || weird.MinZoom != 2 || weird.MaxFeatures != 100 {
		t.Errorf("hostile layer %+v", weird)
	}
	dotted := byTable["dotted.name.g"]
	if dotted.Name != "dotted_name" || !dotted.WithoutID || dotted.SRID != 4326 || !slices.Equal(dotted.Properties, []string{"label"}) {
		t.Errorf("dotted layer %+v", dotted)
	}
	two := byTable["two.b"]
	if want := f.schema + "_two_b"; two.Name != want || two.IDColumn != "id" {
		t.Errorf("two.b: name %q (want %q, as two_b is taken), id %q", two.Name, want, two.IDColumn)
	}
	if _, ok := byTable["two.a"]; ok {
		t.Error("two.a is served by a configured layer but was discovered again")
	}

	// Every discovered layer renders, through the catalog like any other.
	cat, err := tiles.NewCatalog(append(existing, found...))
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	store := tiles.NewStore(pool)
	tile := maptile.At(orb.Point{0.03, 0.03}, 8)
	for _, l := range found {
		t.Run(l.Name, func(t *testing.T) {
			b, err := store.Tile(t.Context(), []*tiles.Layer{cat.Layer(l.Name)}, tile)
			if err != nil {
				t.Fatalf("Tile: %v", err)
			}
			layers, err := mvt.Unmarshal(b)
			if err != nil || len(layers) != 1 || len(layers[0].Features) != 5 {
				t.Fatalf("MVT: %v, %d layers", err, len(layers))
			}
			ft := layers[0].Features[0]
			for _, p := range l.Properties {
				if _, ok := ft.Properties[p]; !ok {
					t.Errorf("feature lacks property %q: %v", p, ft.Properties)
				}
			}
			if l.WithoutID != (ft.ID == nil) {
				t.Errorf("WithoutID %v but feature id %v", l.WithoutID, ft.ID)
			}

			info, err := store.Describe(t.Context(), cat.Layer(l.Name))
			if err != nil {
				t.Fatalf("Describe: %v", err)
			}
			if b := info.Bounds; !(b[0] <= 0.0101 && b[1] <= 0.0101 && b[2] >= 0.0499 && b[3] >= 0.0499 && b[2] < 1 && b[3] < 1) {
				t.Errorf("bounds %v, want about [0.01 0.01 0.05 0.05]", b)
			}
			for _, p := range l.Properties {
				if info.Fields[p] == "" {
					t.Errorf("no type for %q: %v", p, info.Fields)
				}
			}
		})
	}
	info, err := store.Describe(t.Context(), cat.Layer("we_ird__drop"))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{`na"me; --`: "String", "n": "Number", "ok": "Boolean"}; len(info.Fields) != 3 ||
		info.Fields[`na"me; --`] != want[`na"me; --`] || info.Fields["n"] != "Number" || info.Fields["ok"] != "Boolean" {
		t.Errorf("fields %v, want %v", info.Fields, want)
	}
}

// Discovered names stay unique whatever the tables are called.
func TestDiscoverNamesAreUniqueAndSafe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// "a b", "a.b" and "a_b" all map to a_b; "ñ" is all non-ASCII.
	for _, name := range []string{`"a b"`, `"a-b"`, `"a.b"`, `"a_b"`, `"ñ"`} {
		f.exec(t, `CREATE TABLE {s}.`+name+` (g geometry(Point, 3857))`)
		f.exec(t, `GRANT SELECT ON {s}.`+name+` TO geotoll_reader`)
	}
	found, err := tiles.Discover(t.Context(), testenv.ReadPool(t), tiles.Discovery{Schemas: []string{f.schema}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range found {
		names = append(names, l.Name)
	}
	sort.Strings(names)
	s := f.schema
	want := []string{"__", "a-b", "a_b", s + "_a_b", s + "_a_b-2"} // ñ is two bytes
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if _, err := tiles.NewCatalog(found); err != nil {
		t.Errorf("discovered layers do not make a catalog: %v", err)
	}
}

func TestDiscoverNothing(t *testing.T) {
	t.Parallel()
	found, err := tiles.Discover(t.Context(), nil, tiles.Discovery{}, nil)
	if err != nil || found != nil {
		t.Fatalf("no schemas: %v %v", found, err)
	}
}

func TestDescribeDemoLayers(t *testing.T) {
	t.Parallel()
	cat := demoCatalog(t)
	store := tiles.NewStore(testenv.ReadPool(t))
	info, err := store.Describe(t.Context(), cat.Layer("places"))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"name": "String", "kind": "String", "city": "String", "rank": "Number"}; len(info.Fields) != 4 ||
		info.Fields["rank"] != "Number" || info.Fields["name"] != "String" {
		t.Errorf("fields %v, want %v", info.Fields, want)
	}
	// The demo cities span Anchorage to Auckland, Tromsø to Melbourne.
	b := info.Bounds
	if !(b[0] < -149 && b[2] > 178 && b[1] < -37 && b[3] > 69) || b[0] < -180 || b[2] > 180 || b[1] < -85.06 || b[3] > 85.06 {
		t.Errorf("places bounds %v", b)
	}
}

// A discovered layer's properties are bounded in number and in width: a
// free-text column (text, or varchar without a length) can hold megabytes
// per row, and every row of a tile would carry it. Such columns are left
// out (name them in a configured layer to serve them), as are text columns
// declared wider than 256 characters; at most 16 properties are kept, in
// column order.
func TestDiscoverBoundsProperties(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cols := `id int PRIMARY KEY, essay text, label varchar(40), code char(3), memo varchar, wide varchar(5000), flag bool`
	var want []string
	want = append(want, "label", "code", "flag")
	for i := range 20 {
		cols += fmt.Sprintf(", n%d int", i)
		if len(want) < 16 {
			want = append(want, fmt.Sprintf("n%d", i))
		}
	}
	f.exec(t, `CREATE TABLE {s}.wide (`+cols+`, geom geometry(Point, 3857))`)
	f.exec(t, `GRANT SELECT ON {s}.wide TO geotoll_reader`)
	found, err := tiles.Discover(t.Context(), testenv.ReadPool(t), tiles.Discovery{Schemas: []string{f.schema}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !slices.Equal(found[0].Properties, want) {
		t.Fatalf("discovered %+v, want properties %q", found, want)
	}
}

// A discovered table may have columns named as the tile queries or the
// overviews name columns of their own (point_count, cx, prio…): discovery
// leaves out the one a property cannot have (point_count, which point
// features carry), offers the others, the catalog builds and every tile
// renders.
func TestDiscoverLeavesOutQueryNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cols := `id bigint PRIMARY KEY, point_count int, cx int, cy int, g int, prio int, q int, n int`
	f.exec(t, `CREATE TABLE {s}.clusters (`+cols+`, geom geometry(Point, 3857))`)
	f.exec(t, `CREATE TABLE {s}.areas (`+cols+`, geom geometry(Polygon, 3857))`)
	f.exec(t, `INSERT INTO {s}.clusters SELECT g, 1, 2, 3, 4, 5, 6, g, ST_MakePoint(g * 1000, g * 1000) FROM generate_series(1, 5) g`)
	f.exec(t, `INSERT INTO {s}.areas SELECT g, 1, 2, 3, 4, 5, 6, g, ST_MakeEnvelope(g * 1000, g * 1000, g * 1000 + 500, g * 1000 + 500, 3857)
		FROM generate_series(1, 5) g`)
	f.exec(t, `GRANT SELECT ON {s}.clusters, {s}.areas TO geotoll_reader`)
	pool := testenv.ReadPool(t)
	found, err := tiles.Discover(t.Context(), pool, tiles.Discovery{Schemas: []string{f.schema}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Fatalf("discovered %d layers, want 2", len(found))
	}
	for _, l := range found {
		if want := []string{"cx", "cy", "g", "prio", "q", "n"}; !slices.Equal(l.Properties, want) {
			t.Errorf("%s: properties %q, want %q", l.Name, l.Properties, want)
		}
	}
	cat, err := tiles.NewCatalog(found)
	if err != nil {
		t.Fatalf("NewCatalog(discovered): %v", err)
	}
	if _, err := cat.Refresh(t.Context(), pool); err != nil { // reads each layer's kind
		t.Fatal(err)
	}
	store := tiles.NewStore(pool)
	for _, z := range []maptile.Zoom{5, 16} { // clustered, and not
		for _, l := range cat.Layers() {
			_, layers := render(t, store, []*tiles.Layer{l}, maptile.At(orb.Point{0.02, 0.02}, z))
			if len(layers) != 1 || len(layers[0].Features) == 0 {
				t.Errorf("%s z%d: %d layers, no features", l.Name, z, len(layers))
				continue
			}
			for _, feat := range layers[0].Features {
				if p := feat.Properties; p["cx"] != 2.0 || p["cy"] != 3.0 || p["g"] != 4.0 || p["prio"] != 5.0 || p["q"] != 6.0 || p["n"] != feat.ID {
					t.Errorf("%s z%d: feature %v carries %v, want cx 2, cy 3, g 4, prio 5, q 6 and n its id", l.Name, z, feat.ID, p)
				}
			}
		}
	}
}
