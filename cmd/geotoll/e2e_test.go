package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/mvt"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// testShelf is the price models every test server shares: a server
// reads the models of the demo's relations other servers built, unless
// their tables changed since (see density.Shelf).
var testShelf = density.NewShelf()

// startServer runs a whole geotoll (the same Main the binary runs) against
// the real test PostGIS and Redis, on a loopback port.
func startServer(t testing.TB, edit func(*Config)) (base string, cfg Config) {
	t.Helper()
	m := startMain(t, edit)
	return "http://" + m.Addr(), m.Config
}

// startMain is startServer returning the running Main.
func startMain(t testing.TB, edit func(*Config)) *Main {
	t.Helper()
	return startLogging(t, edit, quietLog())
}

// startLogging is startMain writing the server's log to logger.
func startLogging(t testing.TB, edit func(*Config), logger *slog.Logger) *Main {
	t.Helper()
	return startMainWith(t, edit, func(m *Main) { m.Logger = logger })
}

// startMainWith is startMain with prepare run on the Main before it opens.
func startMainWith(t testing.TB, edit func(*Config), prepare func(*Main)) *Main {
	t.Helper()
	m, stop := launchMain(t, edit, prepare)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	waitPriced(t, m)
	return m
}

// launchMain opens a Main of the test configuration and serves it until
// stop, which returns what Serve returned (a second stop returns nil).
func launchMain(t testing.TB, edit func(*Config), prepare func(*Main)) (*Main, func() error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	cfg.Redis.URL = testenv.RedisURL(t)
	cfg.Throttle.Prefix = testenv.Prefix(t)
	// Not a fault test: a loaded CI machine (race detector, Chromium, other
	// packages) must not push budget calls past the 50 ms hot-path timeout
	// into the local fallback, which would make these tests flaky.
	cfg.Redis.Timeout = 5 * time.Second
	if edit != nil {
		edit(&cfg)
	}
	m := &Main{Config: cfg, Logger: quietLog(), ModelShelf: testShelf}
	if prepare != nil {
		prepare(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Open(ctx); err != nil {
		cancel()
		t.Fatalf("open: %v", err)
	}
	// Every response a test gets is checked against the published OpenAPI
	// document; a benchmark measures the server alone.
	if _, bench := t.(*testing.B); !bench {
		c := newContract(t, cfg.BasePath)
		m.Server.Handler = c.wrap(m.Server.Handler)
		if m.OpsServer != nil {
			m.OpsServer.Handler = c.wrap(m.OpsServer.Handler)
		}
	}
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	var once sync.Once
	return m, func() (err error) {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// waitPriced waits until the price models of the demo's relations (schema
// geotoll, and the overviews in geotoll_serving) are built: the tests see the prices of a server that has been up
// a while — by the work a request reads, not by its size. Relations of a
// test's own fixtures are not waited for.
func waitPriced(t testing.TB, m *Main) {
	t.Helper()
	if m.pricing == nil {
		return // throttle.pricing: size
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, demo := 0, 0
		for _, st := range m.pricing.models.Status() {
			if strings.HasPrefix(st.Relation, `"geotoll".`) || strings.HasPrefix(st.Relation, `"geotoll_serving".`) {
				demo++
				if st.Ready {
					ready++
				}
			}
		}
		if demo > 0 && ready == demo {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("price models not built in 2 minutes: %+v", m.pricing.models.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sizePrices is the setting of the tests of the throttle's mechanics —
// refusals, Retry-After, budgets, shadow, metrics — which need prices that
// follow no data: requests priced by their size (a z2 tile costs max_cost,
// a z14 one its base of 1), and no settlement (a floor no request reaches).
// The prices the density models give are tested on their own defaults.
func sizePrices(c *Config) {
	c.Throttle.Pricing = PricingSize
	c.Throttle.SettleFloor = time.Hour
	one := 1.0
	c.Throttle.Weights.Base = &one
}

// createKey makes a real API key in the test database (removed when the
// test ends). Create keys before startServer: the server loads them at start.
func createKey(t testing.TB, tier string) string {
	t.Helper()
	pool := testenv.Pool(t)
	name := "e2e-" + strings.TrimPrefix(testenv.Prefix(t), "geotoll-test-")
	plain, _, err := apikeys.NewStore(pool).Create(context.Background(), name, tier, false)
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DELETE FROM geotoll.api_keys WHERE name = $1", name)
	})
	return plain
}

func get(t *testing.T, url, key string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// short is a body fit for a failure message.
func short(body []byte) string {
	if len(body) > 300 || !utf8.Valid(body) {
		return fmt.Sprintf("(%d bytes)", len(body))
	}
	return string(body)
}

func tileURL(base, layer string, tile maptile.Tile) string {
	return base + "/tiles/" + layer + "/" + strconv.Itoa(int(tile.Z)) + "/" + strconv.Itoa(int(tile.X)) + "/" + strconv.Itoa(int(tile.Y)) + ".mvt"
}

// The verification session, for tiles: cheap tiles pass repeatedly,
// expensive ones drain the bucket, and Retry-After is honest.
func TestEndToEndCheapAndExpensiveTiles(t *testing.T) {
	t.Parallel()
	key, heavy := createKey(t, "free"), createKey(t, "free")
	base, _ := startServer(t, sizePrices)
	berlin := maptile.At(orb.Point{13.405, 52.52}, 14)

	for i := 0; i < 20; i++ {
		resp, body := get(t, tileURL(base, "places", berlin), key)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("z14 request %d: %d %s", i+1, resp.StatusCode, body)
		}
		if i == 0 {
			if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.mapbox-vector-tile" {
				t.Errorf("Content-Type %q", ct)
			}
			layers, err := mvt.Unmarshal(body)
			if err != nil {
				t.Fatalf("decode MVT: %v", err)
			}
			if len(layers) != 1 || layers[0].Name != "places" || len(layers[0].Features) == 0 {
				t.Fatalf("dense z14 tile: %d layers, want places with features", len(layers))
			}
			layers.ProjectToWGS84(berlin)
			b := berlin.Bound()
			pad := (b.Max[0] - b.Min[0]) * 64 / 4096 * 1.01 // buffer, in degrees
			for _, f := range layers[0].Features {
				p, ok := f.Geometry.(orb.Point)
				if !ok || p[0] < b.Min[0]-pad || p[0] > b.Max[0]+pad || p[1] < b.Min[1]-pad || p[1] > b.Max[1]+pad {
					t.Fatalf("feature %v outside tile %v", f.Geometry, b)
				}
			}
		}
		if resp.Header.Get("X-Request-Cost") == "" || resp.Header.Get("X-RateLimit-Remaining") == "" {
			t.Fatalf("priced response without budget headers: %v", resp.Header)
		}
	}

	// Four different z2 tiles: a repeat would be a cache hit, which costs
	// only the base price.
	z2 := func(i int) maptile.Tile { return maptile.New(uint32(i), 1, 2) }
	var refused *http.Response
	for i := 1; i <= 3 && refused == nil; i++ {
		resp, body := get(t, tileURL(base, "places", z2(i-1)), heavy)
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			if i == 1 {
				t.Fatal("the first z2 tile of a fresh key was refused")
			}
			refused = resp
		default:
			t.Fatalf("z2 request %d: %d %s", i, resp.StatusCode, short(body))
		}
	}
	if refused == nil {
		t.Fatal("three z2 tiles in a row were all admitted")
	}
	retry, err := strconv.Atoi(refused.Header.Get("Retry-After"))
	if err != nil || retry < 1 {
		t.Fatalf("Retry-After %q", refused.Header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(retry) * time.Second)
	if resp, body := get(t, tileURL(base, "places", z2(3)), heavy); resp.StatusCode != http.StatusOK {
		t.Fatalf("after Retry-After: %d %s", resp.StatusCode, short(body))
	}
}

func TestEndToEndBucketKeysAreHashTagged(t *testing.T) {
	t.Parallel()
	base, cfg := startServer(t, nil)
	resp, _ := get(t, base+"/tiles/places/10/550/335.mvt", "")
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rdb := testenv.Redis(t)
	keys, err := rdb.Keys(context.Background(), cfg.Throttle.Prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The caller's hash of open requests may still be there: its release
	// is batched and may not have run yet. It carries the same hash tag.
	bucket := cfg.Throttle.Prefix + ":{anonymous:ip:127.0.0.1}"
	if !slices.Contains(keys, bucket) || slices.ContainsFunc(keys, func(k string) bool { return k != bucket && k != throttle.OpenKey(bucket) }) {
		t.Fatalf("bucket keys %q", keys)
	}
	if ttl := rdb.PTTL(context.Background(), bucket).Val(); ttl <= 0 {
		t.Errorf("bucket has no expiry (PTTL %v)", ttl)
	}
}

func TestEndToEndBadInput(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/tiles/places/x/0/0.mvt", 400},
		{"/tiles/places/23/0/0.mvt", 422},
		{"/tiles/places/2/4/0.mvt", 422},
		{"/tiles/nope/2/0/0.mvt", 404},
		{"/tiles/places/2/0/0.png", 404},
		{"/tiles/places%3Bdrop/2/0/0.mvt", 404},
	} {
		resp, body := get(t, base+tc.path, "")
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q %s, want %d problem+json", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status)
		}
		if resp.Header.Get("X-Request-Cost") != "" {
			t.Errorf("%s: refused input was priced", tc.path)
		}
	}
}
