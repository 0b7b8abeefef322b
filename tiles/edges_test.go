package tiles_test

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/encoding/wkt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// renderTile runs Store.Render and decodes its tile.
func renderTile(t *testing.T, s *tiles.Store, layers []*tiles.Layer, tile maptile.Tile) (tiles.Rendered, mvt.Layers) {
	t.Helper()
	r, err := s.Render(t.Context(), layers, tile)
	if err != nil {
		t.Fatalf("Render(%v, %v): %v", layerNames(layers), tile, err)
	}
	decoded, err := mvt.Unmarshal(r.MVT)
	if err != nil {
		t.Fatalf("Render(%v, %v): %d bytes do not decode as MVT: %v", layerNames(layers), tile, len(r.MVT), err)
	}
	return r, decoded
}

// featureIDs returns the ids of a decoded tile's features, in order.
func featureIDs(ls mvt.Layers) []string {
	var out []string
	for _, l := range ls {
		for _, f := range l.Features {
			out = append(out, fmt.Sprint(f.ID))
		}
	}
	return out
}

// With cells wider than the buffer (cluster_px 16: 32 cells of 128 units
// per tile, the default buffer of 64 units rounded up to one cell), a
// tile keeps the clusters of the cells of its buffer as it counts them:
// the point_counts of its features sum to the rows of its cells (its own
// and one cell around), at level 0 and when the byte budget merges the
// cells, exactly.
func TestStorePointCountsSumToTheRowsOfTheirCells(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	env := tiles.Envelope(tile)
	width := env.Max[0] - env.Min[0]
	const cellsPerTile = 32 // 512 px / cluster_px 16
	cell := width / cellsPerTile
	// Three points a cell (at its thirds, never on its edges) over the
	// tile and three cells around it.
	f.exec(t, `CREATE TABLE {s}.pts (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.pts
		SELECT row_number() OVER (), ST_SetSRID(ST_MakePoint($1::float8 + (i + 0.5) * $3::float8 / 3, $2::float8 + (j + 0.5) * $3::float8 / 3), 3857)
		FROM generate_series(0, $4::int - 1) AS i, generate_series(0, $4::int - 1) AS j`,
		env.Min[0]-3*cell, env.Min[1]-3*cell, cell, 3*(cellsPerTile+6))
	f.exec(t, `CREATE INDEX ON {s}.pts USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.pts TO geotoll_reader`)
	layer := func(name string, maxBytes int) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table("pts"), GeometryColumn: "geom", SRID: 3857,
			GeometryKind: tiles.KindPoint, Generalize: tiles.Generalize{ClusterPixels: 16}, MaxTileBytes: maxBytes}
	}
	cat := newCatalog(t, layer("pts16", 0), layer("pts16_reduced", 1024))
	l := cat.Layer("pts16")
	g := l.Source(tile.Z).Generalization
	if !g.On || g.CellsPerTile != cellsPerTile || l.Buffer*cellsPerTile > l.Extent {
		t.Fatalf("generalisation %+v, buffer %d of %d: not the case under test", g, l.Buffer, l.Extent)
	}
	x0, x1, y0, y1 := g.CellRange(tile, l.Extent, l.Buffer)
	var inCells, inBuffer int
	err := testenv.Pool(t).QueryRow(t.Context(), `
		SELECT count(*) FILTER (WHERE floor((ST_X(geom) + $1) / $2) BETWEEN $3 AND $4 AND floor((ST_Y(geom) + $1) / $2) BETWEEN $5 AND $6),
		       count(*) FILTER (WHERE geom && ST_Expand(ST_MakeEnvelope($7, $8, $9, $10, 3857), $11::float8))
		FROM `+f.table("pts"),
		math.Pi*6378137, g.CellMetres, x0, x1, y0, y1,
		env.Min[0], env.Min[1], env.Max[0], env.Max[1], width*float64(l.Buffer)/float64(l.Extent)).Scan(&inCells, &inBuffer)
	if err != nil {
		t.Fatal(err)
	}
	if inCells <= inBuffer {
		t.Fatalf("%d rows in the tile's cells, %d within its buffer: the fixture does not test the cells beyond the buffer", inCells, inBuffer)
	}
	store := tiles.NewStore(testenv.ReadPool(t))
	for _, name := range []string{"pts16", "pts16_reduced"} {
		r, decoded := renderTile(t, store, resolve(t, cat, name), tile)
		sum := 0.0
		for _, ml := range decoded {
			for _, feat := range ml.Features {
				n, _ := feat.Properties["point_count"].(float64)
				sum += n
			}
		}
		if reduced := len(r.Reduced) > 0; reduced != (name == "pts16_reduced") {
			t.Errorf("%s: reductions %v", name, r.Reduced)
		}
		if int(sum) != inCells {
			t.Errorf("%s %v (reductions %v): point_counts sum to %v, want the %d rows of its cells (%d lie within its buffer)",
				name, tile, r.Reduced, sum, inCells, inBuffer)
		}
	}
}

