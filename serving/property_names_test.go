package serving_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// A layer's properties and order_by may be named as the tile queries and
// the storage `geotoll prepare` builds name columns of their own: the
// overviews (which name their geometry geom, and a point overview its
// cells cx, cy and its counts point_count) and the pieces carry them, and
// every tile read from them, or from the table, renders with each feature
// carrying each property under its own name. A point layer's properties
// cx, cy and geom, and an order_by column point_count, are among them (a
// property cannot be called point_count: every point feature carries its
// count by that name). The clustered tiles read from a point layer's
// overviews carry the same features, properties and counts as those
// clustered from its table.
func TestStorageOfPropertiesNamedAsTheQueriesColumns(t *testing.T) {
	t.Parallel()
	owner, f, polys := setup(t, true, "names_")
	pts := unique("names_")
	testenv.ForgetStorage(t, owner, pts)
	// The geometry is called shape; geom is a property and orders the
	// features after point_count, which is not.
	names := []string{"prio", "cx", "cy", "g", "q", "name", "id", "level", "mvt", "shift", "cell", "tolerance", "geom"}
	values := `i, i, 10 + i, 20 + i, 'g' || i, 'q' || i, 'n' || i, 'id' || i, 30 + i, 'm' || i, 40 + i, 'c' || i, 50 + i, 60 + i, i % 2`
	cols := `gid bigint PRIMARY KEY, prio int, cx int, cy int, g text, q text, name text, id text, level int, mvt text, shift int,
		cell text, tolerance int, geom int, point_count int`
	order := []string{"point_count desc", "geom"}
	// Four discs 4 km across (257 vertices: several pieces each) 10 km
	// apart around the centre of a z10 tile, and four points 100 m apart
	// near the centre of a z14 tile within it.
	c := maptile.New(531, 359, 10).Center()
	pc := maptile.At(c, 14).Center()
	f.exec(t, `CREATE TABLE {s}.named_polys (`+cols+`, shape geometry(Polygon, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.named_polys SELECT `+values+`,
		ST_Buffer(ST_Translate(ST_Transform(ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326), 3857), 10000 * i - 25000, 0), 2000, 'quad_segs=64')
		FROM generate_series(1, 4) AS i`, c[0], c[1])
	f.exec(t, `CREATE TABLE {s}.named_pts (`+cols+`, shape geometry(Point, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.named_pts SELECT `+values+`,
		ST_Translate(ST_Transform(ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326), 3857), 100 * i, 100 * (i % 2))
		FROM generate_series(1, 4) AS i`, pc[0], pc[1])
	f.exec(t, `CREATE INDEX ON {s}.named_polys USING gist (shape)`)
	f.exec(t, `CREATE INDEX ON {s}.named_pts USING gist (shape)`)
	f.exec(t, `GRANT SELECT ON {s}.named_polys, {s}.named_pts TO geotoll_reader`)
	layer := func(name, table string, kind tiles.Kind) tiles.Layer {
		return tiles.Layer{
			Name: name, Schema: f.schema, Table: table, GeometryColumn: "shape", IDColumn: "gid", GeometryKind: kind,
			Properties: names, OrderBy: order, Subdivide: tiles.Subdivide{MaxVertices: 64},
			StatementTimeout: 30 * time.Second,
		}
	}
	cat := catalog(t, layer(polys, "named_polys", tiles.KindPolygon), layer(pts, "named_pts", tiles.KindPoint))
	for _, b := range []struct {
		layer   string
		builder serving.Builder
	}{{polys, serving.Overview{}}, {polys, serving.Subdivide{}}, {pts, serving.Overview{}}} {
		if r := one(t, owner, cat.Layer(b.layer), serving.Options{Builders: []serving.Builder{b.builder}}); r.Status != serving.Built {
			t.Fatalf("prepare %s of %s: %+v", b.builder.Name(), b.layer, r)
		}
	}
	reader := testenv.ReadPool(t)
	if res, err := cat.Refresh(t.Context(), reader); err != nil || len(res.Warnings) > 0 {
		t.Fatalf("refresh: %+v, %v", res, err)
	}
	registryListsStoredColumns(t, reader, cat.Layer(polys), cat.Layer(pts))
	// What was built is what a run builds now: a second run builds nothing.
	for _, name := range []string{polys, pts} {
		if r := one(t, owner, cat.Layer(name), serving.Options{}); r.Status != serving.Unchanged || r.Err != nil {
			t.Errorf("second prepare of %s: %+v, want unchanged", name, r)
		}
	}
	// The same point layer, never refreshed: it reads no storage, and
	// clusters its table's rows in the query.
	table := catalog(t, layer(pts, "named_pts", tiles.KindPoint)).Layer(pts)
	store := tiles.NewStore(reader)
	render := func(what string, l *tiles.Layer, tile maptile.Tile) mvt.Layers {
		t.Helper()
		r, err := store.Render(t.Context(), []*tiles.Layer{l}, tile)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		decoded, err := mvt.Unmarshal(r.MVT)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return decoded
	}
	for _, tc := range []struct {
		layer    string
		z        maptile.Zoom
		builder  string // what the tile reads: "" the table
		features int    // at least
	}{
		{polys, 5, tiles.BuilderOverview, 4}, {polys, 10, tiles.BuilderSubdivide, 4}, {polys, 12, tiles.BuilderSubdivide, 1},
		{pts, 5, tiles.BuilderOverview, 1}, {pts, 12, tiles.BuilderOverview, 1}, {pts, 14, "", 4},
	} {
		l := cat.Layer(tc.layer)
		tile := maptile.At(c, tc.z)
		if tc.layer == pts {
			tile = maptile.At(pc, tc.z)
		}
		what := fmt.Sprintf("%s %v (%s)", l.Table, tile, l.Source(tc.z).Relation.Sanitize())
		if got := l.Source(tc.z).Builder; got != tc.builder {
			t.Fatalf("%s: reads builder %q, want %q", what, got, tc.builder)
		}
		decoded := render(what, l, tile)
		n, points := 0, 0.0
		for _, ml := range decoded {
			for _, feat := range ml.Features {
				n++
				i, _ := feat.ID.(float64) // as orb decodes it
				want := map[string]any{"prio": i, "cx": 10 + i, "cy": 20 + i, "g": fmt.Sprint("g", i), "q": fmt.Sprint("q", i),
					"name": fmt.Sprint("n", i), "id": fmt.Sprint("id", i), "level": 30 + i, "mvt": fmt.Sprint("m", i),
					"shift": 40 + i, "cell": fmt.Sprint("c", i), "tolerance": 50 + i, "geom": 60 + i}
				got := maps.Clone(map[string]any(feat.Properties))
				if tc.layer == pts {
					count, _ := got["point_count"].(float64)
					points += count
					delete(got, "point_count")
				}
				if !maps.Equal(got, want) {
					t.Errorf("%s: feature %v carries %v, want %v", what, feat.ID, feat.Properties, want)
				}
			}
		}
		if n < tc.features || (tc.layer == pts && points != 4) {
			t.Errorf("%s: %d features (%v points), want at least %d", what, n, points, tc.features)
		}
		if tc.layer == pts && tc.builder == tiles.BuilderOverview {
			from := table.Source(tc.z)
			if from.Builder != "" || !from.Clustered {
				t.Fatalf("%s: the table's layer reads %q (clustered %v), want its table, clustered", what, from.Builder, from.Clustered)
			}
			if got, want := features(decoded), features(render(what+" from the table", table, tile)); !slices.Equal(got, want) {
				t.Errorf("%s: features %q, clustered from the table %q", what, got, want)
			}
		}
	}
}

