package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
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
	"github.com/geotoll/geotoll/tiles"
)

// rawClient does not decompress gzip by itself (Go's default client does,
// and hides Content-Encoding), so tests see what the server sent.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 30 * time.Second}

// fetch sends one request with the given header pairs ("Host" sets the
// request's Host) and returns the response with its body read.
func fetch(t *testing.T, method, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", method, url, req.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// fetchServed is fetch of a tile that a loaded machine may answer with a
// 503 (its query cut at the statement budget the tile paid for) or a 429
// (slow queries settle dear, and the default budget runs out): it asks
// again after the Retry-After, as a map client would, at most 3 times in
// all. For tests of what a tile holds, not of how fast or how cheaply it
// is served.
func fetchServed(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		resp, body := fetch(t, http.MethodGet, url)
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests || attempt == 3 {
			return resp, body
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		t.Logf("%s: %d %s; asking again in %d s", url, resp.StatusCode, short(body), wait)
		time.Sleep(time.Duration(min(max(wait, 1), 5)) * time.Second)
	}
}

func cost(t *testing.T, resp *http.Response) float64 {
	t.Helper()
	c, err := strconv.ParseFloat(resp.Header.Get("X-Request-Cost"), 64)
	if err != nil {
		t.Fatalf("X-Request-Cost %q: %v", resp.Header.Get("X-Request-Cost"), err)
	}
	return c
}

var berlinCentre = orb.Point{13.405, 52.52}

func TestEndToEndTileCatalog(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	resp, body := fetch(t, http.MethodGet, base+"/tiles")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var doc struct {
		Layers []struct {
			Name, TileJSON, Tiles string
			MinZoom               int      `json:"minzoom"`
			Properties            []string `json:"properties"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range doc.Layers {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"places", "districts", "geofences"}) {
		t.Fatalf("layers %v", names)
	}
	d := doc.Layers[1]
	if d.TileJSON != base+"/tiles/districts.json" || d.Tiles != base+"/tiles/districts/{z}/{x}/{y}.mvt" || d.MinZoom != 4 ||
		!slices.Equal(d.Properties, []string{"name", "city", "population"}) {
		t.Errorf("districts %+v", d)
	}
	if resp.Header.Get("X-Request-Cost") != "" {
		t.Error("the catalog was priced")
	}
}

type tileJSONDoc struct {
	TileJSON     string    `json:"tilejson"`
	Tiles        []string  `json:"tiles"`
	MinZoom      int       `json:"minzoom"`
	MaxZoom      int       `json:"maxzoom"`
	Bounds       []float64 `json:"bounds"`
	Center       []float64 `json:"center"`
	VectorLayers []struct {
		ID      string            `json:"id"`
		Fields  map[string]string `json:"fields"`
		MinZoom int               `json:"minzoom"`
		MaxZoom int               `json:"maxzoom"`
	} `json:"vector_layers"`
}

func getTileJSON(t *testing.T, url string, hdr ...string) tileJSONDoc {
	t.Helper()
	resp, body := fetch(t, http.MethodGet, url, hdr...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var doc tileJSONDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestEndToEndTileJSON(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) { c.HTTP.TrustedProxies = []string{"127.0.0.1/32"} })
	doc := getTileJSON(t, base+"/tiles/places.json")
	// maxzoom is the data's deepest zoom, 16 by default: clients overzoom.
	if doc.TileJSON != "3.0.0" || !slices.Equal(doc.Tiles, []string{base + "/tiles/places/{z}/{x}/{y}.mvt"}) ||
		doc.MinZoom != 0 || doc.MaxZoom != 16 {
		t.Errorf("places: %+v", doc)
	}
	// Bounds from PostGIS: the demo cities span Anchorage to Auckland.
	if b := doc.Bounds; len(b) != 4 || !(b[0] < -149 && b[2] > 178 && b[1] < -37 && b[3] > 69) {
		t.Errorf("bounds %v", doc.Bounds)
	}
	if c := doc.Center; len(c) != 3 || c[0] < doc.Bounds[0] || c[0] > doc.Bounds[2] || c[2] < 0 || c[2] > 22 {
		t.Errorf("center %v", doc.Center)
	}
	if len(doc.VectorLayers) != 1 || doc.VectorLayers[0].ID != "places" {
		t.Fatalf("vector_layers %+v", doc.VectorLayers)
	}
	want := map[string]string{"name": "String", "kind": "String", "city": "String", "rank": "Number", "point_count": "Number"}
	if f := doc.VectorLayers[0].Fields; len(f) != len(want) || f["rank"] != "Number" || f["name"] != "String" || f["point_count"] != "Number" {
		t.Errorf("fields %v, want %v", f, want)
	}

	comp := getTileJSON(t, base+"/tiles/places,districts.json")
	if comp.MinZoom != 0 || comp.MaxZoom != 16 || comp.VectorLayers[1].MinZoom != 4 || len(comp.VectorLayers) != 2 || comp.VectorLayers[1].Fields["population"] != "Number" ||
		comp.Tiles[0] != base+"/tiles/places,districts/{z}/{x}/{y}.mvt" {
		t.Errorf("composite: %+v", comp)
	}

	// The test client is 127.0.0.1, trusted here: forwarded host and
	// scheme shape the URL.
	fwd := getTileJSON(t, base+"/tiles/places.json", "X-Forwarded-Host", "tiles.example.com", "X-Forwarded-Proto", "https")
	if fwd.Tiles[0] != "https://tiles.example.com/tiles/places/{z}/{x}/{y}.mvt" {
		t.Errorf("behind a trusted proxy: %q", fwd.Tiles)
	}
	// The proxies write X-Forwarded-For (the default): a Forwarded header is
	// the client's own, passed through.
	fwd = getTileJSON(t, base+"/tiles/places.json", "Forwarded", "host=evil.example;proto=https")
	if fwd.Tiles[0] != base+"/tiles/places/{z}/{x}/{y}.mvt" {
		t.Errorf("a client's Forwarded header chose the URL: %q", fwd.Tiles)
	}
	if resp, _ := fetch(t, http.MethodGet, base+"/tiles/nope.json"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown layer: %d", resp.StatusCode)
	}

}

// Without http.public_url, a Host whose port is not a port number is a
// 400 problem, never written into TileJSON's or the catalog's URLs.
func TestEndToEndTileJSONInvalidHost(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	for _, path := range []string{"/tiles/places.json", "/tiles"} {
		resp, body := fetch(t, http.MethodGet, base+path, "Host", "example.com:abc")
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" ||
			strings.Contains(string(body), "example.com:abc/") {
			t.Errorf("GET %s with Host example.com:abc: %d %q %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), short(body))
		}
	}
}

// With http.public_url, TileJSON and the catalog write every URL from it
// — whatever Host or forwarding headers a request carries, even from a
// trusted proxy — and do not Vary on the forwarding headers. They carry a
// weak ETag of their bytes, and an If-None-Match naming it is a 304.
func TestEndToEndTileJSONPublicURL(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) {
		c.BasePath = "/maps"
		c.HTTP.PublicURL = "https://tiles.example.com/maps"
		c.HTTP.TrustedProxies = []string{"127.0.0.1/32"}
	})
	for _, path := range []string{"/maps/tiles/places.json", "/maps/tiles"} {
		resp, body := fetch(t, http.MethodGet, base+path)
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(etag, `W/"`) {
			t.Fatalf("GET %s: %d ETag %q %s", path, resp.StatusCode, etag, short(body))
		}
		resp, body = fetch(t, http.MethodGet, base+path, "If-None-Match", `"other", `+strings.TrimPrefix(etag, "W/"))
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != etag ||
			!strings.HasPrefix(resp.Header.Get("Cache-Control"), "public") {
			t.Errorf("GET %s If-None-Match its ETag: %d ETag %q Cache-Control %q, %d bytes", path, resp.StatusCode,
				resp.Header.Get("ETag"), resp.Header.Get("Cache-Control"), len(body))
		}
	}
	for _, host := range []string{"", "evil.example", "example.com:abc"} {
		hdr := []string{"X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "http"}
		resp, body := fetch(t, http.MethodGet, base+"/maps/tiles/places.json", append([]string{"Host", host}, hdr...)...)
		var doc tileJSONDoc
		if err := json.Unmarshal(body, &doc); resp.StatusCode != http.StatusOK || err != nil ||
			!slices.Equal(doc.Tiles, []string{"https://tiles.example.com/maps/tiles/places/{z}/{x}/{y}.mvt"}) {
			t.Errorf("TileJSON, Host %q: %d %s", host, resp.StatusCode, short(body))
		}
		if vary := strings.Join(resp.Header.Values("Vary"), ","); strings.Contains(vary, "Forwarded") {
			t.Errorf("TileJSON Vary %q", vary)
		}
		resp, body = fetch(t, http.MethodGet, base+"/maps/tiles", append([]string{"Host", host}, hdr...)...)
		if resp.StatusCode != http.StatusOK ||
			!strings.Contains(string(body), `"tilejson":"https://tiles.example.com/maps/tiles/places.json"`) ||
			!strings.Contains(string(body), `"tiles":"https://tiles.example.com/maps/tiles/places/{z}/{x}/{y}.mvt"`) {
			t.Errorf("catalog, Host %q: %d %s", host, resp.StatusCode, short(body))
		}
	}
}

func TestEndToEndTileJSONIgnoresUntrustedForwarding(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil) // no trusted proxies
	doc := getTileJSON(t, base+"/tiles/places.json", "X-Forwarded-Host", "evil.example", "Forwarded", "host=evil.example;proto=https")
	if doc.Tiles[0] != base+"/tiles/places/{z}/{x}/{y}.mvt" {
		t.Errorf("forwarding headers from an untrusted client changed the URL: %q", doc.Tiles)
	}
}

// One request, several MVT layers, priced at the sum of their prices.
func TestEndToEndCompositeTile(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	tile := maptile.At(berlinCentre, 12)
	resp, body := fetchServed(t, tileURL(base, "places,districts", tile))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, short(body))
	}
	layers, err := mvt.Unmarshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range layers {
		names = append(names, l.Name)
		if len(l.Features) == 0 {
			t.Errorf("layer %s has no features in central Berlin", l.Name)
		}
	}
	if !slices.Equal(names, []string{"places", "districts"}) {
		t.Errorf("MVT layers %v", names)
	}
	// The estimates (the settled costs follow each query's own time).
	estimate := func(r *http.Response) float64 {
		v, err := strconv.ParseFloat(r.Header.Get("X-Request-Cost-Estimate"), 64)
		if err != nil {
			t.Fatalf("X-Request-Cost-Estimate %q", r.Header.Get("X-Request-Cost-Estimate"))
		}
		return v
	}
	sum := estimate(resp)
	p, _ := fetchServed(t, tileURL(base, "places", tile))
	d, _ := fetchServed(t, tileURL(base, "districts", tile))
	if want := estimate(p) + estimate(d); math.Abs(sum-want) > 0.002 || sum <= estimate(p) {
		t.Errorf("composite cost %v, want the sum %v", sum, want)
	}
	// Swapped order: another tile (layer order is part of it), same price.
	r2, body2 := fetchServed(t, tileURL(base, "districts,places", tile))
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("districts,places: %d %s", r2.StatusCode, short(body2))
	}
	l2, err := mvt.Unmarshal(body2)
	if err != nil || len(l2) != 2 || l2[0].Name != "districts" || r2.Header.Get("X-Cache") != "MISS" {
		t.Errorf("districts,places: %v, %d layers, X-Cache %q", err, len(l2), r2.Header.Get("X-Cache"))
	}
}

