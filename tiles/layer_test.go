package tiles_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/tiles"
)

// demoLayers mirrors the three layers of cmd/geotoll's DefaultConfig, over
// the tables `geotoll seed` loads.
func demoLayers() []tiles.Layer {
	return []tiles.Layer{
		{
			Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", SRID: 3857,
			IDColumn: "id", Properties: []string{"name", "kind", "city", "rank"},
			GeometryKind: tiles.KindPoint, OrderBy: []string{"rank"},
			MaxFeatures: 20000, StatementTimeout: 2 * time.Second,
		},
		{
			Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom_3857", SRID: 3857,
			IDColumn: "id", Properties: []string{"name", "city", "population"},
			GeometryKind: tiles.KindPolygon, OrderBy: []string{"population desc"},
			MinZoom: 4, MaxFeatures: 5000, StatementTimeout: 2 * time.Second,
		},
		{
			Name: "geofences", Table: "geotoll.geofences", GeometryColumn: "geom_3857", SRID: 3857,
			IDColumn: "id", Properties: []string{"name", "kind"}, GeometryKind: tiles.KindPolygon,
			MaxFeatures: 5000, StatementTimeout: 2 * time.Second,
		},
	}
}

func newCatalog(t testing.TB, layers ...tiles.Layer) *tiles.Catalog {
	t.Helper()
	c, err := tiles.NewCatalog(layers)
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	return c
}

func TestNewCatalogDefaults(t *testing.T) {
	t.Parallel()
	c := newCatalog(t, tiles.Layer{Name: "a", Table: "s.t", GeometryColumn: "g"})
	l := c.Layer("a")
	if l == nil {
		t.Fatal(`Layer("a") = nil`)
	}
	want := tiles.Layer{
		Name: "a", Table: "s.t", GeometryColumn: "g", SRID: 3857, IDColumn: "id",
		MinZoom: 0, MaxZoom: int(tiles.MaxZoom), Extent: tiles.DefaultExtent, Buffer: tiles.DefaultBuffer,
		MaxFeatures: tiles.DefaultMaxFeatures, StatementTimeout: tiles.DefaultStatementTimeout,
	}
	if got, want := withoutSQL(*l), withoutSQL(want); got != want {
		t.Errorf("defaults:\n got %s\nwant %s", got, want)
	}
	if l.SQL(0) == "" || l.SQL(tiles.MaxZoom) == "" {
		t.Error("SQL() is empty after NewCatalog")
	}
	if c.Layer("b") != nil {
		t.Error(`Layer("b") != nil for an unknown layer`)
	}
}

// withoutSQL drops the rendered query (unexported) so layers can be compared.
func withoutSQL(l tiles.Layer) string {
	return fmt.Sprintf("%s %s %s %d %s %q z%d-%d e%d b%d f%d %s", l.Name, l.Table, l.GeometryColumn, l.SRID,
		l.IDColumn, l.Properties, l.MinZoom, l.MaxZoom, l.Extent, l.Buffer, l.MaxFeatures, l.StatementTimeout)
}

func TestNewCatalogOwnsItsLayers(t *testing.T) {
	t.Parallel()
	in := demoLayers()
	c := newCatalog(t, in...)
	in[0].Name, in[0].Table, in[0].MaxFeatures = "changed", "evil.table", 1
	l := c.Layer("places")
	if l == nil || l.Table != "geotoll.places" || l.MaxFeatures != 20000 {
		t.Fatalf("catalog layer changed with the caller's slice: %+v", l)
	}
	if c.Layer("changed") != nil {
		t.Fatal("catalog sees a renamed layer")
	}
	var names []string
	for _, l := range c.Layers() {
		names = append(names, l.Name)
	}
	if want := []string{"places", "districts", "geofences"}; !slices.Equal(names, want) {
		t.Errorf("Layers() = %v, want configuration order %v", names, want)
	}
	ls := c.Layers()
	ls[0] = nil
	if c.Layers()[0] == nil {
		t.Error("Layers() returns the catalog's own slice")
	}
}

