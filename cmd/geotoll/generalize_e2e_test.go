package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// decode unmarshals a tile body, failing the test on bad bytes.
func decode(t *testing.T, body []byte) mvt.Layers {
	t.Helper()
	if len(body) == 0 {
		return nil
	}
	ls, err := mvt.Unmarshal(body)
	if err != nil {
		t.Fatalf("%d bytes do not decode as MVT: %v", len(body), err)
	}
	return ls
}

// pointCounts sums the point_count of a decoded layer's features.
func pointCounts(l *mvt.Layer) (sum float64) {
	for _, f := range l.Features {
		n, _ := f.Properties["point_count"].(float64)
		sum += n
	}
	return sum
}

// A composite of a layer in its zoom range and one outside it answers with
// the first; only a composite with no layer in range is a 422.
func TestEndToEndCompositeServesTheLayersInRange(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0 // every request a miss, priced in full
		roomy(c)
	})
	z2 := maptile.At(orb.Point{10, 50}, 2) // districts start at z4
	for _, list := range []string{"places,districts", "districts,places"} {
		resp, body := fetch(t, http.MethodGet, tileURL(base, list, z2))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s at z2: %d %s", list, resp.StatusCode, short(body))
		}
		ls := decode(t, body)
		if len(ls) != 1 || ls[0].Name != "places" || len(ls[0].Features) == 0 {
			t.Errorf("%s at z2: layers %v, want places alone", list, mvtLayerNames(ls))
		}
		alone, _ := fetch(t, http.MethodGet, tileURL(base, "places", z2))
		// The estimates: what is charged settles at each query's own time.
		if e, a := resp.Header.Get("X-Request-Cost-Estimate"), alone.Header.Get("X-Request-Cost-Estimate"); e == "" || e != a {
			t.Errorf("%s at z2 estimated %q, places alone %q: the layer out of range is not read", list, e, a)
		}
	}
	resp, body := fetch(t, http.MethodGet, tileURL(base, "districts", z2))
	if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("districts alone at z2: %d %s, want a 422 problem", resp.StatusCode, short(body))
	}
}

// A composite whose layers' zoom ranges leave a gap (places_low z0..2,
// districts_mid z4..14) is advertised at z0..14 by its TileJSON, and a map
// asks for z3: that is an empty tile (204, with ETag and Cache-Control),
// charged the base price of a cache hit, since nothing is read for it.
// Beyond every layer's range (z15) it stays a 422.
func TestEndToEndCompositeGapIsAnEmptyTile(t *testing.T) {
	t.Parallel()
	const capacity = 100
	base, _ := startServer(t, func(c *Config) {
		sizePrices(c)
		c.Throttle.Tiers["anonymous"] = TierConfig{Rate: 0.001, Capacity: capacity, MaxInFlight: 8}
		low, mid := c.Layers[0], c.Layers[1]
		low.Name, low.MaxZoom = "places_low", 2
		mid.Name, mid.MaxZoom = "districts_mid", 14
		c.Layers = append(c.Layers, low, mid)
	})
	const list = "places_low,districts_mid"
	doc := getTileJSON(t, base+"/tiles/"+list+".json")
	if doc.MinZoom != 0 || doc.MaxZoom != 14 {
		t.Fatalf("TileJSON of %s: zooms %d..%d, want 0..14", list, doc.MinZoom, doc.MaxZoom)
	}
	z3 := maptile.At(berlinCentre, 3)
	for range 5 {
		resp, body := fetch(t, http.MethodGet, tileURL(base, list, z3))
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("%s at z3, between its layers' zooms: %d %s, want 204", list, resp.StatusCode, short(body))
		}
		if resp.Header.Get("ETag") == "" || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age=") {
			t.Errorf("%s at z3: ETag %q, Cache-Control %q", list, resp.Header.Get("ETag"), resp.Header.Get("Cache-Control"))
		}
		if c, _ := strconv.ParseFloat(resp.Header.Get("X-Request-Cost"), 64); c != emptyTileBase {
			t.Errorf("%s at z3: X-Request-Cost %q, want the base price of a cache hit, %v", list, resp.Header.Get("X-Request-Cost"), emptyTileBase)
		}
	}
	if left := budget(t, base, "")["remaining"].(float64); left < capacity-5*emptyTileBase-0.001 {
		t.Errorf("after five empty tiles the bucket holds %v of %d: they were charged more than the base price", left, capacity)
	}
	resp, body := fetch(t, http.MethodGet, tileURL(base, list, maptile.At(berlinCentre, 15)))
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("%s at z15, beyond every layer: %d %s, want 422", list, resp.StatusCode, short(body))
	}
	// The measure can fail: a tile that reads something is charged. A z12
	// tile of districts_mid alone: places_low, renamed, has no overview,
	// and its z2 tile would read the whole table (a timeout on a loaded
	// machine).
	if resp, body := fetch(t, http.MethodGet, tileURL(base, list, maptile.At(berlinCentre, 12))); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%s at z12: %d %s", list, resp.StatusCode, short(body))
	}
	if left := budget(t, base, "")["remaining"].(float64); left >= capacity-5*emptyTileBase-0.01 {
		t.Errorf("after a z12 tile the bucket still holds %v of %d", left, capacity)
	}
}