// A layer in a conic projection (EPSG:2154, Lambert-93) reads the rows
// along its tiles' edges: the tile's south edge, straight in EPSG:3857,
// is a parallel, an arc in Lambert-93 that sags some 5 km below the
// tile's corners at 3°E, the projection's central meridian. With the
// smallest buffer (one unit, 1.2 km at z3), the layer draws the same rows
// as the same strips stored in EPSG:3857. (Polygons: a point layer's
// buffer is widened to a whole cluster cell, 64 units here.)
func TestStoreTileConicLayerReadsRowsAlongItsEdges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.sq (id bigint PRIMARY KEY, geom geometry(Polygon, 2154) NOT NULL, geom_3857 geometry(Polygon, 3857) NOT NULL)`)
	// Tile 3/4/2 spans 0°..45°E, 40.9799°N..66.51°N. Across its width,
	// strips 0.8° wide from 40.9°N, south of the tile, up to 40.96°N
	// (short of its buffer: not drawn), 40.99°N and 41°N (1.1 and 2.2 km
	// into the tile: drawn).
	f.exec(t, `INSERT INTO {s}.sq
		SELECT row_number() OVER (), ST_Transform(p, 2154), ST_Transform(p, 3857)
		FROM generate_series(0, 44) AS lon,
		     unnest(ARRAY[40.96, 40.99, 41.0]::float8[]) AS top,
		     LATERAL (SELECT ST_MakeEnvelope(lon + 0.1, 40.9, lon + 0.9, top, 4326) AS p) AS g`)
	f.exec(t, `CREATE INDEX ON {s}.sq USING gist (geom)`)
	f.exec(t, `CREATE INDEX ON {s}.sq USING gist (geom_3857)`)
	f.exec(t, `GRANT SELECT ON {s}.sq TO geotoll_reader`)
	layer := func(name, geom string, srid int) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table("sq"), GeometryColumn: geom, SRID: srid, Buffer: 1,
			GeometryKind: tiles.KindPolygon}
	}
	cat := newCatalog(t, layer("merc", "geom_3857", 3857), layer("lambert", "geom", 2154))
	store := tiles.NewStore(testenv.ReadPool(t))
	tile := maptile.New(4, 2, 3)
	_, m := renderTile(t, store, resolve(t, cat, "merc"), tile)
	_, l := renderTile(t, store, resolve(t, cat, "lambert"), tile)
	want, got := featureIDs(m), featureIDs(l)
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 2*45 {
		t.Fatalf("the EPSG:3857 layer draws %d rows (%v): want the %d that reach into the tile", len(want), want, 2*45)
	}
	if !slices.Equal(got, want) {
		var missing []string
		for _, id := range want {
			if !slices.Contains(got, id) {
				missing = append(missing, id)
			}
		}
		t.Errorf("tile %v: the EPSG:2154 layer draws %d rows, the EPSG:3857 layer %d; missing %v", tile, len(got), len(want), missing)
	}
}

// A z1 tile of a layer in another projection draws the point inside it:
//   - in a transverse Mercator (UTM zone 33N), whose equator edge runs
//     through points 90° from the zone's meridian, which the projection
//     cannot take: the filter box comes from the tile's corners, which it
//     can, not from points along its sides;
//   - in a polar stereographic projection (EPSG:3995, meridian 0), where
//     the four corners of tile 1/0/0 lie on one line and their box has no
//     width: at z0–2 that box gets a margin of its whole side.
func TestStoreTileOtherProjectionsAtLowZoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		srid     int
		lon, lat float64
		tile     maptile.Tile
	}{
		{"utm", 32633, 15, 45, maptile.New(1, 0, 1)},
		{"polar", 3995, -90, 10, maptile.New(0, 0, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.exec(t, fmt.Sprintf(`CREATE TABLE {s}.pts (id bigint PRIMARY KEY, geom geometry(Point, %d) NOT NULL)`, tc.srid))
			f.exec(t, fmt.Sprintf(`INSERT INTO {s}.pts VALUES (1, ST_Transform(ST_SetSRID(ST_MakePoint(%g, %g), 4326), %d))`, tc.lon, tc.lat, tc.srid))
			f.exec(t, `GRANT SELECT ON {s}.pts TO geotoll_reader`)
			cat := newCatalog(t, tiles.Layer{Name: tc.name, Table: f.table("pts"), GeometryColumn: "geom", SRID: tc.srid,
				GeometryKind: tiles.KindPoint})
			_, got := renderTile(t, tiles.NewStore(testenv.ReadPool(t)), resolve(t, cat, tc.name), tc.tile)
			if ids := featureIDs(got); len(ids) != 1 {
				t.Fatalf("tile %v of a layer in EPSG:%d: features %v, want the one point at %g, %g", tc.tile, tc.srid, ids, tc.lon, tc.lat)
			}
		})
	}
}

// The feature cap and the byte budget's levels count the features a tile
// draws. The first row in order_by, a square ring around the tile, has a
// box that meets the tile but leaves nothing on it: it takes no place
// under the cap (the tile still draws cap features), and a tile reduced
// to its first feature draws the first one drawn, not nothing.
func TestStoreTileCapCountsTheFeaturesDrawn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	env := tiles.Envelope(tile)
	w := env.Max[0] - env.Min[0]
	cx, cy := env.Center()[0], env.Center()[1]
	f.exec(t, `CREATE TABLE {s}.areas (id bigint PRIMARY KEY, rank int NOT NULL, geom geometry(Polygon, 3857) NOT NULL)`)
	// 1: a ring whose hole holds the tile and its buffer; 2..4: discs of
	// thousands of vertices inside the tile (a few KB each once drawn).
	f.exec(t, `INSERT INTO {s}.areas VALUES
		(1, 1, ST_SetSRID(ST_Difference(ST_Expand(ST_MakePoint($1, $2), $3::float8), ST_Expand(ST_MakePoint($1, $2), $3::float8 * 0.75)), 3857)),
		(2, 2, ST_SetSRID(ST_Buffer(ST_MakePoint($1::float8 - $3::float8 / 4, $2), $3::float8 / 8, 1000), 3857)),
		(3, 3, ST_SetSRID(ST_Buffer(ST_MakePoint($1::float8 + $3::float8 / 4, $2), $3::float8 / 8, 1000), 3857)),
		(4, 4, ST_SetSRID(ST_Buffer(ST_MakePoint($1, $2::float8 + $3::float8 / 4), $3::float8 / 8, 1000), 3857))`,
		cx, cy, w)
	f.exec(t, `CREATE INDEX ON {s}.areas USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.areas TO geotoll_reader`)
	layer := func(name string, maxBytes int) tiles.Layer {
		return tiles.Layer{Name: name, Table: f.table("areas"), GeometryColumn: "geom", SRID: 3857,
			GeometryKind: tiles.KindPolygon, OrderBy: []string{"rank"}, MaxFeatures: 2, MaxTileBytes: maxBytes}
	}
	cat := newCatalog(t, layer("areas", 0), layer("areas_reduced", 1024))
	store := tiles.NewStore(testenv.ReadPool(t))

	r, decoded := renderTile(t, store, resolve(t, cat, "areas"), tile)
	if got := featureIDs(decoded); len(r.Reduced) != 0 || !slices.Equal(got, []string{"2", "3"}) {
		t.Errorf("capped at 2: ids %v (reductions %v), want [2 3]: the ring, first in order_by, leaves nothing on the tile", got, r.Reduced)
	}
	r, decoded = renderTile(t, store, resolve(t, cat, "areas_reduced"), tile)
	if len(r.Reduced) != 1 || r.Reduced[0].Level < 1 {
		t.Fatalf("reductions %v: the budget of 1024 bytes does not reduce the tile", r.Reduced)
	}
	if got := featureIDs(decoded); !slices.Equal(got, []string{"2"}) {
		t.Errorf("reduced to level %d: ids %v, want [2], the first feature drawn", r.Reduced[0].Level, got)
	}
}

// From the second level on, each level halves the features a tile
// draws, not the cap alone: 196 squares (which no simplification makes
// smaller) under a cap of 100,000 were drawn at every level (the cap
// halved eight times is 390), over the budget, while the tile said it
// was reduced. The tile now fits, with the first squares in order_by.
func TestStoreTileReductionHalvesTheFeaturesDrawn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	env := tiles.Envelope(tile)
	step := (env.Max[0] - env.Min[0]) / 16
	f.exec(t, `CREATE TABLE {s}.squares (id bigint PRIMARY KEY, name text NOT NULL, geom geometry(Polygon, 3857) NOT NULL)`)
	f.exec(t, `INSERT INTO {s}.squares
		SELECT i, 'square number ' || i, ST_SetSRID(ST_MakeEnvelope($1::float8 + (i % 14 + 1) * $3::float8, $2::float8 + (i / 14 + 1) * $3::float8,
		                                                        $1::float8 + (i % 14 + 1.5) * $3::float8, $2::float8 + (i / 14 + 1.5) * $3::float8), 3857)
		FROM generate_series(0, 195) AS i`, env.Min[0], env.Min[1], step)
	f.exec(t, `CREATE INDEX ON {s}.squares USING gist (geom)`)
	f.exec(t, `GRANT SELECT ON {s}.squares TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "squares", Table: f.table("squares"), GeometryColumn: "geom", SRID: 3857,
		GeometryKind: tiles.KindPolygon, Properties: []string{"name"}, MaxFeatures: 100000, MaxTileBytes: 1024})
	r, decoded := renderTile(t, tiles.NewStore(testenv.ReadPool(t)), resolve(t, cat, "squares"), tile)
	if len(r.Reduced) != 1 || len(r.MVT) > 1024 {
		t.Fatalf("reductions %v, %d bytes: want the tile reduced to the budget of 1024 bytes", r.Reduced, len(r.MVT))
	}
	got := featureIDs(decoded)
	if len(got) == 0 || len(got) >= 196 {
		t.Fatalf("reduced to level %d: %d of 196 squares drawn", r.Reduced[0].Level, len(got))
	}
	for i, id := range got {
		if id != strconv.Itoa(i) {
			t.Errorf("reduced to level %d: ids %v, want the first squares in order", r.Reduced[0].Level, got)
			break
		}
	}
}