func TestEndToEndGzipETagAndCacheHitPricing(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, sizePrices)
	url := tileURL(base, "places", maptile.At(berlinCentre, 6)) // a z6 tile costs about 10 tokens

	miss, gz := fetch(t, http.MethodGet, url, "Accept-Encoding", "gzip")
	if miss.StatusCode != http.StatusOK || miss.Header.Get("X-Cache") != "MISS" || miss.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first: %d X-Cache %q Content-Encoding %q", miss.StatusCode, miss.Header.Get("X-Cache"), miss.Header.Get("Content-Encoding"))
	}
	if c := cost(t, miss); c < 5 {
		t.Fatalf("a z6 miss cost %v; the test needs a dear tile", c)
	}
	if !slices.Contains(miss.Header.Values("Vary"), "Accept-Encoding") {
		t.Errorf("Vary %q", miss.Header.Values("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}

	hit, plain := fetch(t, http.MethodGet, url)
	if hit.StatusCode != http.StatusOK || hit.Header.Get("X-Cache") != "HIT" || hit.Header.Get("Content-Encoding") != "" {
		t.Fatalf("second: %d X-Cache %q Content-Encoding %q", hit.StatusCode, hit.Header.Get("X-Cache"), hit.Header.Get("Content-Encoding"))
	}
	if !bytes.Equal(unzipped, plain) || len(gz) >= len(plain) {
		t.Errorf("gzip %d bytes → %d, plain %d: want the same tile, smaller", len(gz), len(unzipped), len(plain))
	}
	if ls, err := mvt.Unmarshal(plain); err != nil || len(ls) != 1 || len(ls[0].Features) == 0 {
		t.Errorf("cached tile does not decode: %v", err)
	}
	if c := cost(t, hit); c != 1 {
		t.Errorf("cache hit cost %v, want the base price 1", c)
	}
	if hit.Header.Get("ETag") == "" || hit.Header.Get("ETag") == miss.Header.Get("ETag") {
		t.Errorf("ETags gzip %q, plain %q: want two strong ETags", miss.Header.Get("ETag"), hit.Header.Get("ETag"))
	}

	// If-None-Match: 304, priced as a cache hit, budget headers and all.
	nm, body := fetch(t, http.MethodGet, url, "Accept-Encoding", "gzip", "If-None-Match", miss.Header.Get("ETag"))
	if nm.StatusCode != http.StatusNotModified || len(body) != 0 || nm.Header.Get("ETag") != miss.Header.Get("ETag") {
		t.Fatalf("If-None-Match: %d, %d bytes, ETag %q", nm.StatusCode, len(body), nm.Header.Get("ETag"))
	}
	if c := cost(t, nm); c != 1 || nm.Header.Get("X-RateLimit-Remaining") == "" || nm.Header.Get("X-Cache") != "HIT" {
		t.Errorf("304: cost %v, headers %v", c, nm.Header)
	}
	if stale, _ := fetch(t, http.MethodGet, url, "If-None-Match", `"stale"`); stale.StatusCode != http.StatusOK {
		t.Errorf("stale ETag: %d", stale.StatusCode)
	}
}

func TestEndToEndCORS(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil) // default: any origin, no credentials
	z14 := tileURL(base, "places", maptile.At(berlinCentre, 14))
	resp, _ := fetch(t, http.MethodGet, z14, "Origin", "https://maps.example.com")
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Cost") {
		t.Errorf("tile: %v", resp.Header)
	}
	pre, _ := fetch(t, http.MethodOptions, z14, "Origin", "https://maps.example.com",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-api-key")
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), "X-API-Key") || pre.Header.Get("X-Request-Cost") != "" {
		t.Errorf("preflight: %d %v", pre.StatusCode, pre.Header)
	}

	listed, _ := startServer(t, func(c *Config) {
		c.HTTP.CORS = CORSConfig{Origins: []string{"https://maps.example.com"}, Credentials: true}
	})
	ok, _ := fetch(t, http.MethodGet, listed+"/tiles", "Origin", "https://maps.example.com")
	if ok.Header.Get("Access-Control-Allow-Origin") != "https://maps.example.com" || ok.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("listed origin: %v", ok.Header)
	}
	other, _ := fetch(t, http.MethodGet, listed+"/tiles", "Origin", "https://evil.example")
	if other.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("unlisted origin allowed: %v", other.Header)
	}

	// "*" with credentials is refused at start-up.
	cfg := DefaultConfig()
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP.CORS.Credentials = true
	m := &Main{Config: cfg, Logger: quietLog(), ModelShelf: testShelf}
	if err := m.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "credentials") {
		m.Close()
		t.Errorf("Open with cors origins [*] and credentials: %v, want a refusal", err)
	}
}