// emptyTileBase is the base price (sizePrices'), which a cache hit costs.
const emptyTileBase = 1.0

// roomy lets anonymous callers spend freely: for tests of what is served,
// not of what it costs.
func roomy(c *Config) {
	c.Throttle.Tiers["anonymous"] = TierConfig{Rate: 1e6, Capacity: 1e7, MaxInFlight: 64}
}

func mvtLayerNames(ls mvt.Layers) []string {
	names := make([]string, len(ls))
	for i := range ls {
		names[i] = ls[i].Name
	}
	return names
}

// A capped tile renders to the same bytes every time: twice on one
// server with the cache off, and once on another server (a replica), with
// the same ETag; the features kept are the first in the layer's order
// (point_count descending, then order_by).
func TestEndToEndCappedTileIsStable(t *testing.T) {
	t.Parallel()
	capped := func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Layers[0].MaxFeatures = 50
	}
	a, _ := startServer(t, capped)
	b, _ := startServer(t, capped)
	tile := maptile.At(berlinCentre, 10) // clustered by the query: hundreds of clusters
	r1, body1 := fetch(t, http.MethodGet, tileURL(a, "places", tile))
	r2, body2 := fetch(t, http.MethodGet, tileURL(a, "places", tile))
	r3, body3 := fetch(t, http.MethodGet, tileURL(b, "places", tile))
	for i, r := range []*http.Response{r1, r2, r3} {
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("render %d: %d X-Cache %q", i+1, r.StatusCode, r.Header.Get("X-Cache"))
		}
	}
	if !bytes.Equal(body1, body2) || !bytes.Equal(body1, body3) {
		t.Errorf("three renders of %v: %d, %d and %d bytes, not the same", tile, len(body1), len(body2), len(body3))
	}
	if e := r1.Header.Get("ETag"); e == "" || r2.Header.Get("ETag") != e || r3.Header.Get("ETag") != e {
		t.Errorf("ETags %q, %q, %q: want one", e, r2.Header.Get("ETag"), r3.Header.Get("ETag"))
	}
	ls := decode(t, body1)
	if len(ls) != 1 || len(ls[0].Features) != 50 {
		t.Fatalf("%d layers, want places with the 50 features of the cap", len(ls))
	}
	counts := make([]float64, len(ls[0].Features))
	for i, f := range ls[0].Features {
		counts[i] = f.Properties["point_count"].(float64)
	}
	if !slices.IsSortedFunc(counts, func(x, y float64) int { return int(y - x) }) || counts[0] < 2 {
		t.Errorf("point_counts %v: want the largest clusters, largest first", counts)
	}
}

