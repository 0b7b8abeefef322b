package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// The verification session, for the geofence API, on the whole
// server with the real PostGIS and Redis: twenty 10 m radius checks with one
// key all pass (about 1.2 tokens each of a 100-token bucket); with a fresh
// key a 50 km check passes once and the second is refused with 429 and an
// honest Retry-After (it costs MaxCost, 60).
func TestEndToEndGeofenceVerification(t *testing.T) {
	t.Parallel()
	key, heavy := createKey(t, "free"), createKey(t, "free")
	base, _ := startServer(t, sizePrices)

	cheap := base + "/geofence/within?layer=places&lng=13.4&lat=52.5&radius=10"
	for i := range 20 {
		resp, body := get(t, cheap, key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("radius=10 request %d: %d %s", i+1, resp.StatusCode, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/geo+json" {
			t.Fatalf("Content-Type %q", ct)
		}
		if resp.Header.Get("X-Request-Cost") != "1.212" || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("budget headers %v", resp.Header)
		}
	}

	expensive := base + "/geofence/within?layer=places&lng=13.4&lat=52.5&radius=50000"
	resp, body := get(t, expensive, heavy)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first radius=50000: %d %s", resp.StatusCode, body)
	}
	var fc struct {
		Type     string
		Features []struct{ Properties map[string]any }
	}
	if err := json.Unmarshal(body, &fc); err != nil || fc.Type != "FeatureCollection" || len(fc.Features) != 100 {
		t.Fatalf("radius=50000 around Berlin: %v, %d features (want the default limit, 100)", err, len(fc.Features))
	}
	resp, body = get(t, expensive, heavy)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("second radius=50000: %d %s", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("X-RateLimit-Remaining") == "" {
		t.Errorf("429 without budget headers: %v", resp.Header)
	}
}

