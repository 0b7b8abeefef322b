package geofence

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/geojson"

	"github.com/geotoll/geotoll/internal/testenv"
)

// coastline is a fence of n positions around (x, y): a disc of radius 2°
// whose edge wiggles like a coast.
func coastline(x, y float64, n int) orb.Polygon {
	r := make(orb.Ring, 0, n)
	for i := range n - 1 {
		a := 2 * math.Pi * float64(i) / float64(n-1)
		d := 2 + 0.05*math.Sin(a*997) + 0.1*math.Sin(a*31)
		r = append(r, orb.Point{x + d*math.Cos(a), y + d*math.Sin(a)})
	}
	return orb.Polygon{append(r, r[0])}
}

func fenceBody(t *testing.T, name string, p orb.Polygon) string {
	t.Helper()
	f := geojson.NewFeature(p)
	f.Properties["name"] = name
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// piecesOf counts a fence's pieces and their largest vertex count.
func piecesOf(t *testing.T, id int64) (n, largest int) {
	t.Helper()
	err := testenv.Pool(t).QueryRow(ctxT(t), `SELECT count(*), coalesce(max(ST_NPoints(geom)), 0) FROM geotoll.geofence_pieces WHERE fence_id = $1`, id).Scan(&n, &largest)
	if err != nil {
		t.Fatal(err)
	}
	return n, largest
}

// A coastline fence of 300,000 positions (several MB of GeoJSON, over the
// query body limit) is accepted by the admin route, stored as pieces of at
// most 256 vertices, answers contains and check; its pieces follow a
// replacement and go with a delete.
func TestBigFenceIsStoredAsPieces(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	const x, y = -30.0, -52.0 // South Atlantic: no demo fence
	body := fenceBody(t, "coast "+randomSuffix(), coastline(x, y, 300_000))
	if int64(len(body)) <= DefaultLimits().MaxBodyBytes {
		t.Fatalf("the fence is %d bytes: not over the query body limit", len(body))
	}
	w := serve(api, http.MethodPost, FencesPath, body, admin...)
	if w.Code != http.StatusCreated {
		t.Fatalf("create a %d-byte fence: %d %.300s", len(body), w.Code, w.Body)
	}
	loc := w.Header().Get("Location")
	id, err := strconv.ParseInt(loc[strings.LastIndexByte(loc, '/')+1:], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve(api, http.MethodDelete, loc, "", admin...) })
	n, largest := piecesOf(t, id)
	if n < 300_000/256 || largest > 256 {
		t.Errorf("%d pieces of at most %d vertices, want at least %d of at most 256", n, largest, 300_000/256)
	}
	check := func(lng, lat float64) string {
		return serve(api, http.MethodPost, "/geofence/check", fmt.Sprintf(`{"points":[{"id":"p","lng":%g,"lat":%g}]}`, lng, lat)).Body.String()
	}
	want := fmt.Sprintf(`"fences":[%d]`, id)
	if got := check(x+1, y); !strings.Contains(got, want) {
		t.Errorf("check inside the coast: %s, want %s", got, want)
	}
	if w := serve(api, http.MethodGet, fmt.Sprintf("/geofence/contains?lng=%g&lat=%g", x, y+1), ""); !strings.Contains(w.Body.String(), `"truncated":true`) {
		t.Errorf("contains in a fence over max_response_vertices: %d %.300s, want it truncated", w.Code, w.Body)
	}

	// Replaced by a small square east of the coast: the old pieces go.
	square := orb.Polygon{{{x + 5, y}, {x + 6, y}, {x + 6, y + 1}, {x + 5, y + 1}, {x + 5, y}}}
	if w := serve(api, http.MethodPut, loc, fenceBody(t, "square", square), admin...); w.Code != http.StatusOK {
		t.Fatalf("replace: %d %s", w.Code, w.Body)
	}
	if n, _ := piecesOf(t, id); n != 1 {
		t.Errorf("%d pieces after the fence became a square, want 1", n)
	}
	if got := check(x+1, y); strings.Contains(got, want) {
		t.Errorf("check inside the old coast after the replacement: %s", got)
	}
	if got := check(x+5.5, y+0.5); !strings.Contains(got, want) {
		t.Errorf("check inside the new square: %s, want %s", got, want)
	}
	if w := serve(api, http.MethodDelete, loc, "", admin...); w.Code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if n, _ := piecesOf(t, id); n != 0 {
		t.Errorf("%d pieces left after the delete", n)
	}
}