// A numeric beyond float8's range, or nearer 0 than half its least value,
// failed its cast, and with it the whole tile: such a value is written as
// ±Infinity or 0, NaN as NaN; every value that rounds to a float8 as that.
func TestStoreTileNumericBeyondFloat8IsWritten(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(8802, 5373, 14)
	centre := tiles.Envelope(tile).Center()
	cx, cy := centre[0], centre[1]
	f.exec(t, `CREATE TABLE {s}.big (id bigint PRIMARY KEY, v numeric, geom geometry(Point, 3857) NOT NULL)`)
	values := map[string]float64{"1e400": math.Inf(1), "-1e400": math.Inf(-1), "1e-400": 0, "-1e-400": 0,
		"5e-324": 5e-324, "2.48e-324": 5e-324, "2.47e-324": 0, "1.79769313486231570815e308": math.MaxFloat64,
		"1.7976931348623159e308": math.Inf(1), "1.7976931348623157e308": math.MaxFloat64, "2.5": 2.5, "NaN": math.NaN()}
	var ids []string
	for text := range values {
		ids = append(ids, text)
	}
	slices.Sort(ids)
	for i, text := range ids {
		f.exec(t, `INSERT INTO {s}.big VALUES ($1, $2::numeric, ST_SetSRID(ST_MakePoint($3, $4), 3857))`,
			i+1, text, cx+float64(i), cy)
	}
	f.exec(t, `GRANT SELECT ON {s}.big TO geotoll_reader`)
	cat := newCatalog(t, tiles.Layer{Name: "big", Table: f.table("big"), GeometryColumn: "geom", SRID: 3857,
		GeometryKind: tiles.KindPoint, Properties: []string{"v"}})
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	_, decoded := renderTile(t, tiles.NewStore(reader), resolve(t, cat, "big"), tile)
	if len(decoded) != 1 || len(decoded[0].Features) != len(ids) {
		t.Fatalf("%d layers, want one of %d features", len(decoded), len(ids))
	}
	for _, feat := range decoded[0].Features {
		id, err := strconv.Atoi(fmt.Sprint(feat.ID))
		if err != nil || id < 1 || id > len(ids) {
			t.Fatalf("feature id %v", feat.ID)
		}
		text := ids[id-1]
		got, ok := feat.Properties["v"].(float64)
		want := values[text]
		if !ok || got != want && !(math.IsNaN(want) && math.IsNaN(got)) {
			t.Errorf("numeric %s written as %#v (%T), want %v", text, feat.Properties["v"], feat.Properties["v"], want)
		}
	}
}