func TestEndToEndGeofenceBadInputIsNotPriced(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, sizePrices)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/geofence/within?layer=places&lng=NaN&lat=52.5&radius=10", 400},
		{"/geofence/within?layer=places&lng=13.4&lat=52.5&radius=0x1p3", 400},
		{"/geofence/within?layer=places&lng=13.4&lat=52.5&radius=50001", 422},
		{"/geofence/within?layer=nope&lng=13.4&lat=52.5&radius=10", 404},
		{"/geofence/bbox?layer=places&bbox=0,0,50,50", 422},
		{"/geofence/contains?lng=13.4&lat=95", 422},
	} {
		resp, body := get(t, base+tc.path, "")
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d", tc.path, resp.StatusCode, body, tc.status)
		}
		if resp.Header.Get("X-Request-Cost") != "" {
			t.Errorf("%s: refused input was priced", tc.path)
		}
	}
	// A body in a content coding is refused before it is read or priced.
	req, _ := http.NewRequest(http.MethodPost, base+"/geofence/check", strings.NewReader(`{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`))
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Accept-Encoding") != "identity" || resp.Header.Get("X-Request-Cost") != "" {
		t.Errorf("gzip check body: %d %v %s, want an unpriced 415", resp.StatusCode, resp.Header, body)
	}
	resp, err = http.Post(base+"/geofence/check", "application/json", strings.NewReader(`{"points":[{"id":"v1","lng":13.4,"lat":52.5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Cost") != "1.05" || !strings.Contains(string(body), `"id":"v1"`) {
		t.Errorf("check: %d cost %q %s", resp.StatusCode, resp.Header.Get("X-Request-Cost"), body)
	}
}

// fenceWriterURL is the test database as geotoll_fence_writer.
func fenceWriterURL(t *testing.T) string {
	if u := os.Getenv("GEOTOLL_TEST_WRITER_DATABASE_URL"); u != "" {
		return u
	}
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("geotoll_fence_writer")
	return u.String()
}

// send sends one request with body and the given header pairs and returns
// the response with its body read.
func send(t *testing.T, method, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestEndToEndFenceAdmin(t *testing.T) {
	t.Parallel()
	const admin = "e2e-admin-key-0123456789"
	base, _ := startServer(t, func(c *Config) {
		c.Geofence.AdminKeys = []string{admin}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	do := func(method, path, key, body string) (*http.Response, []byte) {
		t.Helper()
		if key == "" {
			return send(t, method, base+path, body)
		}
		return send(t, method, base+path, body, "Authorization", "Bearer "+key)
	}
	fence := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[-20,-50],[-20,-49],[-19,-49],[-19,-50],[-20,-50]]]},"properties":{"name":"e2e"}}`
	if resp, _ := do(http.MethodPost, "/geofences", "", fence); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: %d", resp.StatusCode)
	}
	if resp, _ := do(http.MethodPost, "/geofences", "not-the-admin-key-000", fence); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	resp, body := do(http.MethodPost, "/geofences", admin, fence)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Request-Cost") != "" {
		t.Fatalf("create: %d %s (cost %q: admin calls are not priced)", resp.StatusCode, body, resp.Header.Get("X-Request-Cost"))
	}
	loc := resp.Header.Get("Location")
	t.Cleanup(func() { do(http.MethodDelete, loc, admin, "") })
	bowtie := `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[-20,-50],[-19,-49],[-19,-50],[-20,-49],[-20,-50]]]},"properties":{"name":"e2e"}}`
	if resp, body := do(http.MethodPut, loc, admin, bowtie); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "Self-intersection") {
		t.Errorf("invalid polygon: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(http.MethodDelete, loc, admin, ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: %d %s", resp.StatusCode, body)
	}

	// Without a writer database, reads work and writes answer 404.
	ro, _ := startServer(t, func(c *Config) { c.Geofence.AdminKeys = []string{admin} })
	req, _ := http.NewRequest(http.MethodPost, ro+"/geofences", strings.NewReader(fence))
	req.Header.Set("X-API-Key", admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "fence admin not configured") {
		t.Errorf("write without writer: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest(http.MethodGet, ro+"/geofences/1", nil)
	req.Header.Set("X-API-Key", admin)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("read without writer: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// The fence admin's reads answer HEAD as the tile routes do (RFC 9110
// §9.1: a general-purpose server supports GET and HEAD): the GET's status
// and headers, its ETag among them, without a body. At every fence admin
// path (the aliases too), each method the router refuses is a 405 whose
// Allow names exactly the methods it does not refuse, and OPTIONS answers
// that Allow. The server has no writer, so no method writes anything.
func TestEndToEndFenceAdminMethods(t *testing.T) {
	t.Parallel()
	const admin = "e2e-admin-key-0123456789"
	base, _ := startServer(t, func(c *Config) { c.Geofence.AdminKeys = []string{admin} })
	do := func(method, path string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		return send(t, method, base+path, "", append([]string{"X-API-Key", admin}, hdr...)...)
	}
	for _, path := range []string{"/geofence/fences", "/geofence/fences/1", "/geofences", "/geofences/1"} {
		one := !strings.HasSuffix(path, "fences") // a fence, not the list
		got, gotBody := do(http.MethodGet, path)
		head, headBody := do(http.MethodHead, path)
		if got.StatusCode != http.StatusOK || head.StatusCode != http.StatusOK || len(headBody) != 0 ||
			head.Header.Get("ETag") != got.Header.Get("ETag") || head.Header.Get("Content-Type") != got.Header.Get("Content-Type") {
			t.Errorf("HEAD %s: %d ETag %q Content-Type %q, %d bytes; GET: %d ETag %q Content-Type %q, %d bytes",
				path, head.StatusCode, head.Header.Get("ETag"), head.Header.Get("Content-Type"), len(headBody),
				got.StatusCode, got.Header.Get("ETag"), got.Header.Get("Content-Type"), len(gotBody))
		}
		if one {
			if resp, _ := do(http.MethodHead, path, "If-None-Match", got.Header.Get("ETag")); resp.StatusCode != http.StatusNotModified {
				t.Errorf("HEAD %s with If-None-Match its ETag: %d, want 304", path, resp.StatusCode)
			}
		}
		var served []string
		refused := map[string]string{}
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			resp, _ := do(m, path)
			if resp.StatusCode == http.StatusMethodNotAllowed {
				refused[m] = resp.Header.Get("Allow")
				continue
			}
			served = append(served, m)
		}
		allow := strings.Join(append(served, http.MethodOptions), ", ")
		want := "GET, HEAD, POST, OPTIONS"
		if one {
			want = "GET, HEAD, PUT, DELETE, OPTIONS"
		}
		if allow != want {
			t.Errorf("%s serves %s, want %s", path, allow, want)
		}
		for m, a := range refused {
			if a != allow {
				t.Errorf("%s %s: 405 Allow %q, but the methods not refused are %q", m, path, a, allow)
			}
		}
		if resp, _ := do(http.MethodOptions, path); resp.StatusCode != http.StatusNoContent || resp.Header.Get("Allow") != allow {
			t.Errorf("OPTIONS %s: %d Allow %q, want 204 %q", path, resp.StatusCode, resp.Header.Get("Allow"), allow)
		}
	}
}

// The fence admin's conditional requests end to end, every answer checked
// against openapi.json: the ETag of a creation, a 304 for a GET whose
// If-None-Match names it, a 412 for a PUT or DELETE whose If-Match names
// an ETag the fence has left behind (nothing written), a 400 for a
// malformed If-Match, and a new ETag from a PUT that held.
func TestEndToEndFenceConditionalWrites(t *testing.T) {
	t.Parallel()
	const admin = "e2e-admin-key-0123456789"
	base, _ := startServer(t, func(c *Config) {
		c.Geofence.AdminKeys = []string{admin}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	do := func(method, path, body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		return send(t, method, base+path, body, append([]string{"Authorization", "Bearer " + admin}, hdr...)...)
	}
	fence := func(name string) string {
		return `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[-18,-50],[-18,-49],[-17,-49],[-17,-50],[-18,-50]]]},"properties":{"name":"` + name + `"}}`
	}
	resp, body := do(http.MethodPost, "/geofence/fences", fence("e2e etag"))
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("ETag") == "" {
		t.Fatalf("create: %d ETag %q %s", resp.StatusCode, resp.Header.Get("ETag"), body)
	}
	loc, first := resp.Header.Get("Location"), resp.Header.Get("ETag")
	t.Cleanup(func() { do(http.MethodDelete, loc, "") })

	if resp, body := do(http.MethodGet, loc, "", "If-None-Match", first); resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != first {
		t.Errorf("GET If-None-Match %s: %d ETag %q %s, want 304", first, resp.StatusCode, resp.Header.Get("ETag"), body)
	}
	resp, body = do(http.MethodPut, loc, fence("e2e etag v2"), "If-Match", first)
	second := resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || second == "" || second == first {
		t.Fatalf("PUT If-Match %s: %d ETag %q %s", first, resp.StatusCode, second, body)
	}
	if resp, body := do(http.MethodPut, loc, fence("e2e etag lost"), "If-Match", first); resp.StatusCode != http.StatusPreconditionFailed ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "precondition-failed") {
		t.Errorf("PUT with the first ETag again: %d %s, want a 412 problem", resp.StatusCode, body)
	}
	if resp, body := do(http.MethodPut, loc, fence("e2e etag lost"), "If-Match", "e2e"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT with a malformed If-Match: %d %s, want 400", resp.StatusCode, body)
	}
	if resp, body := do(http.MethodDelete, loc, "", "If-Match", first); resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("DELETE with the first ETag: %d %s, want 412", resp.StatusCode, body)
	}
	if resp, body := do(http.MethodGet, loc, ""); resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != second ||
		!strings.Contains(string(body), "e2e etag v2") {
		t.Errorf("GET: %d ETag %q %s, want the second write, at %s", resp.StatusCode, resp.Header.Get("ETag"), body, second)
	}
	if resp, body := do(http.MethodDelete, loc, "", "If-Match", second); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE with the current ETag: %d %s", resp.StatusCode, body)
	}
}

// serve reads each geofence layer's storage at start-up: contains and
// check on a polygon layer answer at once (the demo districts, read from
// their table), a layer of points is a 422, priced nothing.
func TestEndToEndGeofenceLayerContainment(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, sizePrices)
	resp, body := get(t, base+"/geofence/contains?layer=districts&lng=13.4&lat=52.52", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"geometry":null`) || !strings.Contains(string(body), `"population"`) {
		t.Fatalf("contains on districts: %d %s", resp.StatusCode, body)
	}
	resp, body = get(t, base+"/geofence/contains?layer=places&lng=13.4&lat=52.52", "")
	if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get("X-Request-Cost") != "" {
		t.Errorf("contains on places: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestEndToEndFenceWriteShowsInItsTiles: the geofences tile layer reads
// what `geotoll prepare` built from the fence table (overviews up to z7,
// pieces above), yet a fence written through the fence admin shows in its
// tiles at once — created, renamed, deleted — at an overview zoom and a
// pieces zoom, alone and in a composite, and the tile cache, which held
// the tiles from before each write, never answers with them. The fence is
// in the prepared storage before it is renamed and deleted, so that what
// the storage holds is the old fence.
func TestEndToEndFenceWriteShowsInItsTiles(t *testing.T) {
	t.Parallel()
	prepareDemo(t)
	const admin = "e2e-admin-key-tiles-0123456789"
	key := createKey(t, "pro")
	m := startMain(t, func(c *Config) {
		c.Geofence.AdminKeys = []string{admin}
		c.Geofence.WriterDatabaseURL = fenceWriterURL(t)
	})
	base := "http://" + m.Addr()
	write := func(method, path, body string) (*http.Response, []byte) {
		t.Helper()
		return send(t, method, base+path, body, "X-API-Key", admin)
	}
	// The South Pacific, where no other test puts fences.
	centre := orb.Point{-140.5, -55.5}
	fence := func(name string) string {
		return `{"type":"Feature","geometry":{"type":"Polygon","coordinates":[[[-140.6,-55.6],[-140.4,-55.6],[-140.4,-55.4],[-140.6,-55.4],[-140.6,-55.6]]]},"properties":{"name":"` + name + `"}}`
	}
	var paths []string
	for _, z := range []maptile.Zoom{5, 10} {
		tile := maptile.At(centre, z)
		xyz := fmt.Sprintf("%d/%d/%d.mvt", z, tile.X, tile.Y)
		paths = append(paths, "/tiles/geofences/"+xyz, "/tiles/places,geofences/"+xyz)
	}
	// names returns, per tile of server base, the names of the fences
	// with id in it.
	names := func(base, id string) map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, p := range paths {
			resp, body := get(t, base+p, key)
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
				t.Fatalf("GET %s: %d %s", p, resp.StatusCode, short(body))
			}
			for _, l := range decode(t, body) {
				for _, f := range l.Features {
					if l.Name == "geofences" && fmt.Sprint(f.ID) == id {
						out[p] = append(out[p], fmt.Sprint(f.Properties["name"]))
					}
				}
			}
		}
		return out
	}
	// want checks every tile of server base twice: the second answer is
	// the cache's, which the next write must not leave standing.
	want := func(base, when, id string, name ...string) {
		t.Helper()
		for range 2 {
			got := names(base, id)
			for _, p := range paths {
				if !slices.Equal(got[p], name) {
					t.Errorf("%s, %s holds fence %s named %q, want %q", when, p, id, got[p], name)
				}
			}
		}
	}
	// Another replica, which serves tiles and writes no fence: it sees
	// another's writes at its next storage refresh.
	other := startMain(t, nil)
	// prepare builds the geofences layer's storage, as `geotoll prepare`
	// does. When the test ends, once the fence is deleted, it runs again:
	// the storage is then built from the fence table without the fence, as
	// other tests expect it (the geofence layer's pieces, which contains
	// and check read).
	owner := testenv.Pool(t)
	fences := m.TileCatalog.Layer("geofences")
	prepared := false
	prepare := func() {
		prepared = true
		for _, r := range serving.Prepare(context.Background(), owner, []*tiles.Layer{fences}, serving.Options{}) {
			if r.Status == serving.Failed && r.Builder != serving.Retired {
				t.Errorf("prepare geofences: %s: %v", r.Builder, r.Err)
			}
		}
	}
	names(base, "") // the tiles as they were, cached
	name := "tiles e2e " + strconv.FormatInt(time.Now().UnixNano(), 36)
	resp, body := write(http.MethodPost, "/geofence/fences", fence(name))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	id := loc[strings.LastIndex(loc, "/")+1:]
	t.Cleanup(func() {
		write(http.MethodDelete, loc, "")
		if prepared {
			prepare()
		}
	})
	want(base, "after create", id, name)

	// `geotoll prepare` puts the fence in the layer's storage, and the
	// server reads it (as its storage refresh would).
	for _, l := range []*tiles.Layer{fences} {
		prepare()
		m.refreshStorage(t.Context(), m.TileCatalog, m.TileCache)
		other.refreshStorage(t.Context(), other.TileCatalog, other.TileCache)
		t.Logf("geofences reads %s at z5, %s at z10 (the table when other tests wrote fences since)",
			l.Source(5).Relation.Sanitize(), l.Source(10).Relation.Sanitize())
	}
	want(base, "after prepare", id, name)
	otherBase := "http://" + other.Addr()
	want(otherBase, "on another replica, after prepare", id, name)

	if resp, body := write(http.MethodPut, loc, fence(name+" v2")); resp.StatusCode != http.StatusOK {
		t.Fatalf("replace: %d %s", resp.StatusCode, body)
	}
	want(base, "after replace", id, name+" v2")
	other.refreshStorage(t.Context(), other.TileCatalog, other.TileCache)
	want(otherBase, "on another replica, after replace and its storage refresh", id, name+" v2")
	if resp, body := write(http.MethodDelete, loc, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.StatusCode, body)
	}
	want(base, "after delete", id)
	other.refreshStorage(t.Context(), other.TileCatalog, other.TileCache)
	want(otherBase, "on another replica, after delete and its storage refresh", id)
}

// A priced geofence query answers HEAD as its GET (RFC 9110 §9.1: a
// general-purpose server supports GET and HEAD): the same status and
// headers — its price (X-Request-Cost) and budget among them — and no
// body. It was a 405.
func TestEndToEndGeofenceQueryAnswersHEAD(t *testing.T) {
	t.Parallel()
	key := createKey(t, "free")
	base, _ := startServer(t, sizePrices)
	url := base + "/geofence/within?layer=places&lng=13.4&lat=52.5&radius=10"
	getResp, _ := get(t, url, key)
	head, body := send(t, http.MethodHead, url, "", "X-API-Key", key)
	if head.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD within: %d, %d bytes; want 200 without a body", head.StatusCode, len(body))
	}
	for _, h := range []string{"Content-Type", "X-Request-Cost", "RateLimit-Policy", "Cache-Control"} {
		if head.Header.Get(h) != getResp.Header.Get(h) || head.Header.Get(h) == "" {
			t.Errorf("HEAD's %s %q, the GET's %q: want the same", h, head.Header.Get(h), getResp.Header.Get(h))
		}
	}
	if head.Header.Get("RateLimit") == "" {
		t.Error("the HEAD carries no RateLimit: it was not admitted through the budget")
	}
}
