package toll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// cachedTiles serves the demo places layer through a tile cache, rendered
// by render, under Finish, as the server does.
func cachedTiles(t *testing.T, gate tiles.Gate, render tiles.Renderer, obs tiles.Observer) http.Handler {
	t.Helper()
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := tiles.NewCache(tiles.CacheOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	router.Handle("/tiles/{"+tiles.VarLayer+"}/{"+tiles.VarZ+"}/{"+tiles.VarX+"}/{"+tiles.VarY+"}",
		&tiles.Handler{Catalog: cat, Store: render, Gate: gate, Logger: discard(), Cache: cache, Observer: obs})
	return Finish(router)
}

// heldRenderer renders a tile once released, recording ran of database
// time on the render's meter as a render's calls would (none when zero).
type heldRenderer struct {
	started chan struct{}
	release chan struct{}
	ran     time.Duration
}

func (b *heldRenderer) Tile(ctx context.Context, _ []*tiles.Layer, _ maptile.Tile) ([]byte, error) {
	b.started <- struct{}{}
	<-b.release
	if b.ran > 0 {
		pgcall.AddTo(ctx, b.ran)
	}
	return []byte{0x1a, 0}, nil
}

// sharedObserver counts the tile requests that waited for another's
// render.
type sharedObserver struct{ shared atomic.Int32 }

func (o *sharedObserver) TileCache(result string) {
	if result == "shared" {
		o.shared.Add(1)
	}
}

func (o *sharedObserver) TileQuery(string, maptile.Zoom, time.Duration) {}

// admitted tells when a request's admission is over.
type admitted struct {
	tiles.Gate
	done chan struct{}
}

func (g admitted) AdmitTile(w http.ResponseWriter, r *http.Request, d tiles.Demand) bool {
	defer func() { g.done <- struct{}{} }()
	return g.Gate.AdmitTile(w, r, d)
}

// Two requests of one key for one tile at once share one render. The one
// that started it pays the time it ran; the one that joined it made the
// database do nothing and settles at the base price, as a cache hit does —
// not at the miss's estimate it paid at the door. The caller's bucket and
// the global budget pay the render once. A render that made no call (its
// tile came from elsewhere) bills neither more than its base.
func TestSharedRenderIsPaidOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		ran           time.Duration
		starter, join float64 // X-Request-Cost of each
	}{
		{"a render of 30 ms", 30 * time.Millisecond, 3, 0.01},
		{"a render that made no call", 0, 0.01, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The second request joins the render only if it reaches it
			// before the render ends, which the test can only wait for:
			// an attempt where it came late (a cache hit) is run again.
			for attempt := 1; ; attempt++ {
				if sharedRenderPaidOnce(t, tc.ran, tc.starter, tc.join) {
					return
				}
				if attempt == 5 {
					t.Fatal("the second request never joined the render in 5 attempts")
				}
			}
		})
	}
}

// sharedRenderPaidOnce runs one attempt of TestSharedRenderIsPaidOnce; it
// reports false when the second request did not join the render.
func sharedRenderPaidOnce(t *testing.T, ran time.Duration, starterCost, joinCost float64) bool {
	t.Helper()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.SettleFloor = time.Millisecond
	free := toll.Tiers["free"]
	free.Limit = throttle.Limit{Rate: 0.001, Capacity: 1000}
	toll.Tiers["free"] = free
	global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 0.001, Capacity: 1000}}
	toll.Global = &throttle.Global{Store: store, Bucket: global, Chunk: 1}
	render := &heldRenderer{started: make(chan struct{}, 2), release: make(chan struct{}), ran: ran}
	obs := &sharedObserver{}
	gate := admitted{Gate: toll, done: make(chan struct{}, 2)}
	h := cachedTiles(t, gate, render, obs)
	get := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/1/1.mvt", nil)
		r.Header.Set("X-API-Key", "a")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	starter, joiner := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go func() { starter <- get() }()
	<-render.started
	<-gate.done // the starter's admission
	go func() { joiner <- get() }()
	<-gate.done                       // the joiner's admission: it asks for the render next
	time.Sleep(20 * time.Millisecond) // (not observable from here)
	close(render.release)
	ws, wj := <-starter, <-joiner
	if ws.Code != http.StatusOK || wj.Code != http.StatusOK {
		t.Fatalf("answers %d and %d, want 200", ws.Code, wj.Code)
	}
	if obs.shared.Load() != 1 {
		return false
	}
	if got := header(t, ws, "X-Request-Cost"); got != starterCost {
		t.Errorf("the starter's X-Request-Cost %v, want %v", got, starterCost)
	}
	if got := header(t, wj, "X-Request-Cost"); got != joinCost {
		t.Errorf("the joiner's X-Request-Cost %v, want %v (its estimate was %v)", got, joinCost, header(t, wj, "X-Request-Cost-Estimate"))
	}
	want := 1000 - starterCost - joinCost
	res, err := store.Peek(t.Context(), throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "free", "k:2"), Limit: free.Limit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining < want-0.01 || res.Remaining > want+0.01 {
		t.Errorf("the caller's bucket holds %v, want %v", res.Remaining, want)
	}
	toll.Global.Close()
	g, err := store.Peek(t.Context(), global)
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining < want-0.01 || g.Remaining > want+0.01 {
		t.Errorf("the global budget holds %v, want %v", g.Remaining, want)
	}
	return true
}

// stuckRenderer answers a cut whose statement still runs: as a real call's
// time does, what it ran lands on the render's meter only once it stopped.
type stuckRenderer struct{ ran time.Duration }

func (s stuckRenderer) Tile(ctx context.Context, _ []*tiles.Layer, _ maptile.Tile) ([]byte, error) {
	done := make(chan struct{})
	go func() {
		time.Sleep(100 * time.Millisecond)
		pgcall.AddTo(ctx, s.ran)
		close(done)
	}()
	return nil, pgcall.Outlast(&problem.Error{Code: problem.Timeout, Detail: "cut", RetryAfter: 1}, done)
}

// A render cut while its statement still runs answers its payer 503 at
// once: the answer shows the estimate it paid (what ran is not known yet),
// not the base of a request the database did nothing for, and the request
// is then charged what ran (300 ms: 30 tokens).
func TestCutRenderShowsItsEstimateAndChargesWhatRan(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	free := toll.Tiers["free"]
	free.Limit = throttle.Limit{Rate: 0.001, Capacity: 1000}
	toll.Tiers["free"] = free
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/1/1.mvt", nil)
	r.Header.Set("X-API-Key", "a")
	w := httptest.NewRecorder()
	cachedTiles(t, toll, stuckRenderer{ran: 300 * time.Millisecond}, nil).ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("%d, want 503", w.Code)
	}
	if cost, estimate := header(t, w, "X-Request-Cost"), header(t, w, "X-Request-Cost-Estimate"); cost != 60 || estimate != 60 {
		t.Errorf("X-Request-Cost %v, X-Request-Cost-Estimate %v: want the estimate, 60, in both", cost, estimate)
	}
	res, err := store.Peek(t.Context(), throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "free", "k:2"), Limit: free.Limit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining < 970-0.01 || res.Remaining > 970+0.01 {
		t.Errorf("the bucket holds %v, want 1000 - 30 (300 ms)", res.Remaining)
	}
}
