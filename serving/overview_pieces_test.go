package serving_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// lakes adds to {s}.shapes (see shapes) a square 400 km wide holding 400
// square holes (lakes) in a grid, and a valid ring of 300 islands, all
// one feature each: more rings than a piece takes; and a star whose ring
// crosses itself, 3,000 km across.
func lakes(t *testing.T, f *fixture) {
	t.Helper()
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT 5, 'lakes', ST_MakePolygon(ST_ExteriorRing(ST_MakeEnvelope(1000000, 1000000, 1400000, 1400000, 3857)),
		       array_agg(ST_ExteriorRing(ST_MakeEnvelope(1005000 + i * 20000, 1005000 + j * 20000, 1010000 + i * 20000, 1010000 + j * 20000, 3857))))
		FROM generate_series(0, 19) AS i, generate_series(0, 19) AS j`)
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT 6, 'islands', ST_Collect(ST_MakeEnvelope(-2000000 + i * 10000, -1000000, -1996000 + i * 10000, -996000, 3857))
		FROM generate_series(0, 299) AS i`)
	// A heptagram (seven points joined every second one, 168 vertices: its
	// edges zigzag 20 km, which the overviews' simplification keeps from
	// z4 on): its ring winds twice around its centre, which even-odd
	// filling leaves empty.
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT 7, 'star', ST_MakePolygon(ST_AddPoint(l, ST_StartPoint(l)))
		FROM (SELECT ST_MakeLine(array_agg(ST_Point(
		             e.x0 + (e.x1 - e.x0) * j / 24 - (j % 2) * 20000 * (e.y1 - e.y0) / e.len,
		             e.y0 + (e.y1 - e.y0) * j / 24 + (j % 2) * 20000 * (e.x1 - e.x0) / e.len, 3857) ORDER BY e.i, j)) AS l
		      FROM (SELECT i, x0, y0, x1, y1, sqrt((x1 - x0) ^ 2 + (y1 - y0) ^ 2) AS len
		            FROM (SELECT i, -6000000 + 1500000 * cos(4 * pi() * i / 7) AS x0, 4000000 + 1500000 * sin(4 * pi() * i / 7) AS y0,
		                         -6000000 + 1500000 * cos(4 * pi() * (i + 1) / 7) AS x1, 4000000 + 1500000 * sin(4 * pi() * (i + 1) / 7) AS y1
		                  FROM generate_series(0, 6) AS i) AS p) AS e,
		           generate_series(0, 23) AS j) AS s`)
	f.exec(t, `ANALYZE {s}.shapes`)
}

// TestOverviewInPieces: a polygon layer's overviews are stored in pieces
// (each zoom's features cut ring by ring, the small rings gathered), with
// each feature's number and whole box, indexed on geometry and number,
// recorded with the pieces' size; tiles drawn from them hold the same
// features, each once, covering the same area (within 1 %) as tiles drawn
// from the same overviews stored whole (subdivide off), with the invalid
// bow tie, the self-crossing star and the holes alike. Before, overviews held every feature whole,
// and a tile read and clipped each feature whose box met it.
func TestOverviewInPieces(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "ovp_")
	shapes(t, f)
	lakes(t, f)
	wholeName := name + "_whole"
	testenv.ForgetStorage(t, owner, wholeName)
	layer := shapesLayer(name, f.schema)
	whole := shapesLayer(wholeName, f.schema)
	whole.Subdivide.Off = true
	cat := catalog(t, layer, whole)
	for _, l := range []*tiles.Layer{cat.Layer(name), cat.Layer(wholeName)} {
		if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
			t.Fatalf("%s: prepare: %+v", l.Name, r)
		}
	}
	lo, hi, _ := cat.Layer(name).OverviewZooms(tiles.KindPolygon)
	for z := lo; z <= hi; z++ {
		rel := serving.RelationName(name, "ov_z"+strconv.Itoa(z))
		table := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, rel)}.Sanitize()
		wholeTable := pgx.Identifier{tiles.ServingSchema, served(t, owner, wholeName, serving.RelationName(wholeName, "ov_z"+strconv.Itoa(z)))}.Sanitize()
		var feats, wholeFeats, most, badBoxes int
		var cols []string
		err := owner.QueryRow(t.Context(), `
			SELECT (SELECT count(DISTINCT fid) FROM `+table+`), (SELECT count(*) FROM `+wholeTable+`),
			       (SELECT max(ST_NPoints(geom)) FROM `+table+`),
			       (SELECT count(*) FROM `+table+` WHERE NOT geom @ ST_SetSRID(box::geometry, 3857)) +
			       (SELECT count(*) FROM (SELECT fid FROM `+table+` GROUP BY fid HAVING count(DISTINCT box::text) > 1) AS b),
			       (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
			         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped)`,
			table).Scan(&feats, &wholeFeats, &most, &badBoxes, &cols)
		if err != nil {
			t.Fatal(err)
		}
		if feats != wholeFeats || most > 2*64 || badBoxes > 0 || !slices.Equal(cols, []string{"geom", "c0", "c1", "fid", "box"}) {
			t.Errorf("z%d: %d features in pieces (whole: %d), at most %d vertices a piece (want ≤ 128), %d pieces outside their feature's box or features of two boxes, columns %v",
				z, feats, wholeFeats, most, badBoxes, cols)
		}
		var indexes []string
		if err := owner.QueryRow(t.Context(), `SELECT array_agg(indexdef ORDER BY indexdef) FROM pg_indexes
			WHERE schemaname = $1 AND tablename = $2`, tiles.ServingSchema, served(t, owner, name, rel)).Scan(&indexes); err != nil {
			t.Fatal(err)
		}
		if len(indexes) != 2 || !slices.ContainsFunc(indexes, func(s string) bool { return strings.Contains(s, "USING gist (geom)") }) ||
			!slices.ContainsFunc(indexes, func(s string) bool { return strings.Contains(s, "USING btree (fid)") }) {
			t.Errorf("z%d: indexes %v, want a GiST on geom and a btree on fid", z, indexes)
		}
	}
	var deep int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "ov_z"+strconv.Itoa(hi)))}.Sanitize()+
		` WHERE fid = (SELECT fid FROM `+pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "ov_z"+strconv.Itoa(hi)))}.Sanitize()+` WHERE c1 = 'lakes' LIMIT 1)`).Scan(&deep); err != nil {
		t.Fatal(err)
	}
	if deep < 2 || deep > 400 {
		t.Errorf("z%d: the square of 400 lakes is %d pieces: want its lakes gathered into a few", hi, deep)
	}
	var maxVertices int
	if err := owner.QueryRow(t.Context(), `SELECT min((params->>'max_vertices')::int) FROM geotoll_serving.storage
		WHERE layer = $1 AND builder = 'overview'`, name).Scan(&maxVertices); err != nil || maxVertices != 64 {
		t.Errorf("registry: max_vertices %d (%v), want 64 on every overview", maxVertices, err)
	}
	if r := one(t, owner, cat.Layer(name), serving.Options{}); r.Status != serving.Unchanged {
		t.Errorf("second run: %+v, want unchanged", r)
	}

	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	l, w := cat.Layer(name), cat.Layer(wholeName)
	store := tiles.NewStore(reader)
	centres := []orb.Point{{0.5, 0.2}, {3.2, 0.5}, {10.8, 10.7}, {-17.5, -8.9}, {11.5, 9.5}, {-53.9, 33.8}, {-45, 40}}
	for z := maptile.Zoom(lo); z <= maptile.Zoom(hi); z++ { //nolint:gosec // G115: overview zooms are 0..22
		if src := l.Source(z); !src.Pieces || src.Builder != tiles.BuilderOverview {
			t.Fatalf("z%d reads %+v, want its overview in pieces", z, src)
		}
		if src := w.Source(z); src.Pieces {
			t.Fatalf("z%d of the whole layer reads pieces", z)
		}
		for _, c := range centres {
			tile := maptile.At(c, z)
			gotIDs, got, _ := tileArea(t, store, l, tile)
			wantIDs, want, _ := tileArea(t, store, w, tile)
			for id, n := range gotIDs {
				if n > 1 {
					t.Errorf("%v: id %v drawn as %d features", tile, id, n)
				}
			}
			if len(gotIDs) != len(wantIDs) {
				t.Errorf("%v: ids %v from the pieces, %v whole", tile, gotIDs, wantIDs)
			}
			if math.Abs(got-want) > 0.01*want+1 {
				t.Errorf("%v: pieces cover %.0f tile units², whole %.0f", tile, got, want)
			}
		}
	}
}

// An overview in pieces joins them on its own feature number: rows of a
// table whose ids repeat, or that has none, stay features of their own.
// (The layer's pieces are built only from unique ids.)
func TestOverviewInPiecesKeepsRepeatedIDsApart(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "ovpid_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(1, 'a', ST_Buffer(ST_Point(0, 0, 3857), 100000, 'quad_segs=256')),
		(1, 'b', ST_Buffer(ST_Point(300000, 0, 3857), 100000, 'quad_segs=256'))`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	for _, withoutID := range []bool{false, true} {
		layer := shapesLayer(name, f.schema)
		if withoutID {
			layer.Name, layer.WithoutID = name+"_noid", true
			testenv.ForgetStorage(t, owner, layer.Name)
		}
		tile := maptile.At(orb.Point{1.3, 0}, 5)
		if got := piecesTileNames(t, owner, layer, tile); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("without id %v: %v: features %v, want a and b", withoutID, tile, got)
		}
	}
}