// ST_AsMVT writes a numeric as text: a map read "1000" where TileJSON
// says Number, and a style comparing it with a number failed. The tile
// queries cast numeric properties (a domain over numeric too) to float8,
// for points and polygons alike; other types are written as they were.
func TestStoreTileNumericPropertiesAreNumbers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(8802, 5373, 14)
	centre := tiles.Envelope(tile).Center()
	cx, cy := centre[0], centre[1]
	f.exec(t, `CREATE DOMAIN {s}.hectares AS numeric(12, 1)`)
	for _, kind := range []string{"Point", "Polygon"} {
		f.exec(t, `CREATE TABLE {s}.`+kind+` (id bigint PRIMARY KEY, pop numeric, area numeric(10, 2), ha {s}.hectares,
			n int, name text, geom geometry(`+kind+`, 3857) NOT NULL)`)
		geom := `ST_SetSRID(ST_MakePoint($1, $2), 3857)`
		if kind == "Polygon" {
			geom = `ST_SetSRID(ST_Expand(ST_MakePoint($1, $2), 10), 3857)`
		}
		f.exec(t, `INSERT INTO {s}.`+kind+` VALUES (1, 1000, 2.5, 12.5, 7, 'x', `+geom+`)`, cx, cy)
		f.exec(t, `GRANT SELECT ON {s}.`+kind+` TO geotoll_reader`)
	}
	layer := func(kind string, k tiles.Kind) tiles.Layer {
		return tiles.Layer{Name: kind, Table: f.table(strings.ToLower(kind)), GeometryColumn: "geom", SRID: 3857, GeometryKind: k,
			Properties: []string{"pop", "area", "ha", "n", "name"}}
	}
	cat := newCatalog(t, layer("Point", tiles.KindPoint), layer("Polygon", tiles.KindPolygon))
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)
	for _, name := range []string{"Point", "Polygon"} {
		_, decoded := renderTile(t, store, resolve(t, cat, name), tile)
		if len(decoded) != 1 || len(decoded[0].Features) != 1 {
			t.Fatalf("%s: %d layers, want one feature", name, len(decoded))
		}
		props := decoded[0].Features[0].Properties
		for key, want := range map[string]any{"pop": 1000.0, "area": 2.5, "ha": 12.5, "name": "x"} {
			if got := props[key]; got != want {
				t.Errorf("%s: %s = %#v (%T), want %#v", name, key, got, got, want)
			}
		}
		if n, ok := props["n"].(float64); !ok || n != 7 {
			t.Errorf("%s: n = %#v (%T), want the number 7", name, props["n"], props["n"])
		}
	}

	// A table that did not exist at a refresh is read at the next one.
	late := newCatalog(t, tiles.Layer{Name: "late", Table: f.table("late"), GeometryColumn: "geom", SRID: 3857,
		GeometryKind: tiles.KindPoint, Properties: []string{"pop"}})
	_, _ = late.Refresh(t.Context(), reader) // the table is missing: warnings
	f.exec(t, `CREATE TABLE {s}.late AS SELECT id, pop, geom FROM {s}.point`)
	f.exec(t, `GRANT SELECT ON {s}.late TO geotoll_reader`)
	if _, err := late.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	_, decoded := renderTile(t, store, resolve(t, late, "late"), tile)
	if len(decoded) != 1 || len(decoded[0].Features) != 1 || decoded[0].Features[0].Properties["pop"] != 1000.0 {
		t.Errorf("a table created after a refresh: %+v, want pop the number 1000", decoded)
	}
}