// fixtureSchema makes a schema of the test's own, readable by the read
// role, dropped when the test ends; sql runs with {s} as the quoted schema.
func fixtureSchema(t *testing.T) (schema string, exec func(sql string)) {
	t.Helper()
	owner := testenv.Pool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "e2e_tiles_" + hex.EncodeToString(b[:])
	q := pgx.Identifier{schema}.Sanitize()
	exec = func(sql string) {
		t.Helper()
		if _, err := owner.Exec(context.Background(), strings.ReplaceAll(sql, "{s}", q)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("CREATE SCHEMA {s}")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := owner.Exec(ctx, "DROP SCHEMA "+q+" CASCADE"); err != nil {
			t.Errorf("drop %s: %v", schema, err)
		}
	})
	exec("GRANT USAGE ON SCHEMA {s} TO geotoll_reader")
	return schema, exec
}

// Opt-in discovery finds tables by themselves, hostile names included, and
// serves them like configured layers.
func TestEndToEndDiscovery(t *testing.T) {
	t.Parallel()
	schema, exec := fixtureSchema(t)
	exec(`CREATE TABLE {s}."we""ird; drop" (id bigint PRIMARY KEY, "la""bel; --" varchar(64), score int,
		geom geometry(Point, 4326))`)
	exec(`INSERT INTO {s}."we""ird; drop" SELECT g, 'p' || g, g, ST_SetSRID(ST_MakePoint(13.4 + g * 0.001, 52.52), 4326)
		FROM generate_series(1, 20) g`)
	exec(`CREATE TABLE {s}."'); DROP TABLE geotoll.places; --" (g geometry(Point, 3857))`)
	exec(`INSERT INTO {s}."'); DROP TABLE geotoll.places; --" VALUES (ST_Transform(ST_SetSRID(ST_MakePoint(13.405, 52.52), 4326), 3857))`)
	exec(`CREATE TABLE {s}.secret (id int PRIMARY KEY, g geometry(Point, 3857))`) // not granted: not served
	exec(`GRANT SELECT ON {s}."we""ird; drop", {s}."'); DROP TABLE geotoll.places; --" TO geotoll_reader`)

	base, _ := startServer(t, func(c *Config) { c.Tiles.Discover = DiscoverConfig{Schemas: []string{schema}, MaxFeatures: 500} })

	resp, body := fetch(t, http.MethodGet, base+"/tiles")
	var cat struct {
		Layers []struct {
			Name       string   `json:"name"`
			Properties []string `json:"properties"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(body, &cat); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v %s", resp.StatusCode, err, body)
	}
	props := map[string][]string{}
	for _, l := range cat.Layers {
		props[l.Name] = l.Properties
	}
	weird, drop := "we_ird__drop", "____DROP_TABLE_geotoll_places__--"
	if _, ok := props[weird]; !ok || props["secret"] != nil || len(cat.Layers) != 5 {
		t.Fatalf("catalog %+v: want the 3 configured layers, %q and %q", cat.Layers, weird, drop)
	}
	if _, ok := props[drop]; !ok {
		t.Fatalf("catalog %+v lacks %q", cat.Layers, drop)
	}
	// A point layer: its features carry point_count too.
	if !slices.Equal(props[weird], []string{`la"bel; --`, "score", "point_count"}) {
		t.Errorf("%s properties %q", weird, props[weird])
	}

	tile := maptile.At(orb.Point{13.41, 52.52}, 12)
	resp, body = fetch(t, http.MethodGet, tileURL(base, weird+","+drop, tile))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("discovered tile: %d %s", resp.StatusCode, short(body))
	}
	layers, err := mvt.Unmarshal(body)
	if err != nil || len(layers) != 2 || len(layers[1].Features) != 1 {
		t.Fatalf("MVT: %v %+v", err, layers)
	}
	// z12 clusters points into 8-px cells (153 m; these lie 111 m apart):
	// the counts the clusters carry add up to the 20 rows.
	points := 0
	for _, f := range layers[0].Features {
		n, _ := f.Properties["point_count"].(float64)
		points += int(n)
	}
	if points != 20 {
		t.Errorf("%s: %d features with point_count adding up to %d, want 20", weird, len(layers[0].Features), points)
	}
	if f := layers[0].Features[0]; f.ID == nil || f.Properties[`la"bel; --`] == nil || f.Properties["score"] == nil {
		t.Errorf("feature %+v", f)
	}
	if layers[1].Features[0].ID != nil {
		t.Errorf("a table without a key served feature id %v", layers[1].Features[0].ID)
	}
	doc := getTileJSON(t, base+"/tiles/"+weird+".json")
	if f := doc.VectorLayers[0].Fields; f[`la"bel; --`] != "String" || f["score"] != "Number" {
		t.Errorf("fields %v", f)
	}
	if b := doc.Bounds; len(b) != 4 || b[0] > 13.402 || b[2] < 13.419 || b[1] > 52.5201 || b[3] < 52.5199 {
		t.Errorf("bounds %v", b)
	}
	// The demo table the hostile name threatens is still there.
	var n int
	if err := testenv.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM geotoll.places").Scan(&n); err != nil || n == 0 {
		t.Fatalf("geotoll.places: %d rows, %v", n, err)
	}
}