func TestNewCatalogValidation(t *testing.T) {
	t.Parallel()
	base := func(mod func(*tiles.Layer)) tiles.Layer {
		l := tiles.Layer{Name: "ok", Table: "geotoll.places", GeometryColumn: "geom_3857"}
		mod(&l)
		return l
	}
	for _, tc := range []struct {
		name   string
		layers []tiles.Layer
		want   string // substring of the error; "" means valid
	}{
		{name: "valid", layers: []tiles.Layer{base(func(*tiles.Layer) {})}},
		{name: "valid name charset", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "Aa0_-z" })}},
		{name: "valid 64-byte name", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = strings.Repeat("n", 64) })}},
		{name: "valid zoom edge", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MinZoom, l.MaxZoom = 22, 22 })}},
		{name: "valid extent edges", layers: []tiles.Layer{
			base(func(l *tiles.Layer) { l.Name, l.Extent, l.Buffer = "a", 256, 128 }),
			base(func(l *tiles.Layer) { l.Name, l.Extent = "b", 16384 }),
		}},
		{name: "valid timeout edges", layers: []tiles.Layer{
			base(func(l *tiles.Layer) { l.Name, l.StatementTimeout = "a", time.Millisecond }),
			base(func(l *tiles.Layer) { l.Name, l.StatementTimeout = "b", time.Minute }),
		}},

		{name: "empty name", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "" })}, want: "name"},
		{name: "name with comma", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "a,b" })}, want: "name"},
		{name: "name with space", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "a b" })}, want: "name"},
		{name: "name with slash", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "a/b" })}, want: "name"},
		{name: "name with dot", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "a.mvt" })}, want: "name"},
		{name: "name with quote", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = `a'b` })}, want: "name"},
		{name: "non-ASCII name", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "plätze" })}, want: "name"},
		{name: "name 65 bytes", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = strings.Repeat("n", 65) })}, want: "name"},
		{name: "name with newline", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Name = "a\n" })}, want: "name"},
		{name: "no table", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Table = "" })}, want: "table and geometry_column are required"},
		{name: "no geometry column", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.GeometryColumn = "" })}, want: "table and geometry_column are required"},
		{name: "table SQL-quoted", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Table = `geotoll."Places"` })}, want: "without SQL quotes"},
		{name: "valid table of a schema, quotes and all", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Schema, l.Table = "gis", `"Places"` })}},
		{name: "schema SQL-quoted", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Schema, l.Table = `"GIS"`, "places" })}, want: "without SQL quotes"},
		{name: "dotted table SQL-quoted", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Table = `public."a.b"` })}, want: "without SQL quotes"},
		{name: "valid table with a quote inside", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Table = `geotoll.we"ird` })}},
		{name: "negative srid", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.SRID = -4326 })}, want: "srid"},
		{name: "negative minzoom", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MinZoom = -1 })}, want: "zoom range"},
		{name: "maxzoom 23", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MaxZoom = 23 })}, want: "zoom range"},
		{name: "minzoom above maxzoom", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MinZoom, l.MaxZoom = 10, 5 })}, want: "zoom range"},
		{name: "minzoom above default maxzoom", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MinZoom = 23 })}, want: "zoom range"},
		{name: "negative maxzoom", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MaxZoom = -1 })}, want: "zoom range"},
		{name: "extent 255", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Extent, l.Buffer = 255, 1 })}, want: "extent"},
		{name: "extent 16385", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Extent = 16385 })}, want: "extent"},
		{name: "negative extent", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Extent = -4096 })}, want: "extent"},
		{name: "negative buffer", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Buffer = -1 })}, want: "buffer"},
		{name: "buffer above half extent", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.Extent, l.Buffer = 4096, 2049 })}, want: "buffer"},
		{name: "negative max_features", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MaxFeatures = -1 })}, want: "max_features"},
		{name: "max_features above ceiling", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.MaxFeatures = 200001 })}, want: "max_features"},
		{name: "timeout below 1ms", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.StatementTimeout = 999 * time.Microsecond })}, want: "statement_timeout"},
		{name: "timeout above 1m", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.StatementTimeout = time.Minute + time.Millisecond })}, want: "statement_timeout"},
		{name: "negative timeout", layers: []tiles.Layer{base(func(l *tiles.Layer) { l.StatementTimeout = -time.Second })}, want: "statement_timeout"},
		{name: "duplicate layer", layers: []tiles.Layer{
			base(func(*tiles.Layer) {}),
			base(func(l *tiles.Layer) { l.Table = "geotoll.districts" }),
		}, want: `layer "ok" is defined twice`},
		{name: "every error of a layer reported", layers: []tiles.Layer{
			base(func(l *tiles.Layer) { l.Extent, l.MaxFeatures = 100, -5 }),
		}, want: "max_features -5"},
		{name: "errors of later layers reported", layers: []tiles.Layer{
			base(func(l *tiles.Layer) { l.Extent = 100 }),
			base(func(l *tiles.Layer) { l.Name, l.SRID = "other", -1 }),
		}, want: `layer "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := tiles.NewCatalog(tc.layers)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("NewCatalog: %v", err)
				}
				if len(c.Layers()) != len(tc.layers) {
					t.Fatalf("catalog has %d layers, want %d", len(c.Layers()), len(tc.layers))
				}
				return
			}
			if err == nil {
				t.Fatalf("NewCatalog accepted %+v", tc.layers)
			}
			if c != nil {
				t.Errorf("NewCatalog returned a catalog with error %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// quotedIdent matches one double-quoted SQL identifier ("" is an escaped ").
var quotedIdent = regexp.MustCompile(`"(?:[^"]|"")*"`)