// tileUnitsTable creates table name (id bigint, geom of type kind in
// EPSG:3857) in f's schema, readable by the read role, from rows (a query
// of id and g): each g in the units of tile (0..4096 each way, y up),
// placed on the tile. It returns a layer of it reduced to the byte budget
// budget (0: the default), level 1 simplifying at 8 px.
func tileUnitsTable(t *testing.T, f *fixture, tile maptile.Tile, name, kind, rows string) func(layer string, budget int) tiles.Layer {
	t.Helper()
	env := tiles.Envelope(tile)
	w, h := env.Max[0]-env.Min[0], env.Max[1]-env.Min[1]
	f.exec(t, fmt.Sprintf(`CREATE TABLE {s}.%s (id bigint PRIMARY KEY, geom geometry(%s, 3857) NOT NULL)`, name, kind))
	f.exec(t, fmt.Sprintf(`INSERT INTO {s}.%s
		SELECT id, ST_SetSRID(ST_Affine(g, $3::float8 / 4096, 0, 0, $4::float8 / 4096, $1::float8, $2::float8), 3857)
		FROM (%s) AS v (id, g)`, name, rows), env.Min[0], env.Min[1], w, h)
	f.exec(t, fmt.Sprintf(`GRANT SELECT ON {s}.%s TO geotoll_reader`, name))
	k := tiles.KindPolygon
	if strings.Contains(kind, "LineString") {
		k = tiles.KindLine
	}
	return func(layer string, budget int) tiles.Layer {
		return tiles.Layer{Name: layer, Table: f.table(name), GeometryColumn: "geom", SRID: 3857,
			GeometryKind: k, MaxTileBytes: budget, Generalize: tiles.Generalize{TolerancePixels: 8}}
	}
}

