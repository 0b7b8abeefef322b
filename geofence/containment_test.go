package geofence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/testenv"
)

// zonesSQL fills a zones table: a wiggly 2,000-vertex disc with a hole,
// a two-part multipolygon, two squares sharing an edge and a polygon
// overlapping the disc: holes, multiple parts, shared edges and overlaps.
const zonesSQL = `
CREATE TABLE %[1]s.zones (id int PRIMARY KEY, name text NOT NULL, geom geometry(MultiPolygon, 4326) NOT NULL);
INSERT INTO %[1]s.zones
SELECT id, name, ST_SetSRID(ST_Multi(g), 4326) FROM (
  SELECT 1, 'disc', ST_MakePolygon(ST_AddPoint(l, ST_StartPoint(l)), ARRAY[ST_ExteriorRing(ST_Buffer(ST_MakePoint(100.5, -5.2), 1, 64))])
  FROM (SELECT ST_MakeLine(ARRAY(
      SELECT ST_MakePoint(100 + (3 + 0.2 * sin(radians(i * 360.0 * 7 / 2000))) * cos(radians(i * 360.0 / 2000)),
                          -5 + (3 + 0.2 * sin(radians(i * 360.0 * 7 / 2000))) * sin(radians(i * 360.0 / 2000)))
      FROM generate_series(0, 1999) AS i)) AS l) AS ring
  UNION ALL SELECT 2, 'two parts', ST_Union(ST_Buffer(ST_MakePoint(106, -2), 1.5, 200), ST_Buffer(ST_MakePoint(106, -8), 1, 100))
  UNION ALL SELECT 3, 'west square', ST_MakeEnvelope(104, -6, 105, -4)
  UNION ALL SELECT 4, 'east square', ST_MakeEnvelope(105, -6, 106, -4)
  UNION ALL SELECT 5, 'over the disc', ST_Buffer(ST_MakePoint(102.5, -3), 1.2, 300)
) AS s(id, name, g);
CREATE INDEX ON %[1]s.zones USING gist (geom);
CREATE TABLE %[1]s.roads (id int PRIMARY KEY, geom geometry(LineString, 4326) NOT NULL);
GRANT USAGE ON SCHEMA %[1]s TO geotoll_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA %[1]s TO geotoll_reader`

// zonePieces builds the zones' pieces as `geotoll prepare` does (a table
// in geotoll_serving with the source's columns, cut by ST_Subdivide, and
// its registry row), here at 32 vertices for many seams. It returns the
// layers of zones and roads.
func zonePieces(t *testing.T) (zones, roads Layer) {
	t.Helper()
	return zonePiecesIn(t, 4326)
}