// skeleton replaces every quoted identifier of query with "_": two queries
// with the same skeleton differ only inside identifiers.
func skeleton(query string) string { return quotedIdent.ReplaceAllString(query, `"_"`) }

// unquote returns the identifiers quoted in query, unescaped, in order.
func unquote(query string) []string {
	var out []string
	for _, q := range quotedIdent.FindAllString(query, -1) {
		out = append(out, strings.ReplaceAll(q[1:len(q)-1], `""`, `"`))
	}
	return out
}

// TestHostileIdentifiersStayQuoted renders layers whose table and columns
// are hostile configuration text. Each must end up inside one quoted
// identifier: the query's skeleton (everything outside identifiers) is the
// same as a benign layer's, and the identifiers read back unchanged.
func TestHostileIdentifiersStayQuoted(t *testing.T) {
	t.Parallel()
	benign := tiles.Layer{
		Name: "benign", Table: "geotoll.places", GeometryColumn: "geom_3857",
		IDColumn: "id", Properties: []string{"name", "kind"},
	}
	for _, tc := range []struct {
		name      string
		mod       func(*tiles.Layer)
		wantIdent []string // identifiers that must appear, unescaped
	}{
		{
			name:      "table breaks out with a quote",
			mod:       func(l *tiles.Layer) { l.Table = `geotoll.places"; DROP TABLE x; --` },
			wantIdent: []string{"geotoll", `places"; DROP TABLE x; --`},
		},
		{
			name:      "table with comment and newline",
			mod:       func(l *tiles.Layer) { l.Table = "geotoll.places\" /* \n*/ UNION SELECT 1 --" },
			wantIdent: []string{"geotoll", "places\" /* \n*/ UNION SELECT 1 --"},
		},
		{
			name:      "geometry column with quotes",
			mod:       func(l *tiles.Layer) { l.GeometryColumn = `geom_3857" IS NOT NULL OR "1"="1` },
			wantIdent: []string{`geom_3857" IS NOT NULL OR "1"="1`},
		},
		{
			name:      "id column with a trailing quote",
			mod:       func(l *tiles.Layer) { l.IDColumn = `id"` },
			wantIdent: []string{`id"`},
		},
		{
			name:      "property reading another table",
			mod:       func(l *tiles.Layer) { l.Properties = []string{`name", (SELECT passwd FROM pg_shadow) AS "x`, "kind"} },
			wantIdent: []string{`name", (SELECT passwd FROM pg_shadow) AS "x`},
		},
		{
			name:      "dollar quoting and semicolons",
			mod:       func(l *tiles.Layer) { l.Properties = []string{"$$; DROP SCHEMA geotoll; $$", "kind"} },
			wantIdent: []string{"$$; DROP SCHEMA geotoll; $$"},
		},
		{
			name:      "template syntax is not executed",
			mod:       func(l *tiles.Layer) { l.Properties = []string{"{{.Table}}", "kind"} },
			wantIdent: []string{"{{.Table}}"},
		},
		{
			// A column name is one identifier even if it holds a dot: only
			// the table is schema-qualified.
			name:      "dotted column is one identifier",
			mod:       func(l *tiles.Layer) { l.GeometryColumn = "geom.3857" },
			wantIdent: []string{"geom.3857"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hostile := benign
			hostile.Name = "hostile"
			tc.mod(&hostile)
			c := newCatalog(t, benign, hostile)
			want, got := c.Layer("benign").SQL(14), c.Layer("hostile").SQL(14)
			if skeleton(got) != skeleton(want) {
				t.Fatalf("hostile identifier changed the query outside its quotes:\n--- benign\n%s\n--- hostile\n%s", want, got)
			}
			idents := unquote(got)
			for _, w := range tc.wantIdent {
				if !slices.Contains(idents, w) {
					t.Errorf("identifier %q not found as one quoted identifier; identifiers: %q", w, idents)
				}
			}
		})
	}
}

