package tiles_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// countingRenderer renders a fixed tile (per layer list), counts renders
// and can hold them until released.
type countingRenderer struct {
	tiles map[string][]byte // by layer list; missing: bigTile
	err   error
	hold  chan struct{} // when set, renders wait for it (or their context)

	calls atomic.Int32
	ctxs  chan context.Context
}

func (c *countingRenderer) Tile(ctx context.Context, ls []*tiles.Layer, _ maptile.Tile) ([]byte, error) {
	c.calls.Add(1)
	if c.ctxs != nil {
		c.ctxs <- ctx
	}
	if c.hold != nil {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	if t, ok := c.tiles[strings.Join(names, ",")]; ok {
		return t, nil
	}
	return bigTile, nil
}

// bigTile is a compressible stand-in for an MVT (the handler never looks
// inside).
var bigTile = bytes.Repeat([]byte("\x1a\x10places feature "), 200)

// pricingGate admits everything and records what it was asked to price.
type pricingGate struct {
	mu      sync.Mutex
	demands []tiles.Demand
	refuse  bool
}

func (g *pricingGate) AdmitTile(w http.ResponseWriter, _ *http.Request, d tiles.Demand) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.demands = append(g.demands, d)
	if g.refuse {
		w.WriteHeader(http.StatusTooManyRequests)
		return false
	}
	return true
}

func (g *pricingGate) hits() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []bool
	for _, d := range g.demands {
		out = append(out, d.CacheHit)
	}
	return out
}

// countingObserver counts cache results.
type countingObserver struct {
	mu      sync.Mutex
	results map[string]int
	queries int
}

func (o *countingObserver) TileCache(result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.results == nil {
		o.results = map[string]int{}
	}
	o.results[result]++
}

func (o *countingObserver) TileQuery(string, maptile.Zoom, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queries++
}

func (o *countingObserver) count(result string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.results[result]
}

// tileRouter mounts a handler's routes as server.New does.
func tileRouter(h *tiles.Handler) http.Handler {
	r := mux.NewRouter()
	r.Handle("/tiles", h.Index())
	r.Handle("/tiles/{"+tiles.VarLayer+"}.json", h.TileJSON())
	r.Handle("/tiles/{"+tiles.VarLayer+"}/{"+tiles.VarZ+"}/{"+tiles.VarX+"}/{"+tiles.VarY+"}", h)
	return r
}

func newCache(t testing.TB, o tiles.CacheOptions) *tiles.Cache {
	t.Helper()
	c, err := tiles.NewCache(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type cachedHandler struct {
	h    http.Handler
	rend *countingRenderer
	gate *pricingGate
	obs  *countingObserver
}

func newCachedHandler(t testing.TB, rend *countingRenderer, o tiles.CacheOptions) *cachedHandler {
	t.Helper()
	if o.MaxBytes == 0 {
		o.MaxBytes = 1 << 20
	}
	c := &cachedHandler{rend: rend, gate: &pricingGate{}, obs: &countingObserver{}}
	c.h = tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, demoLayers()...), Store: rend, Gate: c.gate, Logger: discardLogger(),
		Cache: newCache(t, o), Observer: c.obs,
	})
	return c
}

func (c *cachedHandler) get(path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	return w
}

func gunzip(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

const z14 = "/tiles/places/14/8802/5373.mvt"

func TestCacheMissThenHit(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	first := c.get(z14)
	second := c.get(z14)
	for i, w := range []*httptest.ResponseRecorder{first, second} {
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), bigTile) {
			t.Fatalf("request %d: %d, %d bytes", i+1, w.Code, w.Body.Len())
		}
	}
	if got := first.Header().Get("X-Cache"); got != "MISS" {
		t.Errorf("first X-Cache %q, want MISS", got)
	}
	if got := second.Header().Get("X-Cache"); got != "HIT" {
		t.Errorf("second X-Cache %q, want HIT", got)
	}
	if n := c.rend.calls.Load(); n != 1 {
		t.Errorf("rendered %d times, want 1", n)
	}
	if got := c.gate.hits(); !slices.Equal(got, []bool{false, true}) {
		t.Errorf("gate priced CacheHit %v, want [false true]: the hit must be priced as one", got)
	}
	if first.Header().Get("ETag") == "" || first.Header().Get("ETag") != second.Header().Get("ETag") {
		t.Errorf("ETags %q and %q: want one stable ETag", first.Header().Get("ETag"), second.Header().Get("ETag"))
	}
	if c.obs.count("miss") != 1 || c.obs.count("hit") != 1 {
		t.Errorf("observer saw %v", c.obs.results)
	}
}

