package tiles_test

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// queryNames are columns named as the tile queries name values of their
// own (the cell indices cx, cy and geometry g of points, the priority prio
// of lines and polygons, the row q ST_AsMVT encodes, the levels and
// shifts of the byte budget), with "id" beside an id column of another
// name; namedRowsColumns creates them.
var queryNames = []string{"cx", "cy", "g", "prio", "q", "name", "id", "level", "mvt", "shift", "cell", "tolerance"}

// namedRowsColumns are the columns of queryNames, and gid, the id.
const namedRowsColumns = `gid bigint PRIMARY KEY, cx int, cy int, g text, prio int, q text, name text, id text,
	level int, mvt text, shift int, cell text, tolerance int`

// namedRowsValues is row i's values of namedRowsColumns, over a column i.
const namedRowsValues = `i, 10 + i, 20 + i, 'g' || i, i, 'q' || i, 'n' || i, 'id' || i, 30 + i, 'm' || i, 40 + i, 'c' || i, 50 + i`

// namedRowProperties is what a feature of row id carries: every property
// of queryNames by its own name, as namedRowsValues wrote it (numbers
// decode as float64).
func namedRowProperties(i float64) map[string]any {
	id := int(i)
	return map[string]any{
		"cx": 10 + i, "cy": 20 + i, "g": fmt.Sprint("g", id), "prio": i, "q": fmt.Sprint("q", id),
		"name": fmt.Sprint("n", id), "id": fmt.Sprint("id", id), "level": 30 + i, "mvt": fmt.Sprint("m", id),
		"shift": 40 + i, "cell": fmt.Sprint("c", id), "tolerance": 50 + i,
	}
}

// checkNamedFeatures checks that every feature of the decoded tile carries
// the properties of its row (namedRowProperties) under their own names,
// and point_count when points; it returns the point_counts' sum and the
// features.
func checkNamedFeatures(t *testing.T, what string, ls mvt.Layers, points bool) (sum float64, features int) {
	t.Helper()
	for _, l := range ls {
		for _, f := range l.Features {
			features++
			id, ok := f.ID.(float64) // as orb decodes it
			if f.ID == nil {
				id, ok = f.Properties["prio"].(float64) // a layer without ids: prio is the row's gid
			}
			if !ok || id < 1 || id > 4 || id != math.Trunc(id) {
				t.Errorf("%s: feature id %v (%T), want a row's gid 1..4", what, f.ID, f.ID)
				continue
			}
			want := namedRowProperties(id)
			got := maps.Clone(map[string]any(f.Properties))
			if points {
				n, _ := got["point_count"].(float64)
				if n < 1 {
					t.Errorf("%s: feature %v has point_count %v", what, id, got["point_count"])
				}
				sum += n
				delete(got, "point_count")
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: feature %v carries %v, want %v", what, id, f.Properties, want)
			}
		}
	}
	return sum, features
}