// The fence writer role writes fences, never pieces directly; the reader
// reads pieces.
func TestFencePiecesRights(t *testing.T) {
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("geotoll_fence_writer")
	conn, err := pgx.Connect(ctxT(t), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxT(t))
	for _, stmt := range []string{
		`INSERT INTO geotoll.geofence_pieces (fence_id, geom) SELECT id, ST_GeometryN(geom, 1) FROM geotoll.geofences LIMIT 1`,
		`DELETE FROM geotoll.geofence_pieces`,
		`SELECT count(*) FROM geotoll.geofence_pieces`,
	} {
		if _, err := conn.Exec(ctxT(t), stmt); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("the writer ran %q: %v", stmt, err)
		}
	}
	var n int
	if err := testenv.ReadPool(t).QueryRow(ctxT(t), `SELECT count(*) FROM geotoll.geofence_pieces`).Scan(&n); err != nil || n == 0 {
		t.Errorf("the reader reads %d pieces: %v", n, err)
	}
}

// contains and check on the fences answer what ST_Covers answers on
// geotoll.geofences, for random points and the fences' own vertices.
func TestFenceCheckMatchesTheFenceTable(t *testing.T) {
	var west, south, east, north float64
	if err := testenv.Pool(t).QueryRow(ctxT(t), `SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) FROM (SELECT ST_Extent(geom) AS e FROM geotoll.geofences) AS s`).
		Scan(&west, &south, &east, &north); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(18, 8))
	var pts []Point
	for range 3000 {
		pts = append(pts, Point{Lng: west + (east-west)*rng.Float64(), Lat: south + (north-south)*rng.Float64()})
	}
	pts = append(pts, queryPoints(t, `SELECT ST_X(p.geom), ST_Y(p.geom) FROM (SELECT geom FROM geotoll.geofences ORDER BY id LIMIT 40) AS f, ST_DumpPoints(f.geom) AS p`)...)
	got, err := NewStore(testenv.ReadPool(t)).Check(ctxT(t), CheckQuery{Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	want := rawCheck(t, "geotoll.geofences", pts)
	sameAnswers(t, pts, got, want)
	inside := 0
	for _, w := range want {
		inside += min(len(w), 1)
	}
	if inside < 200 {
		t.Errorf("only %d of %d points inside a fence: the comparison tells little", inside, len(pts))
	}
}

// A fence cut into pieces answers check as ST_Covers on the whole fence
// everywhere but on its edge itself: random points over its box, and the
// points the cuts made (the pieces' own vertices) and points along its
// ring, which lie on the edge to within a double's rounding. There the
// cut's new vertices are rounded, and so is ST_Covers's own test of a
// point that ST_Distance puts on the edge: either answer is within
// rounding of the other, and every disagreement must lie on the edge.
func TestCutFenceAnswersAsTheWholeFenceOffItsEdge(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	const x, y = -30.0, -52.0 // South Atlantic: no demo fence
	w := serve(api, http.MethodPost, FencesPath, fenceBody(t, "seams "+randomSuffix(), coastline(x, y, 2000)), admin...)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	loc := w.Header().Get("Location")
	id, err := strconv.ParseInt(loc[strings.LastIndexByte(loc, '/')+1:], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve(api, http.MethodDelete, loc, "", admin...) })
	if n, _ := piecesOf(t, id); n < 8 {
		t.Fatalf("%d pieces: the fence is not cut", n)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var pts []Point
	for range 5000 {
		pts = append(pts, Point{Lng: x - 2.3 + 4.6*rng.Float64(), Lat: y - 2.3 + 4.6*rng.Float64()})
	}
	random := len(pts)
	pts = append(pts, queryPoints(t, `
		SELECT DISTINCT ST_X(d.geom), ST_Y(d.geom) FROM geotoll.geofence_pieces AS s, ST_DumpPoints(s.geom) AS d WHERE s.fence_id = $1
		UNION
		SELECT ST_X(d.geom), ST_Y(d.geom) FROM geotoll.geofences AS f,
		       ST_DumpPoints(ST_LineInterpolatePoints(ST_ExteriorRing(ST_GeometryN(f.geom, 1)), 0.0002)) AS d WHERE f.id = $1`, id)...)
	got, err := NewStore(testenv.ReadPool(t)).Check(ctxT(t), CheckQuery{Points: pts})
	if err != nil {
		t.Fatal(err)
	}
	want := rawCheck(t, "geotoll.geofences", pts)
	differ := 0
	for i := range pts {
		if slices.Equal(got[i], want[i]) {
			continue
		}
		differ++
		var d float64
		if err := testenv.Pool(t).QueryRow(ctxT(t), `SELECT ST_Distance(ST_Boundary(geom), ST_SetSRID(ST_MakePoint($2, $3), 4326)) FROM geotoll.geofences WHERE id = $1`,
			id, pts[i].Lng, pts[i].Lat).Scan(&d); err != nil {
			t.Fatal(err)
		}
		if i < random || d > 1e-12 {
			t.Errorf("point [%.17g, %.17g], %g° from the edge: the pieces answer %v, the whole fence %v", pts[i].Lng, pts[i].Lat, d, got[i], want[i])
		}
	}
	t.Logf("%d points (%d random); %d on the edge answered otherwise than by the whole fence", len(pts), random, differ)
}