// A request with Cache-Control: no-cache is rendered afresh and priced as a
// miss, and its render replaces the cached tile.
func TestCacheNoCacheRendersAfresh(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	c.get(z14)
	fresh := c.get(z14, "Cache-Control", "no-cache")
	after := c.get(z14)
	if fresh.Code != http.StatusOK || fresh.Header().Get("X-Cache") != "MISS" {
		t.Errorf("no-cache: %d, X-Cache %q, want 200 MISS", fresh.Code, fresh.Header().Get("X-Cache"))
	}
	if after.Header().Get("X-Cache") != "HIT" {
		t.Errorf("after the fresh render: X-Cache %q, want HIT", after.Header().Get("X-Cache"))
	}
	if n := c.rend.calls.Load(); n != 2 {
		t.Errorf("rendered %d times, want 2", n)
	}
	if got := c.gate.hits(); !slices.Equal(got, []bool{false, false, true}) {
		t.Errorf("gate priced CacheHit %v, want [false false true]: a fresh render is paid in full", got)
	}
}

// An If-Match or If-None-Match that does not parse (RFC 9110 §13.1.1–2:
// "*" alone, or entity tags separated by commas; at most 64) is a 400
// naming it, before the tile is priced or drawn — as on the fence routes.
// It was read leniently: "*" among tags, or tags without commas, gave a
// 304, and a 65th tag naming the tile a 412.
func TestConditionalHeadersThatDoNotParse(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	tag := c.get(z14).Header().Get("ETag")
	many := strings.Repeat(`"x", `, 64) + tag
	for _, tc := range []struct{ header, value string }{
		{"If-None-Match", `*, "x"`},
		{"If-None-Match", tag + ` "x"`},
		{"If-None-Match", "nonsense, " + tag},
		{"If-Match", many},
		{"If-Match", `w/` + tag},
	} {
		w := c.get(z14, tc.header, tc.value)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"param":"`+tc.header+`"`) {
			t.Errorf("%s: %s: %d %s, want a 400 naming %s", tc.header, tc.value, w.Code, w.Body, tc.header)
		}
	}
	if n := len(c.gate.hits()); n != 1 {
		t.Errorf("%d requests priced, want 1 (the first): a 400 is priced nothing", n)
	}
	if w := c.get(z14, "If-None-Match", `"x", `+tag); w.Code != http.StatusNotModified {
		t.Errorf("If-None-Match naming the tile among others: %d, want 304", w.Code)
	}
}

// The key is the layer list and the tile: another tile, another layer or
// another order of a composite is another entry.
func TestCacheKey(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	for _, p := range []string{
		z14, "/tiles/places/14/8802/5374.mvt", "/tiles/places/13/4401/2686.mvt",
		"/tiles/districts/14/8802/5373.mvt", "/tiles/places,districts/14/8802/5373.mvt",
		"/tiles/districts,places/14/8802/5373.mvt",
	} {
		if w := c.get(p); w.Header().Get("X-Cache") != "MISS" {
			t.Errorf("%s: X-Cache %q, want MISS", p, w.Header().Get("X-Cache"))
		}
	}
	// .pbf and .mvt are the same tile.
	if w := c.get("/tiles/places/14/8802/5373.pbf"); w.Header().Get("X-Cache") != "HIT" {
		t.Errorf(".pbf after .mvt: X-Cache %q, want HIT", w.Header().Get("X-Cache"))
	}
}

func TestCacheGzip(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	gz := c.get(z14, "Accept-Encoding", "gzip, deflate, br")
	plain := c.get(z14)
	refused := c.get(z14, "Accept-Encoding", "gzip;q=0, br")

	if gz.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", gz.Header().Get("Content-Encoding"))
	}
	if gz.Body.Len() >= len(bigTile) {
		t.Errorf("gzip body %d bytes, tile %d: not compressed", gz.Body.Len(), len(bigTile))
	}
	if !bytes.Equal(gunzip(t, gz.Body.Bytes()), bigTile) {
		t.Error("gzip body does not decompress to the tile")
	}
	if gz.Header().Get("Content-Length") != strconv.Itoa(gz.Body.Len()) {
		t.Errorf("Content-Length %q for %d gzip bytes", gz.Header().Get("Content-Length"), gz.Body.Len())
	}
	for name, w := range map[string]*httptest.ResponseRecorder{"no Accept-Encoding": plain, "gzip;q=0": refused} {
		if w.Header().Get("Content-Encoding") != "" || !bytes.Equal(w.Body.Bytes(), bigTile) {
			t.Errorf("%s: Content-Encoding %q, body %d bytes; want the plain tile", name, w.Header().Get("Content-Encoding"), w.Body.Len())
		}
	}
	for name, w := range map[string]*httptest.ResponseRecorder{"gzip": gz, "plain": plain} {
		if !slices.Contains(w.Header().Values("Vary"), "Accept-Encoding") {
			t.Errorf("%s: Vary %q lacks Accept-Encoding", name, w.Header().Values("Vary"))
		}
	}
	if gz.Header().Get("ETag") == plain.Header().Get("ETag") {
		t.Error("gzip and plain representations share one strong ETag")
	}
	if n := c.rend.calls.Load(); n != 1 {
		t.Errorf("rendered %d times for three encodings of one tile, want 1", n)
	}
	if plain.Header().Get("X-Cache") != "HIT" {
		t.Error("the plain representation was not served from the gzipped cache entry")
	}
}

// A tile too small to gain from gzip is sent as is, even to gzip clients.
func TestCacheSmallTileNotCompressed(t *testing.T) {
	t.Parallel()
	small := []byte{0x1a, 0x02, 0x78, 0x02}
	c := newCachedHandler(t, &countingRenderer{tiles: map[string][]byte{"places": small}}, tiles.CacheOptions{})
	for range 2 {
		w := c.get(z14, "Accept-Encoding", "gzip")
		if w.Header().Get("Content-Encoding") != "" || !bytes.Equal(w.Body.Bytes(), small) {
			t.Fatalf("small tile: Content-Encoding %q, body %x", w.Header().Get("Content-Encoding"), w.Body.Bytes())
		}
	}
}

// A client that refuses identity and accepts gzip gets gzip even where
// gzip does not pay — a tile too small for it, or a handler whose cache
// keeps no gzip form — with the ETag of the gzip form, and a 304 for it
// (RFC 9110 §12.5.3). A client that refuses both gets the tile as is.
func TestIdentityRefusedGetsGzip(t *testing.T) {
	t.Parallel()
	small := []byte{0x1a, 0x02, 0x78, 0x02}
	for _, tc := range []struct {
		name   string
		tile   []byte
		cached bool
	}{
		{"a tile too small for gzip", small, true},
		{"a handler without a cache", bigTile, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCachedHandler(t, &countingRenderer{tiles: map[string][]byte{"places": tc.tile}}, tiles.CacheOptions{})
			if !tc.cached {
				c.h = tileRouter(&tiles.Handler{Catalog: newCatalog(t, demoLayers()...), Store: c.rend, Gate: c.gate, Logger: discardLogger()})
			}
			for _, ae := range []string{"identity;q=0, gzip", "*;q=0, gzip;q=0.5", "identity;q=0, *"} {
				w := c.get(z14, "Accept-Encoding", ae)
				if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "gzip" {
					t.Fatalf("Accept-Encoding %q: %d, Content-Encoding %q, want gzip", ae, w.Code, w.Header().Get("Content-Encoding"))
				}
				if !bytes.Equal(gunzip(t, w.Body.Bytes()), tc.tile) || w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
					t.Errorf("Accept-Encoding %q: body does not decompress to the tile, or Content-Length %q for %d bytes",
						ae, w.Header().Get("Content-Length"), w.Body.Len())
				}
				etag := w.Header().Get("ETag")
				if !strings.HasSuffix(etag, `-gz4"`) {
					t.Errorf("Accept-Encoding %q: ETag %s, want the gzip form's", ae, etag)
				}
				if nm := c.get(z14, "Accept-Encoding", ae, "If-None-Match", etag); nm.Code != http.StatusNotModified {
					t.Errorf("Accept-Encoding %q, If-None-Match %s: %d, want 304", ae, etag, nm.Code)
				}
			}
			for _, ae := range []string{"identity;q=0", "*;q=0", "identity;q=0, gzip;q=0, br"} {
				w := c.get(z14, "Accept-Encoding", ae)
				if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "" || !bytes.Equal(w.Body.Bytes(), tc.tile) {
					t.Errorf("Accept-Encoding %q (no coding acceptable): %d, Content-Encoding %q; want the tile as is",
						ae, w.Code, w.Header().Get("Content-Encoding"))
				}
			}
		})
	}
}