// A line layer's row that is a polygon is drawn from the pieces as from the
// table: ST_LineMerge, which joins a line's pieces, made it an empty
// collection, and the tile held nothing of it.
func TestLinePiecesDrawAPolygonRow(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "ovpline_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(1, 'line', ST_MakeLine(ST_Point(0, 0, 3857), ST_Point(300000, 300000, 3857))),
		(2, 'polygon', ST_MakeEnvelope(100000, -300000, 300000, -100000, 3857))`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.GeometryKind = tiles.KindLine
	tile := maptile.At(orb.Point{1.5, 0}, 5)
	if got := piecesTileNames(t, owner, layer, tile); !slices.Equal(got, []string{"line", "polygon"}) {
		t.Errorf("%v: features %v, want the line and the polygon", tile, got)
	}
}

// piecesTileNames builds layer's overviews, has a catalog of it read them,
// and returns the names of tile's features, which must be read from an
// overview in pieces.
func piecesTileNames(t *testing.T, owner *pgxpool.Pool, layer tiles.Layer, tile maptile.Tile) []string {
	t.Helper()
	cat := catalog(t, layer)
	l := cat.Layer(layer.Name)
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	if !l.Source(tile.Z).Pieces {
		t.Fatalf("z%d reads %+v, want the overview in pieces", tile.Z, l.Source(tile.Z))
	}
	return tileNames(t, tiles.NewStore(reader), l, tile)
}