// statementCalls counts executions of tile queries that mention marker,
// from pg_stat_statements.
func statementCalls(t *testing.T, owner *pgxpool.Pool, marker string) int64 {
	t.Helper()
	var n int64
	err := owner.QueryRow(context.Background(), `
		SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE strpos(query, $1) > 0 AND strpos(query, 'ST_AsMVT') > 0`, marker).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_statements: %v", err)
	}
	return n
}

// N concurrent requests for one uncached tile run one query, counted by
// PostgreSQL itself. The cache is off, so only coalescing can explain it.
func TestEndToEndConcurrentMissesRunOneQuery(t *testing.T) {
	t.Parallel()
	schema, exec := fixtureSchema(t)
	exec(`CREATE TABLE {s}.src (id bigint PRIMARY KEY, geom geometry(Point, 3857) NOT NULL)`)
	exec(`INSERT INTO {s}.src VALUES (1, ST_Transform(ST_SetSRID(ST_MakePoint(13.405, 52.52), 4326), 3857))`)
	// One row, one sleep: the query takes 3 s whatever plan it gets.
	exec(`CREATE VIEW {s}.slow AS SELECT s.id, s.geom FROM {s}.src s, (SELECT pg_sleep(3)) z`)
	exec(`GRANT SELECT ON {s}.slow TO geotoll_reader`)
	owner := testenv.Pool(t)
	before := statementCalls(t, owner, schema)

	base, _ := startServer(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Layers = append(c.Layers, LayerConfig{Layer: layerFor(schema+".slow", 10*time.Second)})
		// The view's one row looks cheap, and a request's statements run
		// for at most 4 × what it paid (or timeout_floor): let them sleep.
		c.Throttle.TimeoutFloor = 10 * time.Second
	})
	url := tileURL(base, "slow", maptile.At(berlinCentre, 14))
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, body := fetch(t, http.MethodGet, url)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cache") != "MISS" {
				t.Errorf("request %d: %d X-Cache %q %s", i, resp.StatusCode, resp.Header.Get("X-Cache"), short(body))
			}
		})
	}
	wg.Wait()
	if calls := statementCalls(t, owner, schema) - before; calls != 1 {
		t.Errorf("%d concurrent misses ran the tile query %d times (pg_stat_statements), want 1", n, calls)
	}
}

