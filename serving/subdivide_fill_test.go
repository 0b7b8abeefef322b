package serving_test

import (
	"maps"
	"math"
	"slices"
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

// TestSubdivideLinesKeepLength: a straight horizontal line of 5,001
// vertices (every segment on its box's edge) and a line whose flat
// segment lies on its box's bottom edge are cut into pieces as long, in
// all, as the rows (PostGIS measures both), none dropped.
func TestSubdivideLinesKeepLength(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sublen_")
	f.exec(t, `CREATE TABLE {s}.flat (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.flat
		SELECT 1, 'straight', ST_MakeLine(array_agg(ST_Point(i * 10, 500, 3857) ORDER BY i)) FROM generate_series(0, 5000) AS i
		UNION ALL
		SELECT 2, 'ledge', ST_MakeLine(array_agg(ST_Point(i * 10, CASE WHEN i BETWEEN 1000 AND 3000 THEN 0 ELSE abs(i - 2000) END, 3857) ORDER BY i))
		FROM generate_series(0, 5000) AS i`)
	f.exec(t, `GRANT SELECT ON {s}.flat TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Table, layer.GeometryKind = "flat", tiles.KindLine
	r := one(t, owner, catalog(t, layer).Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}})
	if r.Status != serving.Built || r.Repaired != 0 {
		t.Fatalf("prepare: %+v, want built, 0 repaired", r)
	}
	pieces := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	rows, err := owner.Query(t.Context(), `
		SELECT t.id, count(p.id), coalesce(sum(ST_Length(p.geom)), 0), ST_Length(t.geom)
		FROM `+pgx.Identifier{f.schema, "flat"}.Sanitize()+` AS t LEFT JOIN `+pieces+` AS p ON p.id = t.id
		GROUP BY t.id, t.geom ORDER BY t.id`)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		ID, N          int
		Pieces, Source float64
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[got])
	if err != nil || len(all) != 2 {
		t.Fatalf("%v, %v", all, err)
	}
	for _, g := range all {
		if g.N == 0 || math.Abs(g.Pieces-g.Source) > 1e-9*g.Source {
			t.Errorf("id %d: %d pieces %.3f m long, the row %.3f m", g.ID, g.N, g.Pieces, g.Source)
		}
	}
}

// TestSubdivideRepairedCount: the rows counted as repaired are the rows
// that were not valid, each once: valid polygons with a vertex on the
// midline the chunks are cut along count none; a MultiPolygon whose
// parts overlap and a bow tie count one each.
func TestSubdivideRepairedCount(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subrep_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int, name text, geom geometry(Geometry, 3857))`)
	// Squares of 100 m with a notch from the bottom whose apex touches
	// the horizontal midline of their box, at (25, 50), densified to
	// ~2,400 vertices (over 64 × 16, a chunk's most): their bottom-left
	// quarter chunk's ring passes the apex twice (a ring that touches
	// itself, not valid) though the square is valid.
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT k, 'notch', ST_Segmentize(ST_Translate(ST_GeomFromText(
			'POLYGON((0 0, 10 0, 25 50, 40 0, 100 0, 100 100, 0 100, 0 0))', 3857), 1000 * k, 0), 0.2)
		FROM generate_series(1, 3) AS k`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	layer := shapesLayer(name, f.schema)
	var invalid int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{f.schema, "shapes"}.Sanitize()+` WHERE NOT ST_IsValid(geom)`).Scan(&invalid); err != nil || invalid != 0 {
		t.Fatalf("fixture: %d invalid squares, %v", invalid, err)
	}
	if r := one(t, owner, catalog(t, layer).Layer(name), o); r.Status != serving.Built || r.Repaired != 0 {
		t.Errorf("valid notched squares: %+v, want built, 0 repaired", r)
	}
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(10, 'overlap', ST_Collect(ST_MakeEnvelope(0, 0, 100, 100, 3857), ST_MakeEnvelope(50, 50, 150, 150, 3857))),
		(11, 'bowtie', ST_GeomFromText('POLYGON((300000 0, 400000 100000, 400000 0, 300000 100000, 300000 0))', 3857))`)
	if r := one(t, owner, catalog(t, layer).Layer(name), o); r.Status != serving.Built || r.Repaired != 2 {
		t.Errorf("with an overlapping MultiPolygon and a bow tie: %+v, want built, 2 repaired", r)
	}
}