func TestCacheNotModified(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	first := c.get(z14, "Accept-Encoding", "gzip")
	etag := first.Header().Get("ETag")
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		w := c.get(z14, "Accept-Encoding", "gzip", "If-None-Match", inm)
		if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: %d with %d bytes, want 304 without body", inm, w.Code, w.Body.Len())
		}
		if w.Header().Get("ETag") != etag || w.Header().Get("Cache-Control") == "" || w.Header().Get("X-Cache") != "HIT" {
			t.Errorf("304 headers: %v", w.Header())
		}
	}
	if w := c.get(z14, "If-None-Match", `"stale"`); w.Code != http.StatusOK {
		t.Errorf("stale ETag: %d, want 200", w.Code)
	}
	hits := c.gate.hits()
	if !slices.Equal(hits, []bool{false, true, true, true, true, true}) {
		t.Errorf("priced CacheHit %v: every 304 from the cache must be priced as a hit", hits)
	}
	if n := c.rend.calls.Load(); n != 1 {
		t.Errorf("rendered %d times, want 1", n)
	}
}

// A hit says how long ago its tile was drawn (Age, whole seconds), so
// that a cache downstream keeps it for max-age from the render; a miss,
// drawn for this answer, has none.
func TestCacheHitCarriesAge(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	start := time.Now()
	if w := c.get(z14); w.Header().Get("X-Cache") != "MISS" || w.Header().Get("Age") != "" {
		t.Fatalf("first request: X-Cache %q Age %q, want a miss without Age", w.Header().Get("X-Cache"), w.Header().Get("Age"))
	}
	time.Sleep(1100 * time.Millisecond)
	// Between 1 s and the time since the render began, whole seconds.
	checkAge := func(what string, w *httptest.ResponseRecorder) {
		t.Helper()
		age, err := strconv.Atoi(w.Header().Get("Age"))
		if most := int(time.Since(start) / time.Second); err != nil || age < 1 || age > most {
			t.Errorf("%s: X-Cache %q Age %q, want a hit aged 1..%d s", what, w.Header().Get("X-Cache"), w.Header().Get("Age"), most)
		}
	}
	hit := c.get(z14)
	if hit.Header().Get("X-Cache") != "HIT" {
		t.Fatalf("X-Cache %q, want HIT", hit.Header().Get("X-Cache"))
	}
	checkAge("a hit", hit)
	w := c.get(z14, "If-None-Match", hit.Header().Get("ETag"))
	if w.Code != http.StatusNotModified {
		t.Fatalf("If-None-Match of the hit: %d, want 304", w.Code)
	}
	checkAge("a 304 from the cache", w)
}

