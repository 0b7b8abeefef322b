package serving_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"
	"github.com/paulmach/orb/planar"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// shapes adds table {s}.shapes to a fixture: a disc of 4,097 vertices
// around (0, 0) in EPSG:3857 (id 1, 200 km across), a self-crossing
// "bow tie" (id 2, invalid), a small square (id 3) and a disc of 2,049
// vertices touching the first (id 4), readable by the read role.
func shapes(t *testing.T, f *fixture) {
	t.Helper()
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(1, 'disc', ST_Buffer(ST_Point(0, 0, 3857), 100000, 'quad_segs=1024')),
		(2, 'bowtie', ST_GeomFromText('POLYGON((300000 0, 400000 100000, 400000 0, 300000 100000, 300000 0))', 3857)),
		(3, 'square', ST_MakeEnvelope(-300000, -300000, -250000, -250000, 3857)),
		(4, 'twin', ST_Buffer(ST_Point(150000, 0, 3857), 50000, 'quad_segs=512'))`)
	f.exec(t, `CREATE INDEX ON {s}.shapes USING gist (geom)`)
	f.exec(t, `ANALYZE {s}.shapes`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
}

func shapesLayer(name, schema string) tiles.Layer {
	return tiles.Layer{
		Name: name, Schema: schema, Table: "shapes", GeometryColumn: "geom", SRID: 3857,
		IDColumn: "id", Properties: []string{"name"}, GeometryKind: tiles.KindPolygon,
		StatementTimeout: 30 * time.Second, Subdivide: tiles.Subdivide{MaxVertices: 64},
	}
}

// TestSubdividePieces: prepare cuts every row into pieces of at most
// max_vertices vertices with the row's columns by their names, repairs
// (and counts) the invalid row, covers the same area as the repaired
// rows, indexes geometry and id, and records the registry row other code
// finds the pieces by (builder 'subdivide', source_table the table). A
// second run builds nothing; a write to the table makes the next one
// rebuild, and a refreshed catalog reads the new pieces above the
// overview band.
func TestSubdividePieces(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sub_")
	shapes(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	l := cat.Layer(name)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	r := one(t, owner, l, o)
	if r.Status != serving.Built || r.Repaired != 1 || r.Rows < 4097/64 {
		t.Fatalf("prepare: %+v, want built, 1 repaired, at least %d pieces", r, 4097/64)
	}
	table := served(t, owner, name, serving.RelationName(name, "sub"))
	pieces := pgx.Identifier{tiles.ServingSchema, table}.Sanitize()
	var ids, most int
	var cols []string
	var areaPieces, areaRows float64
	err := owner.QueryRow(t.Context(), `
		SELECT (SELECT count(DISTINCT id) FROM `+pieces+`), (SELECT max(ST_NPoints(geom)) FROM `+pieces+`),
		       (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
		         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped),
		       (SELECT sum(ST_Area(geom)) FROM `+pieces+`),
		       (SELECT sum(ST_Area(ST_MakeValid(geom))) FROM `+pgx.Identifier{f.schema, "shapes"}.Sanitize()+`)`,
		pieces).Scan(&ids, &most, &cols, &areaPieces, &areaRows)
	if err != nil {
		t.Fatal(err)
	}
	if ids != 4 || most > 64 || !slices.Equal(cols, []string{"geom", "id", "name"}) {
		t.Errorf("pieces: %d ids, at most %d vertices, columns %v; want 4, ≤ 64, [geom id name]", ids, most, cols)
	}
	if math.Abs(areaPieces-areaRows) > 1e-6*areaRows {
		t.Errorf("pieces cover %.1f m², the repaired rows %.1f m²", areaPieces, areaRows)
	}
	var indexes []string
	if err := owner.QueryRow(t.Context(), `SELECT array_agg(indexdef ORDER BY indexdef) FROM pg_indexes
		WHERE schemaname = $1 AND tablename = $2`, tiles.ServingSchema, table).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if len(indexes) != 2 || !slices.ContainsFunc(indexes, func(s string) bool { return strings.Contains(s, "USING gist (geom)") }) ||
		!slices.ContainsFunc(indexes, func(s string) bool { return strings.Contains(s, "USING btree (id)") }) {
		t.Errorf("indexes %v, want a GiST on geom and a btree on id", indexes)
	}
	var found int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM geotoll_serving.storage
		WHERE source_table::regclass = $1::regclass AND builder = 'subdivide' AND relation = $2
		  AND 'id' = ANY(columns) AND zoom_min = 8 AND zoom_max = 22`,
		pgx.Identifier{f.schema, "shapes"}.Sanitize(), table).Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found != 1 {
		t.Errorf("no registry row finds the pieces by their table and builder 'subdivide', zooms 8..22")
	}
	if r := one(t, owner, l, o); r.Status != serving.Unchanged {
		t.Errorf("second run: %+v, want unchanged", r)
	}
	f.exec(t, `UPDATE {s}.shapes SET name = 'renamed' WHERE id = 3`)
	if r := one(t, owner, l, o); r.Status != serving.Built {
		t.Errorf("after a write: %+v, want built", r)
	}
	res, err := cat.Refresh(t.Context(), testenv.ReadPool(t))
	if err != nil || len(res.Warnings) > 0 || !slices.Contains(res.Changed, name) {
		t.Fatalf("refresh: %+v, %v", res, err)
	}
	rebuilt := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	if rebuilt == pieces {
		t.Errorf("the rebuild kept table %s: each build makes its own", pieces)
	}
	if src := l.Source(12); src.Builder != tiles.BuilderSubdivide || src.Relation.Sanitize() != rebuilt {
		t.Errorf("z12 reads %+v, want the pieces", src)
	}
	if src := l.Source(7); src.Builder == tiles.BuilderSubdivide {
		t.Errorf("z7 (overview band) reads the pieces")
	}
}