// features lists a decoded tile's features, each its id and properties
// (point_count among them) in one string, sorted.
func features(ls mvt.Layers) []string {
	var out []string
	for _, l := range ls {
		for _, f := range l.Features {
			keys := slices.Sorted(maps.Keys(f.Properties))
			s := fmt.Sprint(f.ID)
			for _, k := range keys {
				s += fmt.Sprintf(" %s=%v", k, f.Properties[k])
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// registryListsStoredColumns checks the registry rows of layers'
// overviews: columns lists the names the overview holds the layer's
// columns under (c0, c1…) and params.source_columns the layer's columns
// they hold, in the same order; the pieces list the layer's columns, held
// by their own names.
//
// A server that predates params.source_columns ignores that field (it
// decodes params without refusing unknown fields) and reads a layer's
// columns by their own names from storage only when the row's columns
// include every one of them; otherwise it warns that the storage "lacks
// column" and reads the layer's table at that zoom. The overviews must
// therefore not list a column of the layer under its own name in
// columns, unless it is the name the overview holds it under: a server
// reading such a row would ask the overview for a column it does not
// have, and every tile of the zoom would fail.
func registryListsStoredColumns(t *testing.T, q tiles.Querier, layers ...*tiles.Layer) {
	t.Helper()
	rows, err := tiles.LoadStorage(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		overviews := 0
		for _, r := range rows {
			if r.Layer != l.Name {
				continue
			}
			if r.Builder == tiles.BuilderSubdivide {
				if !slices.Equal(r.Columns, l.Columns()) || r.Params.SourceColumns != nil {
					t.Errorf("%s: columns %q, source columns %q, want %q and none", r.Relation, r.Columns, r.Params.SourceColumns, l.Columns())
				}
				continue
			}
			overviews++
			if !slices.Equal(r.Columns, l.CarriedColumns()) || !slices.Equal(r.Params.SourceColumns, l.Columns()) {
				t.Errorf("%s: columns %q, source columns %q, want %q and %q",
					r.Relation, r.Columns, r.Params.SourceColumns, l.CarriedColumns(), l.Columns())
			}
			// The check of a server that predates source_columns: some
			// column of the layer is missing from columns, so it skips
			// the overview and reads the table.
			if !slices.ContainsFunc(l.Columns(), func(c string) bool { return !slices.Contains(r.Columns, c) }) {
				t.Errorf("%s: columns %q include every column of the layer, %q: a server that predates source_columns would read the overview by them",
					r.Relation, r.Columns, l.Columns())
			}
			for i, c := range l.Columns() {
				if c != r.Columns[i] && slices.Contains(r.Columns, c) {
					t.Errorf("%s: columns %q list the layer's column %q, which the overview holds as %q", r.Relation, r.Columns, c, r.Columns[i])
				}
			}
		}
		if overviews == 0 {
			t.Errorf("layer %s: no overview in the registry", l.Name)
		}
	}
}