// If-Match is evaluated before If-None-Match, by strong comparison (RFC
// 9110 §13.1.1): the tile's own ETag in the coding sent, or "*", is
// answered as without it; another tag, a weak one, or the other coding's
// is a 412 problem.
func TestTileIfMatch(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	identity := c.get(z14).Header().Get("ETag")
	gz := c.get(z14, "Accept-Encoding", "gzip").Header().Get("ETag")
	if identity == gz || identity == "" {
		t.Fatalf("ETags %s and %s: the test needs two", identity, gz)
	}
	for _, tc := range []struct {
		ifMatch, acceptEncoding string
		want                    int
	}{
		{identity, "", http.StatusOK},
		{`"other", ` + identity, "", http.StatusOK},
		{"*", "", http.StatusOK},
		{gz, "gzip", http.StatusOK},
		{`"other"`, "", http.StatusPreconditionFailed},
		{"W/" + identity, "", http.StatusPreconditionFailed},
		{gz, "", http.StatusPreconditionFailed},
		{identity, "gzip", http.StatusPreconditionFailed},
	} {
		w := c.get(z14, "Accept-Encoding", tc.acceptEncoding, "If-Match", tc.ifMatch)
		if w.Code != tc.want {
			t.Errorf("If-Match %s, Accept-Encoding %q: %d, want %d", tc.ifMatch, tc.acceptEncoding, w.Code, tc.want)
		}
		if tc.want == http.StatusPreconditionFailed && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("If-Match %s: Content-Type %q, want a problem", tc.ifMatch, w.Header().Get("Content-Type"))
		}
	}
	// Before If-None-Match: a condition that fails is not a 304.
	if w := c.get(z14, "If-Match", `"other"`, "If-None-Match", identity); w.Code != http.StatusPreconditionFailed {
		t.Errorf("If-Match failing with If-None-Match matching: %d, want 412", w.Code)
	}
}