// A polygon reduced to its tile's byte budget stays a valid polygon, its
// rings wound as MVT says, drawn where level 0 drew it: the simplifier
// of the reduction levels left a hole outside its shell (a disc with
// holes near its rim, simplified at 128 units of the tile), which a map
// draws as a stray patch — and so did ST_AsMVTGeom drawing that result
// again, as a part of its own. The tiles are decoded as a map reads them
// and checked by PostGIS.
func TestStoreTileReducedPolygonsStayValid(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	// 1, a disc of about 1,500 less twelve small discs, some of them near
	// its rim; 2, a disc of 800 vertices in a corner (over the budget until
	// simplified). Level 1 simplifies at 64 units of the tile, twice that
	// at a generalised zoom.
	layer := tileUnitsTable(t, f, tile, "holed", "Polygon", `VALUES (1, ST_Difference(
		    ST_Buffer(ST_MakePoint(2048, 2048), 1500 + 300 * sin(142), 3 + 142 % 7),
		    ST_Union(ARRAY(SELECT ST_Buffer(ST_MakePoint(2048 + 1400 * cos(142 * k), 2048 + 1400 * sin(142 * k * 1.3)), 40 + (k * 142 % 90), 2)
		                   FROM generate_series(1, 12) AS k)))),
		(2, ST_Buffer(ST_MakePoint(250, 3800), 150, 200))`)
	cat := newCatalog(t, layer("holed", 0), layer("holed_reduced", 1024))
	store, reader := tiles.NewStore(testenv.ReadPool(t)), testenv.ReadPool(t)
	var level0 string // the disc as level 0 draws it
	for _, name := range []string{"holed", "holed_reduced"} {
		r, decoded := renderTile(t, store, resolve(t, cat, name), tile)
		if reduced := len(r.Reduced) > 0; reduced != (name == "holed_reduced") {
			t.Fatalf("%s: reductions %v", name, r.Reduced)
		}
		if ids := featureIDs(decoded); !slices.Equal(ids, []string{"1", "2"}) {
			t.Fatalf("%s: features %v, want the two discs", name, ids)
		}
		disc := wkt.MarshalString(decoded[0].Features[0].Geometry)
		if level0 == "" {
			level0 = disc
		}
		var reason string
		var stray int // the disc's parts mostly where level 0 drew nothing
		if err := reader.QueryRow(t.Context(), `SELECT ST_IsValidReason(g),
			(SELECT count(*) FROM ST_Dump(ST_MakeValid(g)) AS p WHERE ST_Area(ST_Intersection(p.geom, ST_GeomFromText($2))) < ST_Area(p.geom) / 2)
			FROM (SELECT ST_GeomFromText($1) AS g) AS d`, disc, level0).Scan(&reason, &stray); err != nil {
			t.Fatal(err)
		}
		if reason != "Valid Geometry" || stray > 0 {
			t.Errorf("%s (reductions %v): the disc is %s, with %d parts where level 0 drew nothing", name, r.Reduced, reason, stray)
		}
	}
}