// TestTilesFromPieces: a tile read from the pieces holds at most one
// feature per id, with as many polygons as the table's (no seam where the
// pieces meet), and its features cover the area the same tile read
// from the table covers, within 1 % (both decoded from the MVT PostGIS
// wrote), at zooms where the disc is cut into many pieces.
func TestTilesFromPieces(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subtile_")
	shapes(t, f)
	cat := catalog(t, shapesLayer(name, f.schema))
	raw := catalog(t, shapesLayer(name, f.schema)).Layer(name)
	if r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(name)
	store := tiles.NewStore(reader)
	centre := orb.Point{0.5, 0.2} // lon, lat near the disc's centre and its twin
	for _, tile := range []maptile.Tile{maptile.At(centre, 8), maptile.At(centre, 9), maptile.At(centre, 10), maptile.At(orb.Point{0.8, 0.3}, 12)} {
		if l.Source(tile.Z).Builder != tiles.BuilderSubdivide {
			t.Fatalf("%v: reads %+v", tile, l.Source(tile.Z))
		}
		gotIDs, got, gotPolys := tileArea(t, store, l, tile)
		_, want, wantPolys := tileArea(t, store, raw, tile)
		if gotPolys != wantPolys {
			t.Errorf("%v: %d polygons from the pieces, %d from the table: seams left inside an outline", tile, gotPolys, wantPolys)
		}
		for id, n := range gotIDs {
			if n > 1 {
				t.Errorf("%v: id %v drawn as %d features", tile, id, n)
			}
		}
		if want == 0 || math.Abs(got-want) > 0.01*want {
			t.Errorf("%v: pieces cover %.0f tile units², the table %.0f", tile, got, want)
		}
		t.Logf("%v: %d features, area %.0f (table %.0f)", tile, len(gotIDs), got, want)
	}
}

// tileArea renders tile of l and returns its features per id, the area
// they cover, in tile units, and their polygons.
func tileArea(t testing.TB, store *tiles.Store, l *tiles.Layer, tile maptile.Tile) (map[any]int, float64, int) {
	t.Helper()
	r, err := store.Render(t.Context(), []*tiles.Layer{l}, tile)
	if err != nil {
		t.Fatalf("%v: %v", tile, err)
	}
	ids := map[any]int{}
	area, polygons := 0.0, 0
	if len(r.MVT) == 0 {
		return ids, 0, 0
	}
	layers, err := mvt.Unmarshal(r.MVT)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range layers[0].Features {
		ids[f.ID]++
		area += planar.Area(f.Geometry)
		switch g := f.Geometry.(type) {
		case orb.Polygon:
			polygons++
		case orb.MultiPolygon:
			polygons += len(g)
		}
	}
	return ids, area, polygons
}

// TestLineTilesFromPieces: a line layer's tiles from the pieces hold one
// feature per id, merged where the pieces meet, as long as the table's
// (within 1 %).
func TestLineTilesFromPieces(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sublines_")
	f.exec(t, `CREATE TABLE {s}.rings AS SELECT id, name, ST_ExteriorRing(ST_Buffer(ST_Point(0, 0, 3857), 100000 * id, 'quad_segs=1024')) AS geom
		FROM (VALUES (1, 'small'), (2, 'large')) AS v(id, name)`)
	f.exec(t, `GRANT SELECT ON {s}.rings TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Table, layer.GeometryKind = "rings", tiles.KindLine
	cat := catalog(t, layer)
	raw := catalog(t, layer).Layer(name)
	if r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built || r.Rows < 2*4097/64 {
		t.Fatalf("prepare: %+v", r)
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)
	for _, tile := range []maptile.Tile{maptile.New(127, 127, 8), maptile.New(128, 127, 8), maptile.New(1029, 1023, 11)} {
		got, gotLen := tileLength(t, store, cat.Layer(name), tile)
		want, wantLen := tileLength(t, store, raw, tile)
		for id, parts := range got {
			if parts > want[id] {
				t.Errorf("%v: id %v drawn in %d lines from the pieces, %d from the table", tile, id, parts, want[id])
			}
		}
		if wantLen == 0 || math.Abs(gotLen-wantLen) > 0.01*wantLen {
			t.Errorf("%v: lines from the pieces %.0f units long, from the table %.0f", tile, gotLen, wantLen)
		}
	}
}

// tileLength renders tile of l and returns the lines of each id (one
// feature each, else the test fails) and their length in tile units.
func tileLength(t *testing.T, store *tiles.Store, l *tiles.Layer, tile maptile.Tile) (map[any]int, float64) {
	t.Helper()
	r, err := store.Render(t.Context(), []*tiles.Layer{l}, tile)
	if err != nil || len(r.MVT) == 0 {
		t.Fatalf("%v: %d bytes, %v", tile, len(r.MVT), err)
	}
	layers, err := mvt.Unmarshal(r.MVT)
	if err != nil {
		t.Fatal(err)
	}
	lines, length := map[any]int{}, 0.0
	for _, f := range layers[0].Features {
		if _, seen := lines[f.ID]; seen {
			t.Errorf("%v: id %v in two features", tile, f.ID)
		}
		lines[f.ID] = 1
		if ml, ok := f.Geometry.(orb.MultiLineString); ok {
			lines[f.ID] = len(ml)
		}
		length += planar.Length(f.Geometry)
	}
	return lines, length
}