// zonePiecesIn is zonePieces with the pieces in srid: 3857 cuts them from
// the zones transformed, into a column geom_3857, as prepare does for a
// tile layer on such a column.
func zonePiecesIn(t *testing.T, srid int) (zones, roads Layer) {
	t.Helper()
	schema := testenv.Schema(t, "gfzones", func(s string) []string { return strings.Split(fmt.Sprintf(zonesSQL, s), ";\n") })
	owner := testenv.Pool(t)
	name := "zones_" + schema
	testenv.ForgetStorage(t, owner, name)
	rel := name + "_pieces"
	src := pgx.Identifier{schema, "zones"}.Sanitize()
	geom := "geom"
	if srid != 4326 {
		geom = fmt.Sprintf("geom_%d", srid)
	}
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TABLE geotoll_serving.%s AS SELECT z.id, z.name, d.geom::geometry(Polygon, %d) AS %s
		 FROM %s AS z, ST_Subdivide(ST_Transform(z.geom, %d), 32) AS s(geom), ST_Dump(s.geom) AS d WHERE GeometryType(d.geom) = 'POLYGON'`, rel, srid, geom, src, srid),
		`CREATE INDEX ON geotoll_serving.` + rel + ` USING gist (` + geom + `)`,
		`CREATE INDEX ON geotoll_serving.` + rel + ` (id)`,
		`GRANT SELECT ON geotoll_serving.` + rel + ` TO geotoll_reader`,
		`INSERT INTO geotoll_serving.storage (layer, builder, relation, geometry_column, srid, geometry_kind, columns, params,
		   source_table, source_geometry_column, source_rows, source_signature, rows, build_ms, built_at, checked_at)
		 VALUES ('` + name + `', 'subdivide', '` + rel + `', '` + geom + `', ` + fmt.Sprint(srid) + `, 'polygon', ARRAY['id', 'name'], '{"max_vertices": 32}',
		   '` + src + `', 'geom', 5, (SELECT count(*)::text || ':' || coalesce(max(z.xmin::text::bigint), 0)::text || ':' || coalesce(sum(hashint8(z.xmin::text::bigint)), 0)::text FROM ` + src + ` AS z),
		   (SELECT count(*) FROM geotoll_serving.` + rel + `), 0, now(), now())`,
	} {
		if _, err := owner.Exec(ctxT(t), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return Layer{Name: "zones", Table: schema + ".zones", GeometryColumn: "geom", Properties: []string{"name"}},
		Layer{Name: "roads", Table: schema + ".roads", GeometryColumn: "geom"}
}

// probePoints are random points over the zones, points on the seams
// between pieces of one zone (the middle of every shared piece edge), the
// zones' own vertices (their boundaries, holes' included) and a point in
// every hole.
func probePoints(t *testing.T, table, pieces string, random int) []Point {
	t.Helper()
	rng := rand.New(rand.NewPCG(18, 2))
	var pts []Point
	for range random {
		pts = append(pts, Point{Lng: 97 + 11*rng.Float64(), Lat: -10.5 + 11*rng.Float64()})
	}
	q := `SELECT ST_X(p), ST_Y(p) FROM (
	  SELECT ST_LineInterpolatePoint(l.geom, 0.5) AS p
	  FROM geotoll_serving.` + pieces + ` AS a JOIN geotoll_serving.` + pieces + ` AS b ON a.id = b.id AND a.ctid <> b.ctid AND a.geom && b.geom,
	       ST_Dump(ST_LineMerge(ST_CollectionExtract(ST_Intersection(a.geom, b.geom), 2))) AS l
	  WHERE GeometryType(l.geom) = 'LINESTRING' AND NOT ST_IsEmpty(l.geom)
	  UNION ALL
	  SELECT (ST_DumpPoints(z.geom)).geom FROM ` + table + ` AS z
	  UNION ALL
	  SELECT ST_PointOnSurface(ST_MakePolygon(ST_InteriorRingN(d.geom, 1)))
	  FROM ` + table + ` AS z, ST_Dump(z.geom) AS d WHERE ST_NumInteriorRings(d.geom) > 0) AS s`
	pts = append(pts, queryPoints(t, q)...)
	for i := range pts {
		pts[i].ID = fmt.Sprint(i)
	}
	return pts
}

// rawCheck is what PostGIS answers on the raw table: ST_Covers, whole
// polygons.
func rawCheck(t *testing.T, table string, pts []Point) [][]int64 {
	t.Helper()
	lngs, lats := make([]float64, len(pts)), make([]float64, len(pts))
	for i, p := range pts {
		lngs[i], lats[i] = p.Lng, p.Lat
	}
	out := make([][]int64, len(pts))
	for i := range out {
		out[i] = []int64{}
	}
	rows, err := testenv.Pool(t).Query(ctxT(t), `SELECT p.ord, z.id FROM unnest($1::float8[], $2::float8[]) WITH ORDINALITY AS p(lng, lat, ord)
		JOIN `+table+` AS z ON ST_Covers(z.geom, ST_SetSRID(ST_MakePoint(p.lng, p.lat), 4326)) ORDER BY 1, 2`, lngs, lats)
	if err != nil {
		t.Fatal(err)
	}
	var ord, id int64
	if _, err := pgx.ForEachRow(rows, []any{&ord, &id}, func() error { out[ord-1] = append(out[ord-1], id); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// queryPoints runs q (args bound) and returns its rows' (lng, lat) as points.
func queryPoints(t *testing.T, q string, args ...any) []Point {
	t.Helper()
	rows, err := testenv.Pool(t).Query(ctxT(t), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	var pts []Point
	var p Point
	if _, err := pgx.ForEachRow(rows, []any{&p.Lng, &p.Lat}, func() error { pts = append(pts, p); return nil }); err != nil {
		t.Fatal(err)
	}
	return pts
}

// sameAnswers compares got with want point by point; each answer must be
// strictly ascending (no duplicates).
func sameAnswers(t *testing.T, pts []Point, got, want [][]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d answers for %d points", len(got), len(want))
	}
	bad := 0
	for i := range got {
		if !slices.IsSorted(got[i]) || len(slices.Compact(slices.Clone(got[i]))) != len(got[i]) {
			t.Errorf("point %v: answer %v has duplicates or is unordered", pts[i], got[i])
		}
		if !slices.Equal(got[i], want[i]) && bad < 10 {
			bad++
			t.Errorf("point [%.17g, %.17g]: pieces answer %v, the raw table %v", pts[i].Lng, pts[i].Lat, got[i], want[i])
		}
	}
}

func loadedCatalog(t *testing.T, layers ...Layer) *Catalog {
	t.Helper()
	cat := demoCatalog(t, layers...)
	warnings, err := cat.LoadContainment(ctxT(t), testenv.ReadPool(t))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("LoadContainment: %v %v", warnings, err)
	}
	return cat
}

// The same on pieces in EPSG:3857 (a tile layer's geometry, as prepare
// cuts it): the point is transformed; random points, the zones' vertices
// and the points in their holes get the table's answers.
func TestLayerCheckOnMercatorPiecesMatchesTheRawTable(t *testing.T) {
	zones, _ := zonePiecesIn(t, 3857)
	cat := loadedCatalog(t, zones)
	ct, err := cat.Containment("zones")
	if err != nil || !ct.Pieces || !strings.Contains(ct.CheckSQL(), "ST_Transform") {
		t.Fatalf("zones read %+v, %v; want its pieces in 3857", ct, err)
	}
	table := pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize()
	rng := rand.New(rand.NewPCG(18, 5))
	var pts []Point
	for range 3000 {
		pts = append(pts, Point{Lng: 97 + 11*rng.Float64(), Lat: -10.5 + 11*rng.Float64()})
	}
	pts = append(pts, queryPoints(t, `SELECT ST_X(p), ST_Y(p) FROM (SELECT (ST_DumpPoints(z.geom)).geom AS p FROM `+table+` AS z) AS s`)...)
	got, err := NewStore(testenv.ReadPool(t)).Check(ctxT(t), CheckQuery{Layer: ct, Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	sameAnswers(t, pts, got, rawCheck(t, table, pts))
}

// check and contains on a layer read its pieces and answer exactly what
// ST_Covers answers on the raw table, seams and holes included, each
// source id once.
func TestLayerCheckMatchesTheRawTable(t *testing.T) {
	zones, roads := zonePieces(t)
	cat := loadedCatalog(t, zones, roads)
	ct, err := cat.Containment("zones")
	if err != nil || !ct.Pieces || !strings.Contains(ct.Relation, "geotoll_serving") {
		t.Fatalf("zones read %+v, %v; want its pieces", ct, err)
	}
	if ct.PieceVertices != 32 {
		t.Errorf("zones' pieces of at most %d vertices, want the 32 their registry row records", ct.PieceVertices)
	}
	pts := probePoints(t, pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize(), "zones_"+strings.Split(zones.Table, ".")[0]+"_pieces", 3000)
	if len(pts) < 3000+1500 {
		t.Fatalf("only %d probe points", len(pts))
	}
	store := NewStore(testenv.ReadPool(t))
	got, err := store.Check(ctxT(t), CheckQuery{Layer: ct, Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	want := rawCheck(t, pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize(), pts)
	sameAnswers(t, pts, got, want)
	inside, multi := 0, 0
	for _, w := range want {
		inside += min(len(w), 1)
		multi += len(w) / 2
	}
	if inside < 1000 || multi < 10 {
		t.Errorf("probes not telling: %d inside a zone, %d in two", inside, multi)
	}
	for i := 0; i < len(pts); i += 97 {
		fs, truncated, err := store.Contains(ctxT(t), ContainsQuery{Layer: ct, Lng: pts[i].Lng, Lat: pts[i].Lat, Limit: 10})
		if err != nil || truncated {
			t.Fatalf("contains: %v %v", truncated, err)
		}
		var ids []int64
		for _, f := range fs {
			ids = append(ids, f.ID)
			if !strings.Contains(string(f.Properties), `"name"`) || f.Geometry != nil {
				t.Errorf("contains feature %d: properties %s geometry %s", f.ID, f.Properties, f.Geometry)
			}
		}
		if !slices.Equal(ids, want[i]) && !(len(ids) == 0 && len(want[i]) == 0) {
			t.Errorf("contains at %v: %v, raw %v", pts[i], ids, want[i])
		}
	}
}

// The demo districts answer as their table does, whether read from the
// table or from pieces prepare built for their tile layer.
func TestLayerCheckOnDistrictsMatchesTheTable(t *testing.T) {
	cat := loadedCatalog(t)
	ct, err := cat.Containment("districts")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(18, 3))
	pts := make([]Point, 500)
	for i := range pts {
		pts[i] = Point{ID: fmt.Sprint(i), Lng: -10 + 40*rng.Float64(), Lat: 35 + 25*rng.Float64()}
	}
	got, err := NewStore(testenv.ReadPool(t)).Check(ctxT(t), CheckQuery{Layer: ct, Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	sameAnswers(t, pts, got, rawCheck(t, `"geotoll"."districts"`, pts))
}

// layer= on contains and check: unknown 404, points or lines 422, empty or
// given twice 400, not read yet 503 — each a problem, before pricing.
func TestLayerParameterErrors(t *testing.T) {
	zones, roads := zonePieces(t)
	gate := &recordingGate{}
	h, err := NewHandler(Options{Layers: append(demoLayers(), zones, roads), Limits: DefaultLimits(), Reader: NewStore(testenv.ReadPool(t)), Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	r := testRouter(h)
	body := func(layer string) string {
		return `{"points":[{"id":"a","lng":98,"lat":-5}]` + layer + `}`
	}
	cases := []struct {
		method, target, body string
		status               int
	}{
		{http.MethodGet, "/geofence/contains?layer=zones&lng=100&lat=-5", "", http.StatusServiceUnavailable},
		{http.MethodPost, "/geofence/check?layer=zones", body(""), http.StatusServiceUnavailable},
	}
	for _, c := range cases {
		if w := serve(r, c.method, c.target, c.body); w.Code != c.status || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s before the storage is read: %d %s", c.method, c.target, w.Code, w.Body)
		}
	}
	if _, err := h.Catalog().LoadContainment(ctxT(t), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	cases = []struct {
		method, target, body string
		status               int
	}{
		{http.MethodGet, "/geofence/contains?layer=nope&lng=100&lat=-5", "", http.StatusNotFound},
		{http.MethodGet, "/geofence/contains?layer=places&lng=100&lat=-5", "", http.StatusUnprocessableEntity},
		{http.MethodGet, "/geofence/contains?layer=roads&lng=100&lat=-5", "", http.StatusUnprocessableEntity},
		{http.MethodGet, "/geofence/contains?layer=&lng=100&lat=-5", "", http.StatusBadRequest},
		{http.MethodGet, "/geofence/contains?layer=zones&layer=zones&lng=100&lat=-5", "", http.StatusBadRequest},
		{http.MethodPost, "/geofence/check?layer=nope", body(""), http.StatusNotFound},
		{http.MethodPost, "/geofence/check", body(`,"layer":"places"`), http.StatusUnprocessableEntity},
		{http.MethodPost, "/geofence/check", body(`,"layer":7`), http.StatusBadRequest},
		{http.MethodPost, "/geofence/check", body(`,"layer":"zones","layer":"zones"`), http.StatusBadRequest},
		{http.MethodPost, "/geofence/check?layer=zones", body(`,"layer":"zones"`), http.StatusBadRequest},
	}
	for _, c := range cases {
		w := serve(r, c.method, c.target, c.body)
		if w.Code != c.status {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.target, c.body, w.Code, w.Body, c.status)
			continue
		}
		if p := problemDoc(t, w); p["param"] != "layer" && c.status != http.StatusBadRequest {
			t.Errorf("%s %s: problem %v does not name layer", c.method, c.target, p)
		}
	}
	if len(gate.demands) != 0 {
		t.Errorf("refused requests were priced: %+v", gate.demands)
	}
	for _, target := range []string{"/geofence/check?layer=zones", "/geofence/check"} {
		b := body("")
		if !strings.Contains(target, "?") {
			b = body(`,"layer":"zones"`)
		}
		w := serve(r, http.MethodPost, target, b)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"fences":[1]`) {
			t.Errorf("check %s on zones: %d %s", target, w.Code, w.Body)
		}
	}
	if w := serve(r, http.MethodGet, "/geofence/contains?layer=zones&lng=98&lat=-5", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"disc"`) {
		t.Errorf("contains on zones: %d %s", w.Code, w.Body)
	}
	for _, d := range gate.demands {
		if d.Layer != "zones" {
			t.Errorf("demand %+v: want layer zones (priced on its model)", d)
		}
	}
}

// Pieces that do not carry the layer's columns, or are in another SRID
// than 4326 or 3857, are not used: the table is.
func TestLayerPiecesMissingAColumnAreNotUsed(t *testing.T) {
	zones, _ := zonePieces(t)
	cat := demoCatalog(t, zones)
	if _, err := testenv.Pool(t).Exec(context.Background(), `UPDATE geotoll_serving.storage SET columns = ARRAY['id'] WHERE source_table = $1`,
		pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize()); err != nil {
		t.Fatal(err)
	}
	warnings, err := cat.LoadContainment(ctxT(t), testenv.ReadPool(t))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], `"name"`) {
		t.Fatalf("warnings %v, %v", warnings, err)
	}
	if ct, err := cat.Containment("zones"); err != nil || ct.Pieces {
		t.Errorf("zones read %+v, %v; want the table", ct, err)
	}
	// Pieces in another SRID than 4326 or 3857 neither.
	if _, err := testenv.Pool(t).Exec(context.Background(), `UPDATE geotoll_serving.storage SET columns = ARRAY['id', 'name'], srid = 2154 WHERE source_table = $1`,
		pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize()); err != nil {
		t.Fatal(err)
	}
	warnings, err = cat.LoadContainment(ctxT(t), testenv.ReadPool(t))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "SRID 2154") {
		t.Fatalf("warnings %v, %v", warnings, err)
	}
	if ct, err := cat.Containment("zones"); err != nil || ct.Pieces {
		t.Errorf("zones read %+v, %v; want the table", ct, err)
	}
}

// Pieces cut before a write to their table answer for what it held then:
// once the table's change detector differs from the one recorded when they
// were cut, the layer reads its table (and says why) until they are cut
// again; a zone added since is then found.
func TestChangedTableIsReadInsteadOfItsPieces(t *testing.T) {
	zones, roads := zonePieces(t)
	cat, read := zonesOnPieces(t, "before any write", zones, roads)
	if _, err := testenv.Pool(t).Exec(ctxT(t), `INSERT INTO `+ident(zones.Table)+` (id, name, geom)
		VALUES (9001, 'new', ST_GeomFromText('MULTIPOLYGON(((150 10, 151 10, 151 11, 150 11, 150 10)))', 4326))`); err != nil {
		t.Fatal(err)
	}
	warnings, err := cat.LoadContainment(ctxT(t), read)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := cat.Containment("zones")
	if err != nil || ct.Pieces || ct.PieceVertices != 0 || len(warnings) != 1 || !strings.Contains(warnings[0], "changed since") {
		t.Fatalf("after a write: %+v, %v, warnings %q; want the table, with a warning", ct, err, warnings)
	}
	got, err := NewStore(read).Check(ctxT(t), CheckQuery{Layer: ct, Points: []Point{{ID: "p", Lng: 150.5, Lat: 10.5}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != 9001 {
		t.Errorf("a point in the zone added after the pieces were cut: %+v, want zone 9001", got)
	}
}

// Pieces whose registry row names its source table without a schema (as
// an older prepare recorded it) do not say which table they were cut
// from: a reader whose search_path finds a table of that name may read
// another one. They are not used, even when that name finds the layer's
// table: the table is read.
func TestPiecesRecordedWithoutASchemaAreNotUsed(t *testing.T) {
	zones, _ := zonePieces(t)
	schema := strings.Split(zones.Table, ".")[0]
	cfg := testenv.PoolConfig(t, testenv.ReadDatabaseURL(t))
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize() + ", public"
	read, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(read.Close)
	cat := demoCatalog(t, zones)
	if _, err := cat.LoadContainment(ctxT(t), read); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || !ct.Pieces {
		t.Fatalf("recorded with the schema: pieces %v, %v; want the pieces", ct.Pieces, err)
	}
	if _, err := testenv.Pool(t).Exec(ctxT(t), `UPDATE geotoll_serving.storage SET source_table = '"zones"' WHERE source_table = $1`,
		pgx.Identifier{schema, "zones"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.LoadContainment(ctxT(t), read); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || ct.Pieces {
		t.Errorf("recorded without the schema: pieces %v, %v; want the table", ct.Pieces, err)
	}
}

// A registry row naming a table in a schema the reader may not use made
// to_regclass fail, and with it every containment lookup: the row is
// not the layer's table, and the lookup reads the table instead.
func TestPiecesOfASchemaTheReaderMayNotUseFailNoLookup(t *testing.T) {
	zones, _ := zonePieces(t)
	schema := strings.Split(zones.Table, ".")[0]
	closed := "closed_" + schema
	owner := testenv.Pool(t)
	if _, err := owner.Exec(ctxT(t), `CREATE SCHEMA `+pgx.Identifier{closed}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := owner.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{closed}.Sanitize()); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	if _, err := owner.Exec(ctxT(t), `UPDATE geotoll_serving.storage SET source_table = $1 WHERE source_table = $2`,
		pgx.Identifier{closed, "zones"}.Sanitize(), pgx.Identifier{schema, "zones"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	cat := demoCatalog(t, zones)
	if _, err := cat.LoadContainment(ctxT(t), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || ct.Pieces {
		t.Errorf("pieces recorded for a table in a closed schema: pieces %v, %v; want the table", ct.Pieces, err)
	}
}

// Pieces dropped under a server (by a prepare that retired them while the
// server's loads failed) fail the read that finds them gone; the layer's
// table is read from then on, until a load installs what the registry
// names.
func TestPiecesDroppedUnderTheServerAreReplacedByTheTable(t *testing.T) {
	zones, _ := zonePieces(t)
	read := testenv.ReadPool(t)
	cat := demoCatalog(t, zones)
	if _, err := cat.LoadContainment(ctxT(t), read); err != nil {
		t.Fatal(err)
	}
	ct, err := cat.Containment("zones")
	if err != nil || !ct.Pieces {
		t.Fatalf("pieces %v, %v; want the pieces", ct.Pieces, err)
	}
	store := NewStore(read)
	query := CheckQuery{Layer: ct, Points: []Point{{ID: "squares", Lng: 105, Lat: -5}, {ID: "disc", Lng: 97.5, Lat: -5}}}
	want, err := store.Check(ctxT(t), query)
	if err != nil || !reflect.DeepEqual(want, [][]int64{{3, 4}, {1}}) {
		t.Fatalf("the pieces' answer %v, %v; want [[3 4] [1]]", want, err)
	}
	if _, err := testenv.Pool(t).Exec(ctxT(t), `DROP TABLE `+ct.Relation); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Check(ctxT(t), query); err == nil {
		t.Fatal("a check of dropped pieces answered")
	}
	ct, err = cat.Containment("zones")
	if err != nil || ct.Pieces {
		t.Fatalf("after the pieces were found gone: pieces %v (%s), %v; want the table", ct.Pieces, ct.Relation, err)
	}
	query.Layer = ct
	if got, err := store.Check(ctxT(t), query); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the table's answer %v, %v; the pieces' was %v", got, err, want)
	}
}

// A write to a layer's table (the fence admin's, on this server) makes its
// contains and check read the table at once: its pieces predate the
// write, and the next load would find them stale — a refresh later.
func TestWrittenTableIsReadInsteadOfItsPieces(t *testing.T) {
	zones, _ := zonePieces(t)
	cat := demoCatalog(t, zones)
	if _, err := cat.LoadContainment(ctxT(t), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || !ct.Pieces {
		t.Fatalf("pieces %v, %v; want the pieces", ct.Pieces, err)
	}
	cat.Written(`"other"."table"`)
	if ct, _ := cat.Containment("zones"); !ct.Pieces {
		t.Fatal("a write to another table: the zones' pieces are no longer read")
	}
	cat.Written(pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize())
	ct, err := cat.Containment("zones")
	if err != nil || ct.Pieces || ct.Relation != pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize() {
		t.Errorf("after a write to the zones' table: pieces %v, relation %s, %v; want the table", ct.Pieces, ct.Relation, err)
	}
}

// writingQuerier calls write before its first query: a fence write that
// commits while a LoadContainment reads.
type writingQuerier struct {
	Querier
	once  sync.Once
	write func()
}

func (q *writingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.once.Do(q.write)
	return q.Querier.Query(ctx, sql, args...)
}

// A load that read the registry before a write and installs what it read
// after it would bring back the pieces the write made stale: the write is
// applied again to what the load installs.
func TestWrittenDuringALoadOutlastsIt(t *testing.T) {
	zones, _ := zonePieces(t)
	cat := demoCatalog(t, zones)
	read := testenv.ReadPool(t)
	if _, err := cat.LoadContainment(ctxT(t), read); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier(strings.Split(zones.Table, ".")).Sanitize()
	q := &writingQuerier{Querier: read, write: func() { cat.Written(table) }}
	if _, err := cat.LoadContainment(ctxT(t), q); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || ct.Pieces {
		t.Errorf("a load during a write: pieces %v, %v; want the table", ct.Pieces, err)
	}
}

// zonesOnPieces is a catalog of layers, loaded through the read role (the
// pool it returns), whose layer zones reads its pieces (when was what the
// test had done before: a failure names it).
func zonesOnPieces(t *testing.T, when string, layers ...Layer) (*Catalog, *pgxpool.Pool) {
	t.Helper()
	cat, err := NewCatalog(layers)
	if err != nil {
		t.Fatal(err)
	}
	read := testenv.ReadPool(t)
	if _, err := cat.LoadContainment(ctxT(t), read); err != nil {
		t.Fatal(err)
	}
	if ct, err := cat.Containment("zones"); err != nil || !ct.Pieces {
		t.Fatalf("%s: %+v, %v; want the pieces", when, ct, err)
	}
	return cat, read
}