// A feature level 0 draws is drawn at every reduction level that keeps
// it: a polygon of a few units, first in order_by, vanished when drawn
// again after its simplification, and the tile of the level that kept it
// alone was empty.
func TestStoreTileReducedKeepsTheFeaturesItDraws(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	// 1, a pentagon of 3 units; 2, 500 boxes (over the budget at level 1).
	layer := tileUnitsTable(t, f, tile, "small", "MultiPolygon", `VALUES
		(1, ST_Multi('POLYGON((1002.7 1000,1001.2 1003.2,1001.7 1003.3,1003.6 1001.2,1003.5 1000.1,1002.7 1000))'::geometry)),
		(2, ST_Collect(ARRAY(SELECT ST_MakeEnvelope(100 + 150 * (k % 25), 1200 + 110 * (k / 25), 200 + 150 * (k % 25), 1260 + 110 * (k / 25))
		                     FROM generate_series(0, 499) AS k)))`)
	cat := newCatalog(t, layer("small", 0), layer("small_reduced", 1024))
	store := tiles.NewStore(testenv.ReadPool(t))
	if _, decoded := renderTile(t, store, resolve(t, cat, "small"), tile); !slices.Equal(featureIDs(decoded), []string{"1", "2"}) {
		t.Fatalf("level 0 draws %v, want both features", featureIDs(decoded))
	}
	r, decoded := renderTile(t, store, resolve(t, cat, "small_reduced"), tile)
	if len(r.Reduced) != 1 || r.Reduced[0].Level < 2 || !slices.Equal(featureIDs(decoded), []string{"1"}) {
		t.Errorf("reduced (%v, %d bytes): features %v, want the first one, 1, at level 2 or more", r.Reduced, len(r.MVT), featureIDs(decoded))
	}
}

// A tile no level fits is served at its smallest level, not its last: a
// feature whose simplification is not valid at the last levels is drawn
// there as at level 0, and the last level (8) was the whole unreduced
// tile (12,986 bytes) where levels 1..3 drew 7.1 KB. The disc: 3,000
// vertices, 625 small square holes and a few near its rim.
func TestStoreTileNoLevelFitsServesTheSmallest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	layer := tileUnitsTable(t, f, tile, "holey", "MultiPolygon", `SELECT 1, ST_Multi(ST_Difference(
		    ST_MakePolygon(ST_AddPoint(ST_MakeLine(ARRAY(
		        SELECT ST_MakePoint(2048 + (1500 + 6 * sin(k * 1.7)) * cos(2 * pi() * k / 3000), 2048 + (1500 + 6 * sin(k * 1.7)) * sin(2 * pi() * k / 3000))
		        FROM generate_series(0, 2999) AS k)), ST_MakePoint(2048 + 1500, 2048))),
		    ST_Union(ARRAY(
		        SELECT ST_Buffer(ST_MakePoint(2048 + 1400 * cos(142 * k), 2048 + 1400 * sin(142 * k * 1.3)), 40 + (k * 142 % 90), 2) FROM generate_series(1, 12) AS k
		        UNION ALL
		        SELECT ST_MakeEnvelope(1200 + 60 * (k % 25), 1200 + 60 * (k / 25), 1220 + 60 * (k % 25), 1220 + 60 * (k / 25)) FROM generate_series(0, 624) AS k))))`)
	cat := newCatalog(t, layer("holey", 0), layer("holey_reduced", 5000))
	store := tiles.NewStore(testenv.ReadPool(t))
	full, _ := renderTile(t, store, resolve(t, cat, "holey"), tile)
	r, decoded := renderTile(t, store, resolve(t, cat, "holey_reduced"), tile)
	if len(r.Reduced) != 1 || len(r.MVT) >= len(full.MVT) || !slices.Equal(featureIDs(decoded), []string{"1"}) {
		t.Errorf("reduced %v: %d bytes (features %v), the unreduced tile %d: want a smaller level served", r.Reduced, len(r.MVT), featureIDs(decoded), len(full.MVT))
	}
}