// A 304 for a tile the cache does not hold needs the render to know the
// ETag: it is a miss, priced in full.
func TestCacheNotModifiedAfterRender(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	etag := c.get(z14).Header().Get("ETag")
	fresh := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	w := fresh.get(z14, "If-None-Match", etag)
	if w.Code != http.StatusNotModified || w.Header().Get("X-Cache") != "MISS" {
		t.Fatalf("%d X-Cache %q, want 304 MISS (the ETag depends on the bytes alone)", w.Code, w.Header().Get("X-Cache"))
	}
	if hits := fresh.gate.hits(); !slices.Equal(hits, []bool{false}) {
		t.Errorf("priced CacheHit %v, want [false]", hits)
	}
}

func TestCacheEmptyTile(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{tiles: map[string][]byte{"places": nil}}, tiles.CacheOptions{})
	first, second := c.get(z14, "Accept-Encoding", "gzip"), c.get(z14)
	for i, w := range []*httptest.ResponseRecorder{first, second} {
		if w.Code != http.StatusNoContent || w.Body.Len() != 0 || w.Header().Get("Content-Encoding") != "" {
			t.Errorf("request %d: %d, %d bytes, Content-Encoding %q", i+1, w.Code, w.Body.Len(), w.Header().Get("Content-Encoding"))
		}
	}
	if second.Header().Get("X-Cache") != "HIT" || c.rend.calls.Load() != 1 {
		t.Errorf("empty tile not cached: X-Cache %q, %d renders", second.Header().Get("X-Cache"), c.rend.calls.Load())
	}
	if w := c.get(z14, "If-None-Match", first.Header().Get("ETag")); w.Code != http.StatusNotModified {
		t.Errorf("If-None-Match of an empty tile: %d, want 304", w.Code)
	}
}

func TestCacheErrorsAreNotCached(t *testing.T) {
	t.Parallel()
	rend := &countingRenderer{err: errors.New("database down")}
	c := newCachedHandler(t, rend, tiles.CacheOptions{})
	if w := c.get(z14); w.Code != http.StatusInternalServerError {
		t.Fatalf("failing render: %d", w.Code)
	}
	rend.err = nil
	if w := c.get(z14); w.Code != http.StatusOK || w.Header().Get("X-Cache") != "MISS" {
		t.Fatalf("after the failure: %d X-Cache %q, want a fresh render", w.Code, w.Header().Get("X-Cache"))
	}
}

func TestCacheRefusedHitSendsNothing(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{})
	c.get(z14)
	c.gate.refuse = true
	w := c.get(z14)
	if w.Code != http.StatusTooManyRequests || w.Body.Len() != 0 || w.Header().Get("ETag") != "" {
		t.Fatalf("refused hit: %d, %d bytes, ETag %q", w.Code, w.Body.Len(), w.Header().Get("ETag"))
	}
}

func TestCacheControlPerLayer(t *testing.T) {
	t.Parallel()
	layers := demoLayers()
	layers[0].MaxAge = 10 * time.Minute // places
	layers[1].MaxAge = 30 * time.Second // districts
	h := tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, layers...), Store: &countingRenderer{}, Gate: &pricingGate{},
		Logger: discardLogger(), Cache: newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20}),
	})
	for path, want := range map[string]string{
		z14:                                 "public, max-age=600",
		"/tiles/districts/14/8802/5373.mvt": "public, max-age=30",
		"/tiles/places,districts/14/8802/5373.mvt": "public, max-age=30",
		"/tiles/geofences/14/8802/5373.mvt":        "public, max-age=60",
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if got := w.Header().Get("Cache-Control"); got != want {
			t.Errorf("%s: Cache-Control %q, want %q", path, got, want)
		}
	}
}