func TestRenderedSQL(t *testing.T) {
	t.Parallel()
	c := newCatalog(t,
		tiles.Layer{Name: "merc", Table: "geotoll.places", GeometryColumn: "geom_3857", Properties: []string{"name"},
			GeometryKind: tiles.KindPoint, OrderBy: []string{"rank desc"}},
		tiles.Layer{Name: "wgs", Table: "geotoll.places", GeometryColumn: "geom", SRID: 4326, GeometryKind: tiles.KindPoint},
		tiles.Layer{Name: "poly", Table: "geotoll.districts", GeometryColumn: "geom_3857", GeometryKind: tiles.KindPolygon},
		tiles.Layer{Name: "poly4326", Table: "geotoll.districts", GeometryColumn: "geom", SRID: 4326, GeometryKind: tiles.KindPolygon},
		tiles.Layer{Name: "unknown", Table: "geotoll.districts", GeometryColumn: "geom_3857"},
	)
	clustered, raw := c.Layer("merc").SQL(5), c.Layer("merc").SQL(15)
	// The columns are read by their names and carried as c0, c1… (id,
	// properties, order_by), the order over those; the features name
	// their properties again.
	for _, want := range []string{`FROM "geotoll"."places" AS t`, `t."geom_3857" &&`, `t."id" AS c0`, `t."name" AS c1`,
		`t."rank" AS c2`, `t.c0 AS id`, `t.c1 AS "name"`, `t.c2 DESC NULLS LAST, t.c0 ASC NULLS LAST`} {
		if !strings.Contains(clustered, want) {
			t.Errorf("3857 point layer SQL lacks %q:\n%s", want, clustered)
		}
	}
	if !strings.Contains(clustered, "count(*) OVER") || strings.Contains(raw, "count(*) OVER") {
		t.Errorf("z5 should cluster and z15 not:\n--- z5\n%s\n--- z15\n%s", clustered, raw)
	}
	if strings.Contains(clustered, "ST_Transform") || strings.Contains(c.Layer("poly").SQL(5), "ST_Transform") {
		t.Errorf("3857 layer SQL transforms its geometry:\n%s", clustered)
	}
	// The geometry transformed (a polygon's once read, carried as g), and
	// the filter box: the envelope cut at the world's edges, transformed
	// (in 4326 its corners give its box exactly).
	filter := `WHERE t."geom" && (SELECT ST_Transform(ST_MakeEnvelope(greatest(ST_XMin(env.geom) - env.buffer_m, -20037508.342789244), ST_YMin(env.geom) - env.buffer_m, ` +
		`least(ST_XMax(env.geom) + env.buffer_m, 20037508.342789244), ST_YMax(env.geom) + env.buffer_m, 3857), 4326) FROM env)`
	for q, wants := range map[string][]string{
		c.Layer("wgs").SQL(5):      {`ST_Transform(t."geom", 3857)`, filter},
		c.Layer("poly4326").SQL(5): {`t."geom" AS g`, `ST_Transform(t.g, 3857)`, filter},
	} {
		for _, want := range wants {
			if !strings.Contains(q, want) {
				t.Errorf("4326 layer SQL lacks %q:\n%s", want, q)
			}
		}
	}
	if q := c.Layer("poly").SQL(5); !strings.Contains(q, "ST_SimplifyPreserveTopology(") || strings.Contains(q, "Box2D") {
		t.Errorf("polygon SQL does not simplify its reductions, or sizes stored features:\n%s", q)
	}
	if c.Layer("unknown").Kind() != tiles.KindMixed || c.Layer("unknown").SQL(3) != c.Layer("poly").SQL(3) {
		t.Errorf("a layer of unknown kind is not served by the line and polygon query")
	}
	for name, tc := range map[string]struct {
		q      string
		params int
	}{
		"points clustered": {clustered, 18}, "points raw": {raw, 18}, "points 4326": {c.Layer("wgs").SQL(3), 18},
		"polygons": {c.Layer("poly").SQL(3), 13}, "polygons 4326": {c.Layer("poly4326").SQL(3), 13},
	} {
		q := tc.q
		if strings.Contains(q, "{{") || strings.Contains(q, "<no value>") {
			t.Errorf("%s: template not fully rendered:\n%s", name, q)
		}
		for i := 1; i <= tc.params; i++ {
			if !strings.Contains(q, fmt.Sprintf("$%d::", i)) {
				t.Errorf("%s: query does not bind $%d:\n%s", name, i, q)
			}
		}
		if strings.Contains(q, fmt.Sprintf("$%d", tc.params+1)) {
			t.Errorf("%s: query binds more than %d parameters:\n%s", name, tc.params, q)
		}
	}
}