// A tile over its budget that no level shrinks (one feature of 4,000
// two-point segments) is served at its last level, and says so: the
// smallest level chosen among equals was level 0, which named no
// reduction.
func TestStoreTileNoLevelShrinksSaysReduced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tile := maptile.New(548, 335, 10)
	layer := tileUnitsTable(t, f, tile, "segs", "MultiLineString", `SELECT 1, ST_Collect(ARRAY(
		    SELECT ST_MakeLine(ST_MakePoint(100 + 37 * (k % 100), 100 + 97 * (k / 100)), ST_MakePoint(100 + 37 * (k % 100) + 13, 100 + 97 * (k / 100) + 50))
		    FROM generate_series(0, 3999) AS k))`)
	cat := newCatalog(t, layer("segs", 1024))
	r, _ := renderTile(t, tiles.NewStore(testenv.ReadPool(t)), resolve(t, cat, "segs"), tile)
	if len(r.MVT) <= 1024 || len(r.Reduced) != 1 || r.Reduced[0].Level != 8 {
		t.Errorf("%d bytes, reductions %v: want the tile over its budget of 1024 served at its last level, 8, and named reduced", len(r.MVT), r.Reduced)
	}
}

// A tile whose envelope lies outside the projection of a layer's relation
// (a British National Grid layer, EPSG:27700, asked for a tile of the
// Atlantic whose corner lies on the equator 88° west of the grid's
// meridian: PostGIS cannot transform it) holds nothing of that
// layer — it was a 500, then a 503 saying the layer does not match the
// database. Near Britain the layer draws its rows; in a composite, the
// other layer is drawn alone.
func TestStoreTileOutsideALayersProjectionIsEmptyOfIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec(t, `CREATE TABLE {s}.bng (id bigint PRIMARY KEY, geom geometry(Point, 27700))`)
	f.exec(t, `INSERT INTO {s}.bng VALUES (1, ST_SetSRID(ST_MakePoint(530000, 180000), 27700))`) // London
	f.exec(t, `CREATE TABLE {s}.merc (id bigint PRIMARY KEY, geom geometry(Point, 3857))`)
	f.exec(t, `INSERT INTO {s}.merc VALUES (7, ST_Transform(ST_SetSRID(ST_MakePoint(-70, 20), 4326), 3857))`)
	f.exec(t, `GRANT SELECT ON {s}.bng, {s}.merc TO geotoll_reader`)
	cat := newCatalog(t,
		tiles.Layer{Name: "bng", Table: f.table("bng"), GeometryColumn: "geom", SRID: 27700,
			GeometryKind: tiles.KindPoint, Overviews: tiles.Overviews{Off: true}},
		tiles.Layer{Name: "merc", Table: f.table("merc"), GeometryColumn: "geom", SRID: 3857,
			GeometryKind: tiles.KindPoint, Overviews: tiles.Overviews{Off: true}})
	store := tiles.NewStore(testenv.ReadPool(t))
	atlantic := maptile.New(2, 3, 3) // 90°W–45°W, 0°–41°N
	if r, err := store.Render(t.Context(), resolve(t, cat, "bng"), atlantic); err != nil || len(r.MVT) != 0 {
		t.Errorf("bng west of its domain: %d bytes, %v; want an empty tile", len(r.MVT), err)
	}
	if _, decoded := renderTile(t, store, resolve(t, cat, "bng,merc"), atlantic); len(decoded) != 1 || decoded[0].Name != "merc" ||
		!slices.Equal(featureIDs(decoded), []string{"7"}) {
		t.Errorf("bng,merc west of bng's domain: %v, want merc's feature 7 alone", featureIDs(decoded))
	}
	if _, decoded := renderTile(t, store, resolve(t, cat, "bng"), maptile.At(orb.Point{-0.12, 51.5}, 10)); !slices.Equal(featureIDs(decoded), []string{"1"}) {
		t.Errorf("bng over London: %v, want feature 1", featureIDs(decoded))
	}
}
