package tiles

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
)

// heldRenderer renders tile once release closes, counting renders.
type heldRenderer struct {
	release chan struct{}
	calls   atomic.Int32
	ctxs    chan context.Context
}

func (h *heldRenderer) Tile(ctx context.Context, _ []*Layer, _ maptile.Tile) ([]byte, error) {
	h.calls.Add(1)
	h.ctxs <- ctx
	select {
	case <-h.release:
		return bytes.Repeat([]byte("feature "), 100), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type admitAll struct{}

func (admitAll) AdmitTile(http.ResponseWriter, *http.Request, Demand) bool { return true }

type resultCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *resultCounter) TileCache(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r]++
}

func (c *resultCounter) TileQuery(string, maptile.Zoom, time.Duration) {}

func internalHandler(t *testing.T, maxBytes int64, rend Renderer, obs Observer) (*Handler, http.Handler) {
	t.Helper()
	cat, err := NewCatalog([]Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(CacheOptions{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Catalog: cat, Store: rend, Gate: admitAll{}, Cache: cache, Observer: obs}
	r := mux.NewRouter()
	r.Handle("/tiles/{"+VarLayer+"}/{"+VarZ+"}/{"+VarX+"}/{"+VarY+"}", h)
	return h, r
}

const tilePath = "/tiles/places/14/8802/5373.mvt"

var tileKey = cacheKey{layers: "places", tile: maptile.New(8802, 5373, 14)}

// N concurrent misses of one tile run one render, with the cache and
// without it (max_bytes 0: coalescing alone); every request gets the tile.
func TestHandlerCoalescesConcurrentMisses(t *testing.T) {
	t.Parallel()
	for _, maxBytes := range []int64{1 << 20, 0} {
		rend := &heldRenderer{release: make(chan struct{}), ctxs: make(chan context.Context, 32)}
		obs := &resultCounter{n: map[string]int{}}
		h, srv := internalHandler(t, maxBytes, rend, obs)
		const n = 12
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil))
				if w.Code != http.StatusOK || w.Header().Get("X-Cache") != "MISS" || w.Body.Len() != 800 {
					t.Errorf("max_bytes %d: %d X-Cache %q, %d bytes", maxBytes, w.Code, w.Header().Get("X-Cache"), w.Body.Len())
				}
			})
		}
		testenv.Receive(t, rend.ctxs, "the render to start")
		waitFor(t, "every request to wait on the render", func() bool { return h.Cache.flights.waiting(flightKey{cacheKey: tileKey}) == n })
		close(rend.release)
		wg.Wait()
		if c := rend.calls.Load(); c != 1 {
			t.Errorf("max_bytes %d: %d concurrent misses rendered %d times, want 1", maxBytes, n, c)
		}
		if obs.n["miss"] != 1 || obs.n["shared"] != n-1 {
			t.Errorf("max_bytes %d: observed %v, want 1 miss and %d shared", maxBytes, obs.n, n-1)
		}
	}
}

// The request that started a render hangs up while another waits for the
// same tile: the render goes on and the other request gets the tile.
func TestHandlerSharedRenderSurvivesItsFirstRequester(t *testing.T) {
	t.Parallel()
	rend := &heldRenderer{release: make(chan struct{}), ctxs: make(chan context.Context, 4)}
	h, srv := internalHandler(t, 1<<20, rend, nil)
	ctx, hangUp := context.WithCancel(context.Background())
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tilePath, nil).WithContext(ctx))
	}()
	renderCtx := testenv.Receive(t, rend.ctxs, "the render to start")
	second := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil))
		second <- w
	}()
	waitFor(t, "the second request to join the render", func() bool { return h.Cache.flights.waiting(flightKey{cacheKey: tileKey}) == 2 })
	hangUp()
	testenv.Receive(t, firstDone, "the first request to return after it hung up")
	if err := renderCtx.Err(); err != nil {
		t.Fatalf("the shared render was cancelled with its first requester: %v", err)
	}
	close(rend.release)
	if w := testenv.Receive(t, second, "the second request's answer"); w.Code != http.StatusOK || w.Body.Len() != 800 {
		t.Fatalf("second request: %d, %d bytes", w.Code, w.Body.Len())
	}
	if c := rend.calls.Load(); c != 1 {
		t.Errorf("rendered %d times, want 1", c)
	}
}