// A tile over its byte budget is reduced to fit, says so in
// X-Tile-Reduced, and keeps its points counted: merging cells sums them.
func TestEndToEndByteBudget(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) {
		small := c.Layers[0]
		small.Name, small.MaxTileBytes = "places_small", 4096
		c.Layers = append(c.Layers, small)
		// What is tested is what a reduced tile holds, not what it costs
		// nor the statement budget it paid for. places_small has no
		// overviews (they are built per layer name): its z9 tile clusters
		// the ~5,000 rows of the table itself, priced at about 26 ms,
		// run in 35-75 ms on an idle machine, and cut at timeout_floor
		// (250 ms, a 503 timeout) on a loaded one. Its statements run
		// under the layer's statement_timeout instead, and the bucket
		// pays for renders that long.
		c.Throttle.TimeoutFloor = 10 * time.Second
		roomy(c)
	})
	tile := maptile.At(berlinCentre, 9)
	full, fullBody := fetch(t, http.MethodGet, tileURL(base, "places", tile))
	resp, body := fetch(t, http.MethodGet, tileURL(base, "places_small", tile))
	if full.StatusCode != http.StatusOK || resp.StatusCode != http.StatusOK {
		t.Fatalf("places %d %s, places_small %d %s", full.StatusCode, short(fullBody), resp.StatusCode, short(body))
	}
	if len(fullBody) <= 4096 || full.Header.Get(tiles.HeaderReduced) != "" {
		t.Fatalf("the unreduced tile is %d bytes (X-Tile-Reduced %q): the test needs one over 4096",
			len(fullBody), full.Header.Get(tiles.HeaderReduced))
	}
	hdr := resp.Header.Get(tiles.HeaderReduced)
	level, err := strconv.Atoi(strings.TrimPrefix(hdr, "places_small;level="))
	if err != nil || level < 1 {
		t.Fatalf("X-Tile-Reduced %q, want places_small;level=N", hdr)
	}
	if len(body) > 4096 {
		t.Errorf("reduced tile is %d bytes, budget 4096", len(body))
	}
	if hit, _ := fetch(t, http.MethodGet, tileURL(base, "places_small", tile)); hit.Header.Get("X-Cache") != "HIT" ||
		hit.Header.Get(tiles.HeaderReduced) != hdr || hit.Header.Get("ETag") != resp.Header.Get("ETag") {
		t.Errorf("cache hit: X-Cache %q, X-Tile-Reduced %q, ETag %q; want the miss's", hit.Header.Get("X-Cache"),
			hit.Header.Get(tiles.HeaderReduced), hit.Header.Get("ETag"))
	}
	a, b := decode(t, fullBody), decode(t, body)
	if pointCounts(a[0]) != pointCounts(b[0]) || len(b[0].Features) >= len(a[0].Features) {
		t.Errorf("reduced: %d features counting %v points; unreduced: %d counting %v", len(b[0].Features),
			pointCounts(b[0]), len(a[0].Features), pointCounts(a[0]))
	}
}

// geotoll prepare is safe while tiles are served: rebuilding the overviews
// of a layer three times, while four clients fetch its overview tiles
// without a cache, fails no request, and serve reads the new storage
// within its refresh interval.
func TestEndToEndPrepareWhileServing(t *testing.T) {
	t.Parallel()
	owner := testenv.Pool(t)
	name := "swap_" + strings.TrimPrefix(testenv.Prefix(t), "geotoll-test-")
	testenv.ForgetStorage(t, owner, name)
	layer := DefaultConfig().Layers[0]
	layer.Name = name
	layer.Overviews.MaxZoom = 6 // quicker rebuilds; the switch is the same
	cat, err := tiles.NewCatalog([]tiles.Layer{layer.Layer})
	if err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(name)
	prepare := func(force bool) serving.Result {
		t.Helper()
		res := slices.DeleteFunc(serving.Prepare(t.Context(), owner, []*tiles.Layer{l}, serving.Options{Force: force, Builders: []serving.Builder{serving.Overview{}}}),
			func(r serving.Result) bool { return r.Builder == serving.Retired }) // other tests' old storage dropped
		if len(res) != 1 || res[0].Status != serving.Built {
			t.Fatalf("prepare: %+v", res)
		}
		return res[0]
	}
	prepare(false)
	m := startLogging(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Tiles.StorageRefresh = time.Second
		c.Layers = append(c.Layers, layer)
		// What is tested is the switch to the new storage, not the
		// statement budget: four clients and the rebuild share the CPUs,
		// and an overview tile priced at tens of milliseconds was cut at
		// timeout_floor (250 ms, a 503 timeout) on a loaded machine. Its
		// statements run under the layer's statement_timeout instead.
		// That a rebuild locks nothing a tile query reads is
		// serving's TestRebuildBesideAReader.
		c.Throttle.TimeoutFloor = 10 * time.Second
		roomy(c)
	}, slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	base := "http://" + m.Addr()
	builtAt := func() string {
		_, body := fetch(t, http.MethodGet, base+"/tiles/"+name+".json")
		i := bytes.Index(body, []byte(`"built_at":"`))
		if i < 0 {
			t.Fatalf("no built_at in %s", short(body))
		}
		return string(body[i : i+40])
	}
	first := builtAt()

	var addrs []string
	for z := range 7 { // the overviews' zooms
		addrs = append(addrs, tileURL(base, name, maptile.At(berlinCentre, maptile.Zoom(z)))) // each holds points
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for c := range 4 {
		wg.Go(func() {
			for i := c; ctx.Err() == nil; i++ {
				status := -1 // no response at all
				if resp, err := rawClient.Get(addrs[i%len(addrs)]); err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
					if status != http.StatusOK {
						t.Logf("%d: %s", status, body)
					}
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		})
	}
	for range 3 {
		prepare(true)
	}
	stop()
	wg.Wait()
	if len(statuses) != 1 || statuses[http.StatusOK] < 20 {
		t.Errorf("responses while prepare rebuilt the overviews three times: %v, want only 200s (at least 20)", statuses)
	}
	deadline := time.Now().Add(10 * time.Second)
	for builtAt() == first {
		if time.Now().After(deadline) {
			t.Fatalf("serve still reads the overviews built at %s 10 s after they were replaced", first)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("tile responses during three rebuilds: %v", statuses)

	// The storage's age is exported: checked by the last prepare, seconds ago.
	_, metrics := fetch(t, http.MethodGet, base+"/metrics")
	age := `geotoll_tile_storage_age_seconds{builder="overview",layer="` + name + `"} `
	missing := `geotoll_tile_overviews_missing{layer="` + name + `"} 0`
	var sawAge bool
	for line := range strings.Lines(string(metrics)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), age); ok {
			f, err := strconv.ParseFloat(v, 64)
			sawAge = err == nil && f >= 0 && f < 60
		}
	}
	if !sawAge || !strings.Contains(string(metrics), missing) {
		t.Errorf("metrics lack a fresh %q or %q", age, missing)
	}
}

// demoPrepared builds the demo layers' serving storage once per test
// binary (`make testdb` has built it already; then it is current and this
// is quick). Tests that start with it read the overviews.
var demoPrepared = sync.OnceValue(func() []serving.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("GEOTOLL_TEST_DATABASE_URL"))
	if err != nil {
		return []serving.Result{{Status: serving.Failed, Err: err}}
	}
	defer pool.Close()
	cat, _, err := DefaultConfig().catalog()
	if err != nil {
		return []serving.Result{{Status: serving.Failed, Err: err}}
	}
	return serving.Prepare(ctx, pool, cat.Layers(), serving.Options{})
})