// waitUntil polls cond for up to 5 s (synchronisation, not timing).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lone requester hanging up cancels its render.
func TestCacheLoneRequesterCancels(t *testing.T) {
	t.Parallel()
	rend := &countingRenderer{hold: make(chan struct{}), ctxs: make(chan context.Context, 1)}
	c := newCachedHandler(t, rend, tiles.CacheOptions{})
	ctx, hangUp := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, z14, nil).WithContext(ctx))
	}()
	renderCtx := testenv.Receive(t, rend.ctxs, "the render to start")
	hangUp()
	testenv.Receive(t, done, "the request to return after its client hung up")
	select {
	case <-renderCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the render went on after its only requester hung up")
	}
}

// The render of a shared tile is bounded by its layers' statement timeout
// (plus grace), not by any one request.
func TestCacheSharedRenderHasADeadline(t *testing.T) {
	t.Parallel()
	rend := &countingRenderer{ctxs: make(chan context.Context, 1)}
	c := newCachedHandler(t, rend, tiles.CacheOptions{})
	c.get(z14)
	ctx := testenv.Receive(t, rend.ctxs, "the render to start")
	dl, ok := ctx.Deadline()
	if !ok {
		t.Fatal("the render's context has no deadline")
	}
	if left := time.Until(dl); left <= 0 || left > tiles.DefaultStatementTimeout+10*time.Second {
		t.Errorf("render deadline in %s, want about the statement timeout (2 s) plus grace", left)
	}
}

func TestCacheInvalidateLayer(t *testing.T) {
	t.Parallel()
	cache := newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20})
	h := tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, demoLayers()...), Store: &countingRenderer{}, Gate: &pricingGate{},
		Logger: discardLogger(), Cache: cache,
	})
	get := func(p string) string {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
		return w.Header().Get("X-Cache")
	}
	paths := []string{z14, "/tiles/geofences,places/14/8802/5373.mvt", "/tiles/districts/14/8802/5373.mvt"}
	for _, p := range paths {
		get(p)
	}
	if n := cache.InvalidateLayer("places"); n != 2 {
		t.Errorf("InvalidateLayer(places) dropped %d tiles, want 2", n)
	}
	for p, want := range map[string]string{paths[0]: "MISS", paths[1]: "MISS", paths[2]: "HIT"} {
		if got := get(p); got != want {
			t.Errorf("%s after invalidating places: X-Cache %q, want %q", p, got, want)
		}
	}
}

func TestCacheExpires(t *testing.T) {
	t.Parallel()
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{TTL: 50 * time.Millisecond})
	c.get(z14)
	// Poll: expiry is due after 50 ms; the test waits for it, up to 5 s.
	waitUntil(t, "the tile to expire", func() bool { return c.get(z14).Header().Get("X-Cache") == "MISS" })
}

// A layer whose max_age is under the cache's TTL keeps its tiles in the
// cache no longer than its max_age: no hit goes out stale, with an Age at
// or past its Cache-Control max-age. Kept for the TTL, a tile of a layer
// of max_age 10 s went out at Age 17.
func TestCacheKeepsATileNoLongerThanItsMaxAge(t *testing.T) {
	t.Parallel()
	layers := demoLayers()
	for i := range layers {
		layers[i].MaxAge = time.Second
	}
	c := &cachedHandler{rend: &countingRenderer{}, gate: &pricingGate{}, obs: &countingObserver{}}
	c.h = tileRouter(&tiles.Handler{
		Catalog: newCatalog(t, layers...), Store: c.rend, Gate: c.gate, Logger: discardLogger(),
		Cache: newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20, TTL: time.Hour}), Observer: c.obs,
	})
	if w := c.get(z14); w.Header().Get("X-Cache") != "MISS" || w.Header().Get("Cache-Control") != "public, max-age=1" {
		t.Fatalf("first: X-Cache %q Cache-Control %q, want MISS and max-age=1", w.Header().Get("X-Cache"), w.Header().Get("Cache-Control"))
	}
	// Poll, up to 5 s: every hit meanwhile is younger than a second (no
	// Age), and the tile is rendered again after about one.
	waitUntil(t, "the tile to leave the cache", func() bool {
		w := c.get(z14)
		if age := w.Header().Get("Age"); age != "" {
			t.Fatalf("a hit with Age %s, max-age=1", age)
		}
		return w.Header().Get("X-Cache") == "MISS"
	})
}