// The cache stays within MaxBytes however many tiles pass through it.
func TestCacheBoundedInBytes(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	c, err := NewCache(CacheOptions{MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	tile := make([]byte, 4000) // incompressible enough: random-ish bytes
	for i := range tile {
		tile[i] = byte(i*7919 + i/3)
	}
	for i := range 500 {
		k := cacheKey{layers: "places", tile: maptile.New(uint32(i), 0, 14)}
		if _, _, err := c.load(context.Background(), k, false, 0, func(context.Context) (Rendered, error) { return Rendered{MVT: tile}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	c.store.CleanUp()
	if b := c.Bytes(); b > maxBytes || b == 0 {
		t.Errorf("cache holds %d bytes after 500 tiles, bound %d", b, maxBytes)
	}
	if n := c.Len(); n == 0 || n >= 500 {
		t.Errorf("cache holds %d tiles", n)
	}
}

// Compression only where it pays: clients that do not accept gzip never
// make the cache compress (nor hold a gzip form); the first gzip client
// compresses the tile once, every later one is served the same bytes; the
// entry is re-weighed for its gzip form without living any longer.
func TestCacheGzipsOncePerTileAndOnlyForGzipClients(t *testing.T) {
	t.Parallel()
	tile := bytes.Repeat([]byte("\x1a\x10places feature "), 200)
	h, srv := internalHandler(t, 1<<20, fixedTile(tile), nil)
	get := func(enc string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, tilePath, nil)
		if enc != "" {
			r.Header.Set("Accept-Encoding", enc)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	for range 3 {
		if w := get(""); w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "" || !bytes.Equal(w.Body.Bytes(), tile) {
			t.Fatalf("identity client: %d %q", w.Code, w.Header().Get("Content-Encoding"))
		}
	}
	e, ok := h.Cache.get(tileKey)
	if !ok {
		t.Fatal("the tile is not cached")
	}
	if e.gz.Load() != nil {
		t.Fatal("identity clients alone made the cache compress the tile")
	}
	h.Cache.store.CleanUp() // apply the pending writes to the weight
	before := h.Cache.Bytes()
	entry, _ := h.Cache.store.GetEntry(tileKey)
	expires := entry.ExpiresAtNano

	first := get("gzip")
	made := e.gz.Load()
	if first.Header().Get("Content-Encoding") != "gzip" || made == nil || !bytes.Equal(first.Body.Bytes(), *made) {
		t.Fatalf("first gzip client: Content-Encoding %q, gzip form kept: %v", first.Header().Get("Content-Encoding"), made != nil)
	}
	for range 3 {
		if w := get("gzip"); !bytes.Equal(w.Body.Bytes(), *made) || e.gz.Load() != made {
			t.Fatal("a later gzip client was not served the gzip form made for the first")
		}
	}
	h.Cache.store.CleanUp()
	if grown := h.Cache.Bytes() - before; grown != int64(len(*made)) {
		t.Errorf("the cache grew by %d bytes for a %d-byte gzip form", grown, len(*made))
	}
	if entry, _ := h.Cache.store.GetEntry(tileKey); entry.ExpiresAtNano != expires {
		t.Error("keeping the gzip form made the cached tile live longer")
	}
}

// A cache that keeps nothing compresses nothing: a gzip client gets the
// tile as rendered (with Vary, so a shared cache keeps the two apart), and
// the renderer's bytes themselves.
func TestCacheThatKeepsNothingSendsTilesAsRendered(t *testing.T) {
	t.Parallel()
	tile := bytes.Repeat([]byte("\x1a\x10places feature "), 200)
	_, srv := internalHandler(t, 0, fixedTile(tile), nil)
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, tilePath, nil)
		r.Header.Set("Accept-Encoding", "gzip, deflate, br")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "" || !bytes.Equal(w.Body.Bytes(), tile) ||
			w.Header().Get("Vary") != "Accept-Encoding" || w.Header().Get("X-Cache") != "MISS" {
			t.Fatalf("gzip client, nothing cached: %d, headers %v, %d bytes; want the %d-byte tile as rendered",
				w.Code, w.Header(), w.Body.Len(), len(tile))
		}
	}
}

// fixedTile renders every tile as the same bytes.
type fixedTile []byte

func (f fixedTile) Tile(context.Context, []*Layer, maptile.Tile) ([]byte, error) { return f, nil }

// A caller outside a share of the pool never joins a render started inside
// it (an anonymous caller's, which may wait for a slot of the anonymous
// share; a key's, of its own): a request without a share, or in another
// key's, for a tile an anonymous one is rendering renders it on its own,
// and a second anonymous request joins the first.
func TestHandlerRenderInShareNotJoinedFromOutside(t *testing.T) {
	t.Parallel()
	rend := &heldRenderer{release: make(chan struct{}), ctxs: make(chan context.Context, 4)}
	h, srv := internalHandler(t, 1<<20, rend, nil)
	share, key := pgcall.NewShare(1), pgcall.NewShare(1)
	in := func(s *pgcall.Share) context.Context {
		ctx, b := pgcall.WithBudget(context.Background())
		b.Join(s)
		return ctx
	}
	var wg sync.WaitGroup
	for _, ctx := range []context.Context{in(share), in(share), in(key), context.Background()} {
		wg.Go(func() {
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tilePath, nil).WithContext(ctx))
			if w.Code != http.StatusOK {
				t.Errorf("%d", w.Code)
			}
		})
	}
	testenv.Receive(t, rend.ctxs, "a render to start")
	testenv.Receive(t, rend.ctxs, "a second render to start")
	testenv.Receive(t, rend.ctxs, "a third render to start")
	waitFor(t, "the anonymous requests to share one render, the key's and the unshared one each their own", func() bool {
		return h.Cache.flights.waiting(flightKey{cacheKey: tileKey, share: share}) == 2 &&
			h.Cache.flights.waiting(flightKey{cacheKey: tileKey, share: key}) == 1 &&
			h.Cache.flights.waiting(flightKey{cacheKey: tileKey}) == 1
	})
	close(rend.release)
	wg.Wait()
	if c := rend.calls.Load(); c != 3 {
		t.Errorf("%d renders, want 3: one in each share, one outside", c)
	}
}

// A no-cache request never joins a flight that may answer from the cache
// (one whose tile a render filled while it was being priced): a no-cache
// request beside a render of the same tile that may use the cache is
// rendered afresh, as it asked and paid for, and its newer tile stays
// cached when the older render ends after it.
func TestCacheFreshRequestNeverJoinsAFlightThatMayUseTheCache(t *testing.T) {
	t.Parallel()
	c, err := NewCache(CacheOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	k := cacheKey{layers: "places", tile: maptile.New(1, 1, 14)}
	hold, started := make(chan struct{}), make(chan struct{})
	first := make(chan []byte, 1)
	go func() {
		e, _, err := c.load(context.Background(), k, false, 0, func(context.Context) (Rendered, error) {
			close(started)
			<-hold
			return Rendered{MVT: []byte("a render that may use the cache")}, nil
		})
		if err != nil {
			first <- nil
			return
		}
		first <- e.data
	}()
	<-started
	var renders atomic.Int32
	done := make(chan []byte, 1)
	go func() {
		e, shared, err := c.load(context.Background(), k, true, 0, func(context.Context) (Rendered, error) {
			renders.Add(1)
			return Rendered{MVT: []byte("fresh")}, nil
		})
		if err != nil || shared {
			done <- nil
			return
		}
		done <- e.data
	}()
	fresh := testenv.Receive(t, done, "the no-cache request's tile")
	close(hold)
	testenv.Receive(t, first, "the other render's tile")
	if string(fresh) != "fresh" || renders.Load() != 1 {
		t.Errorf("the no-cache request got %q after %d renders of its own, want its own render", fresh, renders.Load())
	}
	// The render that began first and ended last does not replace the
	// newer tile in the cache.
	if e, ok := c.get(k); !ok {
		t.Error("nothing cached")
	} else if string(e.data) != "fresh" {
		t.Errorf("the cache holds %q after an older render ended, want the no-cache request's newer tile", e.data)
	}
}