func prepareDemo(t *testing.T) {
	t.Helper()
	testenv.DatabaseURL(t) // skips or fails without the database
	for _, r := range demoPrepared() {
		if r.Status == serving.Failed && r.Builder != serving.Retired { // other tests' old storage is theirs
			t.Fatalf("prepare the demo layers: %s: %v", r.Layer, r.Err)
		}
	}
}

// TestDemoTilesWithinBudget renders every z0–z3 tile of every demo layer,
// and every z4–z6 tile that holds data, from the layers' overviews: each
// is at most 500 KB of MVT, and a tile that holds data (the centre of the
// bounding box of a row the overviews were built from) is never empty.
func TestDemoTilesWithinBudget(t *testing.T) {
	t.Parallel()
	prepareDemo(t)
	owner, reader := testenv.Pool(t), testenv.ReadPool(t)
	cat, _, err := DefaultConfig().catalog()
	if err != nil {
		t.Fatal(err)
	}
	// The newest row each layer's overviews were built from, read before
	// the catalog picks its storage: a test that writes a fence and
	// prepares again meanwhile cannot put a row in the tiles expected to
	// hold data that the storage read here lacks.
	built := map[string]int64{}
	rows, err := owner.Query(t.Context(), `
		SELECT layer, max(split_part(source_signature, ':', 2)::bigint)
		FROM geotoll_serving.storage WHERE builder = 'overview' GROUP BY layer`)
	if err != nil {
		t.Fatal(err)
	}
	var layer string
	var newest int64
	if _, err := pgx.ForEachRow(rows, []any{&layer, &newest}, func() error { built[layer] = newest; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	store := tiles.NewStore(reader)
	for _, l := range cat.Layers() {
		largest, rendered := 0, 0
		for z := l.MinZoom; z <= 6; z++ {
			if src := l.Source(maptile.Zoom(z)); src.Builder != tiles.BuilderOverview {
				t.Fatalf("%s z%d reads %s, not an overview", l.Name, z, src.Relation.Sanitize())
			}
			withData := tilesWithData(t, owner, l, maptile.Zoom(z), built[l.Name])
			if len(withData) == 0 {
				t.Fatalf("%s z%d: no tile holds data", l.Name, z)
			}
			check := withData
			if z <= 3 { // every tile
				check = nil
				for x := range uint32(1) << z {
					for y := range uint32(1) << z {
						check = append(check, maptile.New(x, y, maptile.Zoom(z)))
					}
				}
			}
			for _, tile := range check {
				r, err := store.Render(t.Context(), []*tiles.Layer{l}, tile)
				if err != nil {
					t.Fatalf("%s %v: %v", l.Name, tile, err)
				}
				rendered++
				largest = max(largest, len(r.MVT))
				if len(r.MVT) > tiles.DefaultMaxTileBytes {
					t.Errorf("%s %v: %d bytes, over the 500 KB budget", l.Name, tile, len(r.MVT))
				}
				if len(r.MVT) == 0 && slices.Contains(withData, tile) {
					t.Errorf("%s %v holds data but its tile is empty", l.Name, tile)
				}
			}
		}
		t.Logf("%s: %d tiles z%d–z6, the largest %d bytes", l.Name, rendered, l.MinZoom, largest)
	}
}

// tilesWithData lists the tiles of zoom z that hold the centre of the
// bounding box (Box2D, as the tile query reads it) of a row of l's table
// written no later than transaction newest (the rows the overviews were
// built from: not those other tests write meanwhile).
func tilesWithData(t *testing.T, owner *pgxpool.Pool, l *tiles.Layer, z maptile.Zoom, newest int64) []maptile.Tile {
	t.Helper()
	rows, err := owner.Query(t.Context(), `
		SELECT DISTINCT floor(((ST_XMin(b) + ST_XMax(b)) / 2 + $1::float8) / $2::float8)::bigint,
		                floor(($1::float8 - (ST_YMin(b) + ST_YMax(b)) / 2) / $2::float8)::bigint
		FROM (SELECT Box2D(t.`+pgx.Identifier{l.GeometryColumn}.Sanitize()+`) AS b FROM `+l.TableIdent().Sanitize()+` AS t
		      WHERE t.xmin::text::bigint <= $3) AS q`,
		tiles.TileWidth(0)/2, tiles.TileWidth(z), newest)
	if err != nil {
		t.Fatal(err)
	}
	var out []maptile.Tile
	var x, y int64
	_, err = pgx.ForEachRow(rows, []any{&x, &y}, func() error {
		if n := int64(1) << z; x >= 0 && y >= 0 && x < n && y < n {
			out = append(out, maptile.New(uint32(x), uint32(y), z))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// `geotoll prepare` as the binary runs it: a second run finds the demo
// layer's overviews and pieces current (districts: no test writes that
// table); a layer it does
// not know and a silly interval are errors.
func TestPrepareCommand(t *testing.T) {
	t.Parallel()
	prepareDemo(t)
	flags := []string{"-database-admin-url", testenv.DatabaseURL(t), "-log-level", "error"}
	out, err := runCommand(t.Context(), append(flags, "prepare", "-layer", "districts")...)
	if err != nil {
		t.Fatalf("prepare: %v\n%s", err, out)
	}
	lines := slices.DeleteFunc(strings.Split(strings.TrimSpace(out), "\n"), func(l string) bool {
		return strings.HasPrefix(l, "- ") // other tests' retired storage, dropped
	})
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "layer") {
		t.Fatalf("report:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 4 || f[0] != "districts" || f[1] != "overview" || f[2] != "unchanged" || f[3] != "4" {
		t.Errorf("report line %q, want districts overview unchanged 4 (relations)", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 7 || f[0] != "districts" || f[1] != "subdivide" || f[2] != "unchanged" || f[3] != "1" {
		t.Errorf("report line %q, want districts subdivide unchanged 1 (relation)", lines[2])
	}
	for args, want := range map[[3]string]string{
		{"prepare", "-layer", "nope"}:             `no layer "nope"`,
		{"prepare", "-every", "10ms"}:             "-every 10ms",
		{"prepare", "-retain", "59s"}:             "twice tiles.storage_refresh (30s)",
		{"prepare", "-prune", "-layer=districts"}: "with -layer, it would not know the others",
	} {
		if _, err := runCommand(t.Context(), append(flags, args[:]...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error saying %q", args, err, want)
		}
	}
}

// tWriter writes a server's log lines to the test's log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