// TestSubdivideInvalidCoversAsTheRow: the pieces of an invalid polygon
// cover what ST_Covers covers on the row (inside the exterior ring, not
// inside an interior ring), no more: a shell whose ring crosses itself
// (a bow tie of two lobes), a hole inside the left lobe, a hole lying
// outside the shell (in the gap between the lobes: a repair of the whole
// polygon makes it land), and a hole straddling the left lobe's edge,
// all densified to more vertices than a chunk holds (64 × 16), so that
// the rows are cut into chunks. Each point is answered by the pieces as
// by the row, and the row answers as drawn.
func TestSubdivideInvalidCoversAsTheRow(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subinv_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, label text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES (1, 'lobes', ST_Segmentize(ST_GeomFromText('POLYGON(
		(0 0, 1000 1000, 1000 0, 0 1000, 0 0),
		(100 450, 200 450, 200 550, 100 550, 100 450),
		(450 850, 550 850, 550 950, 450 950, 450 850),
		(-50 200, 50 200, 50 300, -50 300, -50 200))', 3857), 1))`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Properties = []string{"label"}
	servePieces(t, owner, catalog(t, layer), name)
	pieces := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	points := []struct {
		name   string
		x, y   float64
		inside bool
	}{
		{"left lobe", 50, 500, true},
		{"right lobe", 900, 500, true},
		{"hole inside the shell", 150, 500, false},
		{"hole outside the shell", 500, 900, false},
		{"straddling hole, inside the shell", 20, 250, false},
		{"straddling hole, outside the shell", -20, 250, false},
		{"gap below the crossing", 500, 100, false},
	}
	for _, p := range points {
		var row, piece bool
		err := owner.QueryRow(t.Context(), `
			SELECT EXISTS (SELECT FROM `+pgx.Identifier{f.schema, "shapes"}.Sanitize()+` WHERE ST_Covers(geom, ST_Point($1, $2, 3857))),
			       EXISTS (SELECT FROM `+pieces+` WHERE ST_Covers(geom, ST_Point($1, $2, 3857)))`, p.x, p.y).Scan(&row, &piece)
		if err != nil {
			t.Fatal(err)
		}
		if row != p.inside {
			t.Fatalf("fixture: %s (%g, %g) covered by the row: %v, want %v", p.name, p.x, p.y, row, p.inside)
		}
		if piece != row {
			t.Errorf("%s (%g, %g): covered by the pieces %v, by the row %v", p.name, p.x, p.y, piece, row)
		}
	}
}

// TestSubdivideCarriesAColumnNamedG: a layer's columns may be called as
// the fill's own values are (g, part, ok): the pieces of a valid and of an
// invalid row (a bow tie) carry each row's value.
func TestSubdivideCarriesAColumnNamedG(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subcol_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, g text, part text, ok text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(1, 'square', 'p1', 'o1', ST_MakeEnvelope(0, 0, 1000, 1000, 3857)),
		(2, 'bowtie', 'p2', 'o2', ST_GeomFromText('POLYGON((2000 0, 3000 1000, 3000 0, 2000 1000, 2000 0))', 3857))`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Properties = []string{"g", "part", "ok"}
	servePieces(t, owner, catalog(t, layer), name)
	pieces := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	rows, err := owner.Query(t.Context(), `SELECT DISTINCT id, g, part, ok FROM `+pieces+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type carried struct {
		ID          int
		G, Part, OK string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[carried])
	want := []carried{{1, "square", "p1", "o1"}, {2, "bowtie", "p2", "o2"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("the pieces carry %+v (%v), want %+v", got, err, want)
	}
}

// TestTilesFromPiecesCapped: with a feature cap below the ids near the
// tile, a tile read from the pieces holds the same ids as the tile read
// from the table (the first in order_by, name desc: the twin, id 4),
// one feature each.
func TestTilesFromPiecesCapped(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subcap_")
	shapes(t, f)
	layer := shapesLayer(name, f.schema)
	layer.MaxFeatures, layer.OrderBy = 1, []string{"name desc"}
	cat := catalog(t, layer)
	raw := catalog(t, layer).Layer(name)
	reader := servePieces(t, owner, cat, name)
	store := tiles.NewStore(reader)
	tile := maptile.At(orb.Point{0.5, 0.2}, 8) // the disc (id 1) and its twin (id 4)
	got, _, _ := tileArea(t, store, cat.Layer(name), tile)
	want, _, _ := tileArea(t, store, raw, tile)
	if len(want) != 1 || !maps.Equal(got, want) {
		t.Errorf("%v: features per id %v from the pieces, %v from the table; want one feature", tile, got, want)
	}
}

// TestTilesFromPiecesDrawCapped: a tile read from the pieces draws
// (ST_AsMVTGeom) the collected pieces of the capped ids only: with a cap
// of 1 and two ids near the tile, the plan (EXPLAIN ANALYZE VERBOSE of
// the tile's query) draws one id, not both. (Both are candidates, the
// first 2 × cap ids, whose pieces are snapped and collected.)
func TestTilesFromPiecesDrawCapped(t *testing.T) {
	t.Parallel()
	plan, _, _ := piecesTilePlan(t, "subdraw_", shapes, 1, "ANALYZE, VERBOSE")
	if n := plan.drawn(); n != 1 {
		t.Errorf("the tile's query drew %.0f ids' pieces, want 1 (the cap)", n)
	}
}

// TestTilesFromPiecesDrawOnce: a tile read from the pieces draws each
// id's collected pieces once: in the plan of the tile's query (EXPLAIN
// VERBOSE), one expression calls ST_AsMVTGeom on them (others redraw a
// reduced tile's features, and would draw a collapsed feature as a
// point) — none in a filter that tests it apart from the output
// (drawing a z8 tile's pieces is most of its time).
func TestTilesFromPiecesDrawOnce(t *testing.T) {
	t.Parallel()
	plan, _, _ := piecesTilePlan(t, "subonce_", shapes, 0, "VERBOSE")
	draws := plan.count(isDraw)
	if draws != 1 {
		t.Errorf("the tile's query draws the collected pieces in %d expressions, want 1", draws)
	}
}

// TestTilesFromPiecesReadThemOnce: a tile read from the pieces reads
// them in one scan (EXPLAIN ANALYZE of the tile's query: every scan of
// the pieces that runs, runs once). A lookup per candidate id read, each
// time, every piece near the tile through the geometry's index (the
// planner estimates one row there): a tile of 3,149 small parcels took
// 2.7 s of the database.
func TestTilesFromPiecesReadThemOnce(t *testing.T) {
	t.Parallel()
	plan, owner, name := piecesTilePlan(t, "subread_", shapes, 0, "ANALYZE")
	scans := plan.scans(served(t, owner, name, serving.RelationName(name, "sub")))
	if len(scans) == 0 || slices.ContainsFunc(scans, func(loops float64) bool { return loops > 1 }) {
		t.Errorf("the tile's query scans the pieces %v times per scan, want each scan once", scans)
	}
}

// TestTilesFromPiecesSnapOnlyTheirCandidates: a tile read from the
// pieces snaps to its grid the pieces of its candidates only (the first
// 2 × cap ids in order_by), not every piece near the tile: with twelve
// one-piece parcels on the tile and a cap of 2, the plan (EXPLAIN
// ANALYZE VERBOSE) snaps four pieces. Snapping all of them made a capped
// tile of 20,000 small features two to three times slower than the
// lookups before the one scan.
func TestTilesFromPiecesSnapOnlyTheirCandidates(t *testing.T) {
	t.Parallel()
	plan, _, _ := piecesTilePlan(t, "subsnap_", parcels, 2, "ANALYZE, VERBOSE")
	if n := plan.computed(isSnap); n != 4 {
		t.Errorf("the tile's query snapped %.0f pieces, want 4 (2 × cap ids, one piece each)", n)
	}
}

// parcels fills the table shapes with twelve squares of 5 km, one piece
// each, in a row across tile 8/128/127 (near the disc and twin of the
// shapes fixture).
func parcels(t *testing.T, f *fixture) {
	t.Helper()
	f.exec(t, `CREATE TABLE {s}.shapes (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT i, 'parcel ' || i, ST_MakeEnvelope(10000 + i * 12000, 50000, 15000 + i * 12000, 55000, 3857)
		FROM generate_series(0, 11) AS i`)
	f.exec(t, `ANALYZE {s}.shapes`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
}

// isSnap reports whether a plan's expression snaps a piece to the tile's
// grid.
func isSnap(e string) bool {
	return strings.Contains(e, "st_snaptogrid(")
}

// piecesTilePlan builds the pieces of the layer over the table shapes,
// filled by fill (the shapes or parcels fixture), with maxFeatures as its
// cap unless 0, and returns the plan of its tile near the disc (id 1) and
// its twin (id 4), EXPLAIN (options, FORMAT JSON), the owner's pool and the
// layer's name.
func piecesTilePlan(t *testing.T, prefix string, fill func(*testing.T, *fixture), maxFeatures int, options string) (planNode, *pgxpool.Pool, string) {
	t.Helper()
	owner, f, name := setup(t, true, prefix)
	fill(t, f)
	layer := shapesLayer(name, f.schema)
	if maxFeatures > 0 {
		layer.MaxFeatures = maxFeatures
	}
	cat := catalog(t, layer)
	reader := servePieces(t, owner, cat, name)
	sql, args := cat.Layer(name).Query(maptile.At(orb.Point{0.5, 0.2}, 8))
	var doc []struct{ Plan planNode }
	if err := reader.QueryRow(t.Context(), "EXPLAIN ("+options+", FORMAT JSON) "+sql, args...).Scan(&doc); err != nil || len(doc) != 1 {
		t.Fatalf("explain: %v", err)
	}
	return doc[0].Plan, owner, name
}

// servePieces builds the pieces of cat's layer name and refreshes cat so
// that it reads them; it returns the read pool.
func servePieces(t testing.TB, owner *pgxpool.Pool, cat *tiles.Catalog, name string) *pgxpool.Pool {
	t.Helper()
	if r := one(t, owner, cat.Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	reader := testenv.ReadPool(t)
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	return reader
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Relation    string `json:"Relation Name"`
	Output      []string
	Filter      string
	ActualRows  float64 `json:"Actual Rows"`
	ActualLoops float64 `json:"Actual Loops"`
	Plans       []planNode
}

// scans returns, for each node under n that scans the relation rel, how
// many times it ran.
func (n planNode) scans(rel string) []float64 {
	var out []float64
	if n.Relation == rel && n.ActualLoops > 0 {
		out = append(out, n.ActualLoops)
	}
	for _, c := range n.Plans {
		out = append(out, c.scans(rel)...)
	}
	return out
}

// isDraw reports whether a plan's expression draws a feature's collected
// pieces: ST_AsMVTGeom, but for a reduced level's redraw (of a scaled
// shape) and a collapsed feature's point.
func isDraw(e string) bool {
	return strings.Contains(e, "st_asmvtgeom(") && !strings.Contains(e, "st_scale(") && !strings.Contains(e, "st_centroid(")
}

// drawn returns the rows the nodes under n that draw a feature's
// collected pieces (isDraw) produced.
func (n planNode) drawn() float64 {
	total := 0.0
	if slices.ContainsFunc(n.Output, isDraw) {
		total += n.ActualRows * n.ActualLoops
	}
	for _, c := range n.Plans {
		total += c.drawn()
	}
	return total
}

// computed returns the rows of the nodes under n that compute an output
// expression that matches: those whose output matches while none of their
// children's does (the nodes above one pass its result on, named by the
// same expression).
func (n planNode) computed(match func(string) bool) float64 {
	total, below := 0.0, false
	for _, c := range n.Plans {
		if slices.ContainsFunc(c.Output, match) {
			below = true
		}
		total += c.computed(match)
	}
	if !below && slices.ContainsFunc(n.Output, match) {
		total += n.ActualRows * n.ActualLoops
	}
	return total
}

// count returns how many of the output expressions and filters of n and
// the nodes under it match.
func (n planNode) count(match func(string) bool) int {
	total := 0
	for _, o := range append([]string{n.Filter}, n.Output...) {
		if match(o) {
			total++
		}
	}
	for _, c := range n.Plans {
		total += c.count(match)
	}
	return total
}

// TestSubdivideLinesThatRetraceThemselves: a line that runs the same loop
// thirty times (a bus route's laps: 6,001 vertices) is cut into runs of
// consecutive vertices — ceil(6,000 / 63) pieces of at most 64 vertices,
// as long in all as the row — where ST_Subdivide, cutting by boxes that
// each hold more than 64 vertices of the laps down to the smallest, made
// thousands (114,427 of a like track at 256 vertices).
func TestSubdivideLinesThatRetraceThemselves(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sublap_")
	f.exec(t, `CREATE TABLE {s}.laps (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.laps
		SELECT 1, 'route', ST_MakeLine(array_agg(ST_Point(2000 * cos(2 * pi() * i / 200) + sin(i * 1.7),
		                                                   1500 * sin(2 * pi() * i / 200) + cos(i * 2.3), 3857) ORDER BY i))
		FROM generate_series(0, 6000) AS i`)
	f.exec(t, `GRANT SELECT ON {s}.laps TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Table, layer.GeometryKind = "laps", tiles.KindLine
	r := one(t, owner, catalog(t, layer).Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}})
	if r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	pieces := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	var n, most int
	var length, source float64
	err := owner.QueryRow(t.Context(), `SELECT count(*), max(ST_NPoints(p.geom)), sum(ST_Length(p.geom)),
		(SELECT ST_Length(geom) FROM `+pgx.Identifier{f.schema, "laps"}.Sanitize()+`) FROM `+pieces+` AS p`).Scan(&n, &most, &length, &source)
	if err != nil {
		t.Fatal(err)
	}
	if want := (6000 + 62) / 63; n != want || most > 64 {
		t.Errorf("%d pieces of at most %d vertices, want %d of at most 64", n, most, want)
	}
	if math.Abs(length-source) > 1e-9*source {
		t.Errorf("the pieces are %.3f m long, the row %.3f m", length, source)
	}
}

// TestSubdivideLineLayerKeepsItsOtherRows: in a line layer, a row that
// holds a polygon (with a hole) or a point is cut as before, not into
// runs of vertices: runs strung the polygon's rings into one line and made
// the point a line of one point.
func TestSubdivideLineLayerKeepsItsOtherRows(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sublmix_")
	f.exec(t, `CREATE TABLE {s}.mixed (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.mixed VALUES
		(1, 'polygon', ST_Difference(ST_Buffer(ST_Point(0, 0, 3857), 100000, 'quad_segs=16'), ST_Buffer(ST_Point(0, 0, 3857), 20000, 'quad_segs=4'))),
		(2, 'point', ST_Point(300000, 0, 3857)),
		(3, 'line', (SELECT ST_MakeLine(array_agg(ST_Point(i * 1000, 200000, 3857) ORDER BY i)) FROM generate_series(0, 100) AS i))`)
	f.exec(t, `GRANT SELECT ON {s}.mixed TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Table, layer.GeometryKind, layer.Subdivide.MaxVertices = "mixed", tiles.KindLine, 8
	if r := one(t, owner, catalog(t, layer).Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	pieces := pgx.Identifier{tiles.ServingSchema, served(t, owner, name, serving.RelationName(name, "sub"))}.Sanitize()
	rows, err := owner.Query(t.Context(), `
		SELECT t.id, string_agg(DISTINCT GeometryType(p.geom), ','), coalesce(sum(ST_Area(p.geom)), 0), ST_Area(t.geom),
		       coalesce(sum(ST_Length(p.geom)), 0), ST_Length(t.geom)
		FROM `+pgx.Identifier{f.schema, "mixed"}.Sanitize()+` AS t JOIN `+pieces+` AS p ON p.id = t.id
		GROUP BY t.id, t.geom ORDER BY t.id`)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		ID                         int
		Types                      string
		Area, SourceArea, Len, Src float64
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[got])
	if err != nil || len(all) != 3 {
		t.Fatalf("%+v, %v", all, err)
	}
	if g := all[0]; g.Types != "POLYGON" || math.Abs(g.Area-g.SourceArea) > 1e-6*g.SourceArea {
		t.Errorf("the polygon's pieces: %s, %.0f m² of %.0f", g.Types, g.Area, g.SourceArea)
	}
	if g := all[1]; g.Types != "POINT" {
		t.Errorf("the point's pieces: %s", g.Types)
	}
	if g := all[2]; g.Types != "LINESTRING" || math.Abs(g.Len-g.Src) > 1e-9*g.Src {
		t.Errorf("the line's pieces: %s, %.3f m of %.3f", g.Types, g.Len, g.Src)
	}
}