// A layer's properties (and order_by) may be named as the tile queries
// name columns of their own: every tile of a point layer, clustered or
// not, and of a polygon layer renders, and each feature carries each
// property under its own name.
func TestPropertiesNamedAsTheQueriesColumns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Four rows 100 m apart around the centre of a z14 tile (within one
	// z5 cluster cell, unless a cell's edge runs between them).
	centre := maptile.New(8508, 5755, 14)
	f.exec(t, `CREATE TABLE {s}.pts (`+namedRowsColumns+`, geom geometry(Point, 3857) NOT NULL)`)
	f.exec(t, `CREATE TABLE {s}.polys (`+namedRowsColumns+`, geom geometry(Polygon, 3857) NOT NULL)`)
	c := centre.Center()
	f.exec(t, `INSERT INTO {s}.pts SELECT `+namedRowsValues+`,
		ST_Translate(ST_Transform(ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326), 3857), 100 * i, 100 * (i % 2))
		FROM generate_series(1, 4) AS i`, c[0], c[1])
	f.exec(t, `INSERT INTO {s}.polys SELECT `+namedRowsValues+`,
		ST_Expand(ST_Translate(ST_Transform(ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326), 3857), 200 * i - 500, 0), 40)
		FROM generate_series(1, 4) AS i`, c[0], c[1])
	f.exec(t, `CREATE INDEX ON {s}.pts USING gist (geom)`)
	f.exec(t, `CREATE INDEX ON {s}.polys USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.pts, {s}.polys TO geotoll_reader`)
	layer := func(name, table string, kind tiles.Kind) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table(table), GeometryColumn: "geom", IDColumn: "gid",
			GeometryKind: kind, Properties: queryNames, OrderBy: []string{"prio desc"}}
	}
	// Without ids nor order_by, points are ordered by their cells and
	// polygons by their geometry.
	noID := func(l tiles.Layer) tiles.Layer {
		l.Name, l.IDColumn, l.WithoutID, l.OrderBy = l.Name+"_noid", "", true, nil
		return l
	}
	cat := newCatalog(t, layer("pts", "pts", tiles.KindPoint), layer("polys", "polys", tiles.KindPolygon),
		noID(layer("pts", "pts", tiles.KindPoint)), noID(layer("polys", "polys", tiles.KindPolygon)))
	store := tiles.NewStore(testenv.ReadPool(t))
	for _, tc := range []struct {
		layer     string
		z         maptile.Zoom
		clustered bool
	}{
		// (At z5 the squares, 80 m wide, are under a unit of the tile:
		// only overviews draw them there.)
		{"pts", 5, true}, {"pts", 14, false}, {"polys", 10, false}, {"polys", 14, false},
		{"pts_noid", 5, true}, {"pts_noid", 14, false}, {"polys_noid", 10, false},
	} {
		points := strings.HasPrefix(tc.layer, "pts")
		tile := maptile.At(c, tc.z)
		what := fmt.Sprintf("%s %v", tc.layer, tile)
		if src := cat.Layer(tc.layer).Source(tc.z); src.Clustered != tc.clustered {
			t.Fatalf("%s: clustered %v, not the case under test", what, src.Clustered)
		}
		_, decoded := renderTile(t, store, resolve(t, cat, tc.layer), tile)
		sum, n := checkNamedFeatures(t, what, decoded, points)
		// One cell holds the four: it is drawn as its first point in
		// order_by (prio desc), gid 4.
		if ids := featureIDs(decoded); tc.layer == "pts" && tc.clustered && n == 1 && ids[0] != "4" {
			t.Errorf("%s: the cluster is drawn as gid %s, want 4, the first in order_by", what, ids[0])
		}
		switch {
		case points && sum != 4:
			t.Errorf("%s: point_counts sum to %v over %d features, want the 4 rows", what, sum, n)
		case (!points || !tc.clustered) && n != 4:
			t.Errorf("%s: %d features, want the 4 rows", what, n)
		}
	}
}

// A property may have any name but point_count, which every point
// feature carries (a layer's kind may be known only once it is served,
// so it is refused on every kind), and the layer's geometry column; geom,
// the name of the geometry in the row ST_AsMVT encodes and in the
// overviews, is not taken.
func TestPropertyNamesRefused(t *testing.T) {
	t.Parallel()
	for _, kind := range []tiles.Kind{tiles.KindPoint, tiles.KindPolygon, ""} {
		_, err := tiles.NewCatalog([]tiles.Layer{{Name: "l", Table: "s.t", GeometryColumn: "the_geom", GeometryKind: kind,
			Properties: []string{"name", "point_count"}}})
		if err == nil || !strings.Contains(err.Error(), `property "point_count"`) {
			t.Errorf("kind %q: NewCatalog: %v, want property point_count refused", kind, err)
		}
		newCatalog(t, tiles.Layer{Name: "l", Table: "s.t", GeometryColumn: "the_geom", GeometryKind: kind,
			Properties: append([]string{"geom"}, queryNames...)})
		// The geometry column is the feature's geometry, never one of its
		// properties (prepare's pieces would carry it twice).
		_, err = tiles.NewCatalog([]tiles.Layer{{Name: "l", Table: "s.t", GeometryColumn: "the_geom", GeometryKind: kind,
			Properties: []string{"name", "the_geom"}}})
		if err == nil || !strings.Contains(err.Error(), `property "the_geom" is the geometry_column`) {
			t.Errorf("kind %q: NewCatalog: %v, want the geometry column refused as a property", kind, err)
		}
	}
}