// A tile rendered afresh (no-cache) is kept for the whole TTL from that
// render, not until the tile it replaced would have expired; adding a
// tile's gzip form does not make it younger.
func TestCacheTTLCountsFromTheLatestRender(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	c := newCachedHandler(t, &countingRenderer{}, tiles.CacheOptions{TTL: ttl})
	start := time.Now()
	c.get(z14)
	time.Sleep(time.Until(start.Add(ttl * 6 / 10)))
	if w := c.get(z14, "Cache-Control", "no-cache"); w.Header().Get("X-Cache") != "MISS" {
		t.Fatalf("no-cache: X-Cache %q, want MISS", w.Header().Get("X-Cache"))
	}
	refreshed := time.Now()
	time.Sleep(time.Until(start.Add(ttl * 12 / 10))) // past the first render's expiry
	w := c.get(z14, "Accept-Encoding", "gzip")       // a hit that adds the gzip form
	if time.Since(refreshed) < ttl && w.Header().Get("X-Cache") != "HIT" {
		t.Fatalf("%s after the fresh render, %s after the first: X-Cache %q, want HIT",
			time.Since(refreshed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), w.Header().Get("X-Cache"))
	}
	// The gzip form added then did not restart the TTL: past the fresh
	// render's TTL (at 1.6 × ttl from the start; 2.2 × had the gzip form
	// restarted it), the tile is rendered again. A late check only finds
	// it more expired.
	time.Sleep(time.Until(start.Add(ttl * 19 / 10)))
	if w := c.get(z14); w.Header().Get("X-Cache") != "MISS" {
		t.Errorf("%s after the fresh render: X-Cache %q, want MISS: adding the gzip form made the tile younger",
			time.Since(refreshed).Round(time.Millisecond), w.Header().Get("X-Cache"))
	}
}

func TestNewCacheRejects(t *testing.T) {
	t.Parallel()
	for _, o := range []tiles.CacheOptions{{MaxBytes: -1}, {TTL: -time.Second}} {
		if _, err := tiles.NewCache(o); err == nil {
			t.Errorf("NewCache(%+v) accepted", o)
		}
	}
}

// A render under way when a layer is invalidated (its table was written)
// keeps nothing: its tile, drawn from before the write, is not cached, and
// a request that comes after the invalidation renders afresh instead of
// waiting for it.
func TestCacheInvalidateLayerDuringARender(t *testing.T) {
	t.Parallel()
	setup := func() (*countingRenderer, *tiles.Cache, func() *httptest.ResponseRecorder) {
		rend := &countingRenderer{hold: make(chan struct{}), ctxs: make(chan context.Context, 2)}
		t.Cleanup(func() { // free renders still held when the test failed
			select {
			case <-rend.hold:
			default:
				close(rend.hold)
			}
		})
		cache := newCache(t, tiles.CacheOptions{MaxBytes: 1 << 20})
		h := tileRouter(&tiles.Handler{
			Catalog: newCatalog(t, demoLayers()...), Store: rend, Gate: &pricingGate{},
			Logger: discardLogger(), Cache: cache,
		})
		get := func() *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, z14, nil))
			return w
		}
		return rend, cache, get
	}
	t.Run("its tile is not kept", func(t *testing.T) {
		rend, cache, get := setup()
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- get() }()
		testenv.Receive(t, rend.ctxs, "the first render to start")
		cache.InvalidateLayer("places")
		close(rend.hold)
		testenv.Receive(t, done, "the first request to answer")
		if w := get(); w.Header().Get("X-Cache") != "MISS" || rend.calls.Load() != 2 {
			t.Errorf("after the invalidation: X-Cache %q, %d renders; want a MISS, rendered again", w.Header().Get("X-Cache"), rend.calls.Load())
		}
	})
	t.Run("a later request does not wait for it", func(t *testing.T) {
		rend, cache, get := setup()
		done := make(chan *httptest.ResponseRecorder, 2)
		go func() { done <- get() }()
		testenv.Receive(t, rend.ctxs, "the first render to start")
		cache.InvalidateLayer("places")
		go func() { done <- get() }()
		testenv.Receive(t, rend.ctxs, "a second render, of the request after the invalidation")
		close(rend.hold)
		testenv.Receive(t, done, "the first request to answer")
		testenv.Receive(t, done, "the second request to answer")
		if w := get(); w.Header().Get("X-Cache") != "HIT" {
			t.Errorf("the render after the invalidation was not kept: X-Cache %q", w.Header().Get("X-Cache"))
		}
	})
}