func TestEndToEndMetrics(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, sizePrices)
	z14 := tileURL(base, "places", maptile.At(berlinCentre, 14))
	fetch(t, http.MethodGet, z14)
	fetch(t, http.MethodGet, z14) // a hit
	// Two different z2 tiles cost 60 each: the second is refused (429).
	fetch(t, http.MethodGet, tileURL(base, "places", maptile.New(0, 1, 2)))
	if resp, _ := fetch(t, http.MethodGet, tileURL(base, "places", maptile.New(1, 1, 2))); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second z2: %d, want 429", resp.StatusCode)
	}
	fetch(t, http.MethodGet, base+"/no/such/route")

	resp, body := fetch(t, http.MethodGet, base+"/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	text := string(body)
	for _, want := range []string{
		`geotoll_http_requests_total{method="GET",route="/tiles/{layer}/{z}/{x}/{y}",status="200"} 3`,
		`geotoll_http_requests_total{method="GET",route="/tiles/{layer}/{z}/{x}/{y}",status="429"} 1`,
		`geotoll_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`geotoll_http_request_duration_seconds_count{route="/tiles/{layer}/{z}/{x}/{y}"} 4`,
		`geotoll_tokens_charged_total{layer="places",route="/tiles/{layer}/{z}/{x}/{y}",tier="anonymous",zoom="2"} 60`,
		`geotoll_tokens_charged_total{layer="places",route="/tiles/{layer}/{z}/{x}/{y}",tier="anonymous",zoom="14"}`,
		`geotoll_throttled_total{route="/tiles/{layer}/{z}/{x}/{y}",tier="anonymous"} 1`,
		`geotoll_priced_requests_total{outcome="refused",route="/tiles/{layer}/{z}/{x}/{y}",tier="anonymous"} 1`,
		`geotoll_tile_cache_requests_total{result="hit"} 1`,
		`geotoll_tile_cache_requests_total{result="miss"} 2`,
		`geotoll_tile_query_duration_seconds_count{layer="places",zoom="14"} 1`,
		`geotoll_tile_query_duration_seconds_count{layer="places",zoom="2"} 1`,
		`geotoll_tile_cache_entries `,
		`geotoll_tile_cache_bytes `,
		// The defaults: the requests' pool and the background's.
		`geotoll_db_pool_max_conns{pool="read"} ` + strconv.Itoa(int(DefaultConfig().Database.MaxConns)) + "\n",
		`geotoll_db_pool_max_conns{pool="background"} ` + strconv.Itoa(int(DefaultConfig().Database.BackgroundConns)) + "\n",
		`geotoll_db_pool_acquires_total{pool="read"}`,
		`geotoll_db_pool_acquires_total{pool="background"}`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// z14 cost: the miss at its full price plus the hit at 1.
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, `geotoll_tokens_charged_total{layer="places",route="/tiles/{layer}/{z}/{x}/{y}",tier="anonymous",zoom="14"} `) {
			v, err := strconv.ParseFloat(strings.Fields(line)[1], 64)
			if err != nil || v < 2 || v > 2.01 {
				t.Errorf("z14 tokens %q: want a miss (~1.0002) plus a hit (1)", line)
			}
		}
	}
}

// layerFor is a layer over table (schema.table, geometry column geom in
// EPSG:3857, no properties) named after the table.
func layerFor(table string, timeout time.Duration) tiles.Layer {
	name := table[strings.LastIndexByte(table, '.')+1:]
	return tiles.Layer{Name: name, Table: table, GeometryColumn: "geom", SRID: 3857, StatementTimeout: timeout}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// If-None-Match compares with the ETag of the representation the request
// selects (RFC 9110 §13.1.2): the gzip-coded tile's ETag does not validate
// the plain tile, nor the reverse. A 304 would tell a cache holding only
// the other coding's bytes that they are the response to a request that
// cannot decode them (or names, in its ETag, bytes the cache does not
// hold).
func TestEndToEndIfNoneMatchOfTheOtherCodingIsNotA304(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, sizePrices)
	url := tileURL(base, "places", maptile.At(berlinCentre, 9))
	gzResp, _ := fetch(t, http.MethodGet, url, "Accept-Encoding", "gzip")
	plainResp, plain := fetch(t, http.MethodGet, url)
	gzTag, plainTag := gzResp.Header.Get("ETag"), plainResp.Header.Get("ETag")
	if gzResp.Header.Get("Content-Encoding") != "gzip" || gzTag == "" || plainTag == "" || gzTag == plainTag {
		t.Fatalf("gzip %d %q ETag %q, plain %d ETag %q: the test needs a tile served in both codings",
			gzResp.StatusCode, gzResp.Header.Get("Content-Encoding"), gzTag, plainResp.StatusCode, plainTag)
	}
	// A client that does not take gzip, holding the gzip tile's ETag.
	resp, body := fetch(t, http.MethodGet, url, "If-None-Match", gzTag)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != plainTag || !bytes.Equal(body, plain) {
		t.Errorf("plain request, If-None-Match %s (gzip's): %d ETag %q, %d bytes; want 200 with the plain tile (ETag %s)",
			gzTag, resp.StatusCode, resp.Header.Get("ETag"), len(body), plainTag)
	}
	// A client that takes gzip, holding the plain tile's ETag.
	resp, body = fetch(t, http.MethodGet, url, "Accept-Encoding", "gzip", "If-None-Match", plainTag)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != gzTag || resp.Header.Get("Content-Encoding") != "gzip" || len(body) == 0 {
		t.Errorf("gzip request, If-None-Match %s (plain's): %d ETag %q %q, %d bytes; want 200 with the gzip tile (ETag %s)",
			plainTag, resp.StatusCode, resp.Header.Get("ETag"), resp.Header.Get("Content-Encoding"), len(body), gzTag)
	}
	// Each coding's own ETag still validates it.
	if resp, _ := fetch(t, http.MethodGet, url, "If-None-Match", plainTag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("plain request, its own ETag: %d, want 304", resp.StatusCode)
	}
	if resp, _ := fetch(t, http.MethodGet, url, "Accept-Encoding", "gzip", "If-None-Match", gzTag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("gzip request, its own ETag: %d, want 304", resp.StatusCode)
	}
}

// A layer reading prepared storage reports its age_seconds, which grows
// every second; the document's ETag is weak and ignores it (the same
// layer, zooms and URLs), so that a client revalidating a second later
// gets a 304 rather than the same document again.
func TestEndToEndTileJSONETagOutlivesTheStorageAge(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	for _, path := range []string{"/tiles/places.json", "/tiles"} {
		resp, body := fetch(t, http.MethodGet, base+path)
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != http.StatusOK || etag == "" || !strings.Contains(string(body), `"age_seconds":`) {
			t.Fatalf("GET %s: %d ETag %q, want a document reporting its storage's age: %s", path, resp.StatusCode, etag, short(body))
		}
		time.Sleep(1100 * time.Millisecond) // the age moves on a second
		resp, body = fetch(t, http.MethodGet, base+path, "If-None-Match", etag)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != etag {
			t.Errorf("GET %s If-None-Match %s a second later: %d ETag %q", path, etag, resp.StatusCode, resp.Header.Get("ETag"))
		}
	}
}

// The answers a cached tile and the documents give to conditions and
// from the cache are the ones the published document describes (every
// answer here passes the contract check launchMain installs): a tile
// hit's 412 carries none of the tile's own headers, an empty tile from
// the cache its Age, and a TileJSON 412 behind trusted proxies no Vary.
func TestEndToEndConditionalAndCachedAnswersMatchTheContract(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, func(c *Config) { c.HTTP.TrustedProxies = []string{"127.0.0.1/32"} })
	tile, empty := base+"/tiles/places/14/8802/5373.mvt", base+"/tiles/places/14/0/0.mvt"
	for _, url := range []string{tile, empty} {
		send(t, http.MethodGet, url, "")
	}
	time.Sleep(1100 * time.Millisecond) // the hits below are a second old: they carry Age
	resp, _ := send(t, http.MethodGet, tile, "", "If-Match", `"nope"`)
	if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Age") != "" || resp.Header.Get("X-Cache") != "" {
		t.Errorf("a hit asked with a failing If-Match: %d Age %q X-Cache %q, want a 412 without the tile's headers",
			resp.StatusCode, resp.Header.Get("Age"), resp.Header.Get("X-Cache"))
	}
	if resp, _ := send(t, http.MethodGet, empty, ""); resp.StatusCode != http.StatusNoContent || resp.Header.Get("Age") == "" {
		t.Errorf("an empty tile from the cache: %d Age %q, want 204 with its Age", resp.StatusCode, resp.Header.Get("Age"))
	}
	resp, _ = send(t, http.MethodGet, base+"/tiles/places.json", "", "If-Match", `"nope"`)
	if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Vary") != "" {
		t.Errorf("TileJSON with a failing If-Match behind a trusted proxy: %d Vary %q, want a 412 without Vary", resp.StatusCode, resp.Header.Get("Vary"))
	}
}