// TestSQLHoldsNoRequestText: the layer's query is fixed at NewCatalog and
// no request changes it. The layer name (which a request also carries) is
// bound as $9, never written into the text.
func TestSQLHoldsNoRequestText(t *testing.T) {
	t.Parallel()
	const name = "zq_marker_layer"
	c := newCatalog(t, tiles.Layer{Name: name, Table: "geotoll.places", GeometryColumn: "geom_3857"})
	l := c.Layer(name)
	before := l.SQL(3)
	if strings.Contains(before, name) {
		t.Fatalf("the layer name is written into the query text:\n%s", before)
	}
	requests := [][4]string{
		{name, "3", "4", "5.mvt"},
		{name, "14", "8802", "5373.pbf"},
		{name + `'; DROP TABLE geotoll.places; --`, "1", "1", "1.mvt"},
		{name, "1", "1", "1'; SELECT pg_sleep(10); --.mvt"},
		{name + ",other", "0", "0", "0.mvt"},
	}
	for _, r := range requests {
		req, _ := c.ParseRequest(r[0], r[1], r[2], r[3])
		for _, got := range append(req.Layers, l) {
			if got.SQL(3) != before {
				t.Fatalf("request %q changed the query:\n%s", r, got.SQL(3))
			}
		}
		for _, part := range r {
			if len(part) > 5 && part != name && strings.Contains(before, part) {
				t.Errorf("query text contains request text %q", part)
			}
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	var layers []tiles.Layer
	for i := range tiles.MaxComposite {
		layers = append(layers, tiles.Layer{Name: fmt.Sprintf("l%d", i), Table: "t", GeometryColumn: "g"})
	}
	layers = append(layers, demoLayers()...)
	c := newCatalog(t, layers...)
	eight := make([]string, tiles.MaxComposite)
	for i := range eight {
		eight[i] = fmt.Sprintf("l%d", i)
	}
	nine := append(slices.Clone(eight), "places")

	for _, tc := range []struct {
		name   string
		list   string
		want   []string
		status int
	}{
		{name: "one", list: "places", want: []string{"places"}},
		{name: "composite order kept", list: "places,districts", want: []string{"places", "districts"}},
		{name: "composite reversed", list: "geofences,districts,places", want: []string{"geofences", "districts", "places"}},
		{name: "MaxComposite layers", list: strings.Join(eight, ","), want: eight},
		{name: "empty", list: "", status: 400},
		{name: "lone comma", list: ",", status: 400},
		{name: "trailing comma", list: "places,", status: 400},
		{name: "leading comma", list: ",places", status: 400},
		{name: "double comma", list: "places,,districts", status: 400},
		{name: "duplicate", list: "places,places", status: 400},
		{name: "duplicate apart", list: "places,districts,places", status: 400},
		{name: "unknown", list: "nope", status: 404},
		{name: "unknown after known", list: "places,nope", status: 404},
		{name: "case matters", list: "Places", status: 404},
		{name: "space is not trimmed", list: "places, districts", status: 404},
		{name: "too many", list: strings.Join(nine, ","), status: 422},
		{name: "too many unknown", list: strings.Repeat("x,", 20) + "x", status: 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.Resolve(tc.list)
			if tc.status != 0 {
				wantProblem(t, err, tc.status, "layer")
				if got != nil {
					t.Errorf("Resolve returned layers with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tc.list, err)
			}
			var names []string
			for _, l := range got {
				names = append(names, l.Name)
				if l != c.Layer(l.Name) {
					t.Errorf("Resolve returned a copy of %q, not the catalog's layer", l.Name)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("Resolve(%q) = %v, want %v", tc.list, names, tc.want)
			}
		})
	}
}

func TestZoomInRange(t *testing.T) {
	t.Parallel()
	c := newCatalog(t, tiles.Layer{Name: "a", Table: "t", GeometryColumn: "g", MinZoom: 4, MaxZoom: 12})
	l := c.Layer("a")
	for z, want := range map[int]bool{0: false, 3: false, 4: true, 8: true, 12: true, 13: false, 22: false} {
		if got := l.ZoomInRange(maptile.Zoom(z)); got != want {
			t.Errorf("ZoomInRange(%d) = %v, want %v", z, got, want)
		}
	}
}

// A point layer's default overview band covers every zoom it clusters,
// up to its own generalize.maxzoom: a zoom above the band would cluster
// the whole table on every tile.
func TestPointOverviewBandFollowsGeneralizeMaxZoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		generalize, overviews, dataMax int
		kind                           tiles.Kind
		lo, hi                         int
	}{
		{generalize: 14, kind: tiles.KindPoint, lo: 0, hi: 14},
		{generalize: 5, kind: tiles.KindPoint, lo: 0, hi: 5},
		{kind: tiles.KindPoint, lo: 0, hi: tiles.DefaultGeneralizeMaxZoom},
		{dataMax: 10, kind: tiles.KindPoint, lo: 0, hi: 9}, // generalize.maxzoom defaults to data_maxzoom - 1
		{generalize: 14, overviews: 10, kind: tiles.KindPoint, lo: 0, hi: 10},
		{generalize: 14, kind: tiles.KindPolygon, lo: 0, hi: tiles.DefaultOverviewMaxZoom},
		{generalize: 14, kind: tiles.KindLine, lo: 0, hi: tiles.DefaultOverviewMaxZoom},
	} {
		c := newCatalog(t, tiles.Layer{Name: "p", Table: "x.p", GeometryColumn: "geom", GeometryKind: tc.kind, DataMaxZoom: tc.dataMax,
			Generalize: tiles.Generalize{MaxZoom: tc.generalize}, Overviews: tiles.Overviews{MaxZoom: tc.overviews}})
		lo, hi, ok := c.Layer("p").OverviewZooms(tc.kind)
		if !ok || lo != tc.lo || hi != tc.hi {
			t.Errorf("%s, generalize.maxzoom %d, overviews.maxzoom %d, data_maxzoom %d: overview band z%d..z%d (ok %v), want z%d..z%d",
				tc.kind, tc.generalize, tc.overviews, tc.dataMax, lo, hi, ok, tc.lo, tc.hi)
		}
	}
}
