package toll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// fakeKeys is a fixed key set: key "k<N>" has id N in tier "free".
type fakeKeys map[string]apikeys.Key

func (f fakeKeys) Lookup(key string) (apikeys.Key, bool) { k, ok := f[key]; return k, ok }

func testKeys() fakeKeys {
	keys := fakeKeys{}
	for i, name := range []string{"k1", "a", "b", "k"} {
		keys[name] = apikeys.Key{ID: int64(i + 1), Name: name, Tier: "free"}
	}
	keys["shadowy"] = apikeys.Key{ID: 99, Name: "shadowy", Tier: "shadow"}
	keys["lost"] = apikeys.Key{ID: 98, Name: "lost", Tier: "gone"}
	return keys
}

func testToll(store throttle.Store) *Toll {
	return &Toll{
		Store:  store,
		Prefix: "test",
		Tiers: map[string]Tier{
			AnonymousTier: {Name: AnonymousTier, Limit: throttle.Limit{Rate: 10, Capacity: 80}},
			"free":        {Name: "free", Limit: throttle.Limit{Rate: 20, Capacity: 100}},
			"shadow":      {Name: "shadow", Limit: throttle.Limit{Rate: 1, Capacity: 70}, Shadow: true},
			"small":       {Name: "small", Limit: throttle.Limit{Rate: 1, Capacity: 20}, MaxCost: 10},
		},
		FailedAuth: throttle.Limit{Rate: 0.1, Capacity: 3},
		Keys:       testKeys(),
		Default:    throttle.DefaultWeights(),
	}
}

func tileDemand(z maptile.Zoom, layers ...string) tiles.Demand {
	d := tiles.Demand{Tile: maptile.New(0, 0, z)}
	for _, n := range layers {
		d.Layers = append(d.Layers, &tiles.Layer{Name: n})
	}
	return d
}

func admit(t *testing.T, toll *Toll, key string, d tiles.Demand) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	if key != "" {
		r.Header.Set("X-API-Key", key)
	}
	w := httptest.NewRecorder()
	ok := toll.AdmitTile(w, r, d)
	return w, ok
}

func TestTollAdmitsThenRefusesWithProblem(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	z2 := tileDemand(2, "places")
	if got := toll.TilePrice(z2); got != 60 {
		t.Fatalf("z2 price = %v, want the max cost 60", got)
	}

	w, ok := admit(t, toll, "k1", z2)
	if !ok {
		t.Fatalf("first z2 refused: %d %s", w.Code, w.Body)
	}
	for h, want := range map[string]string{
		"X-Request-Cost":        "60",
		"X-RateLimit-Limit":     "100",
		"X-RateLimit-Remaining": "40",
		"X-RateLimit-Reset":     "3", // 60 tokens at 20/s
		"RateLimit-Policy":      `"free";q=100;qu="tokens";w=5, "free-concurrency";q=256;qu="concurrent-requests"`,
		"RateLimit":             `"free";r=40;t=3`,
	} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}

	c.t = c.t.Add(100 * time.Millisecond) // +2 tokens → 42
	w, ok = admit(t, toll, "k1", z2)
	if ok {
		t.Fatal("second z2 admitted with 42 tokens")
	}
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Errorf("Content-Type %q", ct)
	}
	// deficit 18 tokens at 20/s = 900 ms → Retry-After 1 s.
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "42" {
		t.Errorf("429 carries X-RateLimit-Remaining %q, want 42", got)
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || body["cost"] != 60.0 || body["remaining"] != 42.0 || body["retry_after"] != 1.0 {
		t.Errorf("429 body %v", body)
	}
	if vp, _ := body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "free" {
		t.Errorf("violated-policies %v", body["violated-policies"])
	}

	// After Retry-After the same request is admitted.
	c.t = c.t.Add(time.Second)
	if w, ok := admit(t, toll, "k1", z2); !ok {
		t.Fatalf("refused after Retry-After: %d %s", w.Code, w.Body)
	}
}

func TestTollKeysAndIPsHaveSeparateBuckets(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	z2 := tileDemand(2, "places")
	if _, ok := admit(t, toll, "a", z2); !ok {
		t.Fatal("key a refused")
	}
	if _, ok := admit(t, toll, "b", z2); !ok {
		t.Fatal("key b refused: keys share a bucket")
	}
	w, ok := admit(t, toll, "", z2)
	if !ok {
		t.Fatal("anonymous refused")
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"anonymous";q=80;qu="tokens";w=8, "anonymous-concurrency";q=256;qu="concurrent-requests"` {
		t.Errorf("anonymous policy %q", got)
	}
	if _, ok := admit(t, toll, "", z2); ok {
		t.Fatal("anonymous second z2 admitted with 20 tokens of 80")
	}
}

// A composite costs the sum of its layers (one query each); one dearer than
// the caller's bucket holds is a 422 that spends nothing.
func TestTilePriceCompositeIsTheSum(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.LayerWeights = map[string]throttle.Weights{"cheap": {Base: 1, AreaWeight: 0, MaxCost: 10}}
	one := toll.TilePrice(tileDemand(14, "places"))
	if got := toll.TilePrice(tileDemand(14, "places", "cheap")); got != one+1 {
		t.Errorf("composite z14 = %v, want %v + 1", got, one)
	}
	z0 := tileDemand(0, "places", "places2", "cheap")
	if got := toll.TilePrice(z0); got != 121 {
		t.Errorf("composite z0 = %v, want 60 + 60 + 1", got)
	}
	w, ok := admit(t, toll, "k1", z0)
	if ok || w.Code != http.StatusUnprocessableEntity || w.Header().Get("X-RateLimit-Remaining") != "100" {
		t.Fatalf("composite above capacity: ok=%v %d remaining %q %s", ok, w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Body)
	}
	if _, ok := admit(t, toll, "k1", tileDemand(0, "places")); !ok {
		t.Fatal("the 422 spent tokens: a single z0 tile was refused afterwards")
	}
}

// A shadowed layer lifts the limit only when every layer of the request is
// shadowed: adding it to a composite must not.
func TestShadowLayerInCompositeStillLimited(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	toll.LayerWeights = map[string]throttle.Weights{"ghost": {Base: 1, AreaWeight: 0, MaxCost: 10}}
	toll.ShadowLayers = map[string]bool{"ghost": true}
	mixed := tileDemand(2, "places", "ghost") // 61 tokens
	if _, ok := admit(t, toll, "k1", mixed); !ok {
		t.Fatal("first mixed composite refused")
	}
	if w, ok := admit(t, toll, "k1", mixed); ok || w.Code != http.StatusTooManyRequests {
		t.Fatalf("second mixed composite: ok=%v %d — the shadow layer lifted the limit on places", ok, w.Code)
	}
}

// A cache hit spends the caller's base price but never the global database
// budget: the database does no work for it.
func TestCacheHitSkipsGlobalBudget(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	toll.Global = &throttle.Global{Store: toll.Store, Bucket: throttle.Bucket{Key: "global", Limit: throttle.Limit{Rate: 0.001, Capacity: 61}}}
	if _, ok := admit(t, toll, "a", tileDemand(2, "places")); !ok { // global: 1 left
		t.Fatal("miss refused")
	}
	if w, ok := admit(t, toll, "b", tileDemand(2, "places")); ok || w.Code != http.StatusServiceUnavailable {
		t.Fatalf("second miss with the global budget spent: ok=%v %d", ok, w.Code)
	}
	hit := tileDemand(2, "places")
	hit.CacheHit = true
	for i := 0; i < 5; i++ {
		if w, ok := admit(t, toll, "b", hit); !ok {
			t.Fatalf("cache hit %d refused with the global budget spent: %d %s", i, w.Code, w.Body)
		}
	}
}

// switchStore is a store that fails like an unreachable Redis while down.
type switchStore struct {
	throttle.Store
	down atomic.Bool
}

func (s *switchStore) Admit(ctx context.Context, req throttle.Request) (throttle.Admission, error) {
	if s.down.Load() {
		return throttle.Admission{}, errors.New("redis down")
	}
	return s.Store.Admit(ctx, req)
}

// TestGlobalFailOpenSettlesNothingBack: a request the global budget
// admitted through fail_mode open was never charged there, so its
// settlement gives nothing back: the leases taken before go back to the
// shared bucket with what they really hold, not with tokens that bucket
// never paid.
func TestGlobalFailOpenSettlesNothingBack(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	shared := throttle.NewMemoryStore(throttle.MemoryOptions{})
	primary := &switchStore{Store: shared}
	toll.Global = &throttle.Global{Store: &throttle.Failover{Primary: primary, Mode: throttle.FailOpen, ProbeInterval: time.Hour, Logger: discard()},
		Bucket: throttle.Bucket{Key: "global", Limit: throttle.Limit{Rate: 1e-6, Capacity: 1000}}, Chunk: 60, Hold: time.Hour}
	// charge admits a request of key at 60 tokens, under Finish, and
	// settles it at cost before Finish would.
	charge := func(key string, cost float64) {
		t.Helper()
		var pass *Pass
		h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if pass = toll.Charge(w, r, Price{Cost: 60, Route: "tile", Layer: "places", Zoom: 2}); pass != nil {
				pass.Settle(cost)
			}
		}))
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/2/0/0.mvt", nil)
		r.Header.Set("X-API-Key", key)
		h.ServeHTTP(httptest.NewRecorder(), r)
		if pass == nil {
			t.Fatalf("a request of %s was refused", key)
		}
	}
	charge("a", 60) // charged: a lease of 60, all of it spent
	primary.down.Store(true)
	charge("b", 10) // admitted fail-open; it cost 10 of the 60 it was priced at
	primary.down.Store(false)
	toll.Global.Close()
	res, err := shared.Peek(context.Background(), toll.Global.Bucket)
	if err != nil || res.Remaining != 940 {
		t.Fatalf("the shared bucket holds %v (%v) after the leases went back, want 940: a request admitted fail-open gave back tokens it was never charged", res.Remaining, err)
	}
}

// downStore fails like an unreachable Redis.
type downStore struct{}

func (downStore) Admit(context.Context, throttle.Request) (throttle.Admission, error) {
	return throttle.Admission{}, errors.New("redis down")
}

func (downStore) Peek(context.Context, throttle.Bucket) (throttle.Result, error) {
	return throttle.Result{}, errors.New("redis down")
}

func TestTollFailModes(t *testing.T) {
	z14 := tileDemand(14, "places")
	for _, tc := range []struct {
		name   string
		mode   throttle.FailMode
		wantOK bool
		status int
	}{
		{"closed refuses with 503", throttle.FailClosed, false, http.StatusServiceUnavailable},
		{"open admits", throttle.FailOpen, true, 0},
		{"local charges the fallback", throttle.FailLocal, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toll := testToll(&throttle.Failover{Primary: downStore{}, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}),
				Mode: tc.mode, Replicas: 2, Logger: discard()})
			w, ok := admit(t, toll, "k", z14)
			if ok != tc.wantOK {
				t.Fatalf("admitted = %v, want %v (%d %s)", ok, tc.wantOK, w.Code, w.Body)
			}
			if tc.status != 0 && w.Code != tc.status {
				t.Errorf("status %d, want %d", w.Code, tc.status)
			}
			if tc.mode == throttle.FailLocal {
				rem, _ := strconv.ParseFloat(w.Header().Get("X-RateLimit-Remaining"), 64)
				// The fallback is this replica's share: half the capacity on each of 2.
				if want := math.Floor(100/2 - toll.TilePrice(z14) + 1e-4); rem != want {
					t.Errorf("local remaining %v, want %v", rem, want)
				}
			}
		})
	}
}

// busyStore answers every admission as a caller's flood does: ErrBusy.
type busyStore struct{ downStore }

func (busyStore) Admit(context.Context, throttle.Request) (throttle.Admission, error) {
	return throttle.Admission{}, fmt.Errorf("lane: %w", throttle.ErrBusy)
}

// TestTollUnknownKeyFailModes: an unknown key's failed-auth token follows
// the fail mode as every other budget does. Closed refuses it with the
// 503 a valid key gets — a 401 there would be a guess nobody charged, and
// would tell an unknown key from a valid one —, open answers the 401
// uncharged, local charges the fallback bucket until it answers 429. A
// flood the limiter cannot queue (ErrBusy) is the 503 it is for a key's
// own bucket, not a free 401.
func TestTollUnknownKeyFailModes(t *testing.T) {
	z14 := tileDemand(14, "places")
	for _, tc := range []struct {
		name    string
		primary throttle.Store
		mode    throttle.FailMode
		want    []int // the statuses of four guesses in a row (capacity 3)
		detail  string
	}{
		{"closed refuses with 503", downStore{}, throttle.FailClosed, []int{503, 503, 503, 503}, "the rate limiter is unavailable"},
		{"open answers 401 uncharged", downStore{}, throttle.FailOpen, []int{401, 401, 401, 401}, unknownKey},
		{"local charges the fallback", downStore{}, throttle.FailLocal, []int{401, 401, 401, 429}, ""},
		{"a flood is refused with 503", busyStore{}, throttle.FailLocal, []int{503, 503, 503, 503}, "too many of your requests are waiting for the rate limiter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toll := testToll(&throttle.Failover{Primary: tc.primary, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}),
				Mode: tc.mode, Logger: discard()})
			toll.Logger = discard()
			for i, want := range tc.want {
				w, ok := admit(t, toll, "guess-"+strconv.Itoa(i), z14)
				if ok || w.Code != want {
					t.Fatalf("guess %d: ok=%v %d %s, want %d", i, ok, w.Code, w.Body, want)
				}
				if got := w.Header().Get("WWW-Authenticate") != ""; got != (want == http.StatusUnauthorized) {
					t.Errorf("guess %d (%d): WWW-Authenticate %q", i, w.Code, w.Header().Get("WWW-Authenticate"))
				}
				if want == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "1" {
					t.Errorf("guess %d: 503 with Retry-After %q, want 1", i, w.Header().Get("Retry-After"))
				}
				if tc.detail != "" && !strings.Contains(w.Body.String(), `"detail":"`+tc.detail+`"`) {
					t.Errorf("guess %d: body %s, want detail %q", i, w.Body, tc.detail)
				}
			}
			if tc.want[0] == http.StatusServiceUnavailable {
				// A valid key gets the same answer: the status tells no key from another.
				if w, ok := admit(t, toll, "k1", z14); ok || w.Code != http.StatusServiceUnavailable {
					t.Errorf("valid key: ok=%v %d, want 503 as the guesses", ok, w.Code)
				}
			}
		})
	}
}

func TestTollValidate(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	if err := toll.Validate(); err != nil {
		t.Fatalf("valid toll: %v", err)
	}
	anon := toll.Tiers[AnonymousTier]
	anon.Limit.Capacity = 60 // == max cost: the priciest request could never pass
	toll.Tiers[AnonymousTier] = anon
	err := toll.Validate()
	if err == nil || !strings.Contains(err.Error(), `tier "anonymous"`) {
		t.Fatalf("capacity == max_cost accepted: %v", err)
	}
	toll = testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Tiers[`bad"tier`] = Tier{Name: `bad"tier`, Limit: throttle.Limit{Rate: 1, Capacity: 100}}
	if err := toll.Validate(); err == nil || !strings.Contains(err.Error(), "must match") {
		t.Fatalf("a tier name unfit for headers was accepted: %v", err)
	}
}

// TestTollValidateIPv6Aggregate: the aggregate's prefix is /16../63 (both
// ends included), it must be able to pay the dearest request, and a
// refused aggregate makes the whole policy invalid.
func TestTollValidateIPv6Aggregate(t *testing.T) {
	maxCost := testToll(nil).MaxCost()
	ok := throttle.Limit{Rate: 1, Capacity: maxCost + 1}
	for _, tc := range []struct {
		agg   IPv6Aggregate
		valid bool
	}{
		{IPv6Aggregate{}, true}, // off
		{IPv6Aggregate{Bits: 16, Limit: ok}, true},
		{IPv6Aggregate{Bits: 63, Limit: ok}, true},
		{IPv6Aggregate{Bits: 15, Limit: ok}, false},
		{IPv6Aggregate{Bits: 64, Limit: ok}, false},
		{IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 1, Capacity: maxCost}}, false},
		{IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 0, Capacity: maxCost + 1}}, false},
	} {
		toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
		toll.IPv6Aggregate = tc.agg
		err := toll.Validate()
		if tc.valid && err != nil {
			t.Errorf("/%d, %+v: %v", tc.agg.Bits, tc.agg.Limit, err)
		}
		if !tc.valid && (err == nil || !strings.Contains(err.Error(), "ipv6 aggregate")) {
			t.Errorf("/%d, %+v accepted: %v", tc.agg.Bits, tc.agg.Limit, err)
		}
	}
}

// TestTollValidateFailedAuth: the failed-auth bucket must admit at least
// one guess, so a capacity of 1 is valid and anything less is not.
func TestTollValidateFailedAuth(t *testing.T) {
	for _, tc := range []struct {
		capacity float64
		valid    bool
	}{{1, true}, {3, true}, {0.99, false}} {
		toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
		toll.FailedAuth = throttle.Limit{Rate: 0.1, Capacity: tc.capacity}
		err := toll.Validate()
		if tc.valid && err != nil {
			t.Errorf("failed-auth capacity %g: %v", tc.capacity, err)
		}
		if !tc.valid && (err == nil || !strings.Contains(err.Error(), "failed-auth")) {
			t.Errorf("failed-auth capacity %g accepted: %v", tc.capacity, err)
		}
	}
}

func TestTollUnknownKeys(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	store := throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now})
	toll := testToll(store)
	z14 := tileDemand(14, "places")
	// Three unknown keys from one IP: 401 each (failed-auth capacity 3)…
	for i := 0; i < 3; i++ {
		w, ok := admit(t, toll, "guess-"+strconv.Itoa(i), z14)
		if ok || w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("unknown key %d: ok=%v %d", i, ok, w.Code)
		}
		if got := w.Header().Get("RateLimit-Policy"); !strings.HasPrefix(got, `"failed-auth"`) {
			t.Errorf("401 policy %q", got)
		}
	}
	// …then guessing ends in 429, while a real key from the same IP is fine.
	if w, _ := admit(t, toll, "guess-4", z14); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fourth guess: %d", w.Code)
	}
	if w, ok := admit(t, toll, "k1", z14); !ok {
		t.Fatalf("real key refused after guesses: %d %s", w.Code, w.Body)
	}
}

func TestTollTierRules(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	z2 := tileDemand(2, "places")

	// Shadow tier: the second z2 (60 > 10 left) is admitted and marked.
	if _, ok := admit(t, toll, "shadowy", z2); !ok {
		t.Fatal("shadow first refused")
	}
	w, ok := admit(t, toll, "shadowy", z2)
	if !ok || w.Header().Get("X-RateLimit-Shadow") != "would-refuse" {
		t.Fatalf("shadow tier refused or unmarked: ok=%v %v", ok, w.Header())
	}

	// Shadow layer: the same for anonymous callers of a shadowed layer only.
	toll.ShadowLayers = map[string]bool{"ghost": true}
	for i := 0; i < 2; i++ {
		if _, ok := admit(t, toll, "", tileDemand(2, "ghost")); !ok {
			t.Fatalf("shadow layer refused on request %d", i+1)
		}
	}
	if _, ok := admit(t, toll, "", z2); ok {
		t.Fatal("non-shadow layer admitted with an empty budget")
	}

	// A key whose tier is not configured: 403, nothing charged — logged
	// once, however often it asks (each request was logged: a free flood
	// of the log).
	var logs bytes.Buffer
	toll.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	for range 3 {
		if w, ok := admit(t, toll, "lost", z2); ok || w.Code != http.StatusForbidden {
			t.Fatalf("unconfigured tier: %v %d", ok, w.Code)
		}
	}
	if n := strings.Count(logs.String(), "unconfigured tier"); n != 1 {
		t.Errorf("three requests of a key naming an unconfigured tier logged %d lines, want 1:\n%s", n, logs.String())
	}
}

func TestTollTierMaxCost(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Keys = fakeKeys{"s": {ID: 7, Name: "s", Tier: "small"}}
	w, ok := admit(t, toll, "s", tileDemand(2, "places"))
	if ok || w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), `"max_request_cost"`) {
		t.Fatalf("above tier max cost: %v %d %s", ok, w.Code, w.Body)
	}
	if _, ok := admit(t, toll, "s", tileDemand(14, "places")); !ok {
		t.Fatal("cheap request refused in small tier")
	}
}

// TestTollTierMaxCostIsInclusive: a request that costs exactly the tier's
// max_cost is admitted; a hair more is a 422.
func TestTollTierMaxCostIsInclusive(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Keys = fakeKeys{"s": {ID: 7, Name: "s", Tier: "small"}}
	most := toll.Tiers["small"].MaxCost
	for _, tc := range []struct {
		cost float64
		code int
	}{{most, http.StatusOK}, {most + 0.001, http.StatusUnprocessableEntity}} {
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt", nil)
		r.Header.Set("X-API-Key", "s")
		w := httptest.NewRecorder()
		pass := toll.Charge(w, r, Price{Cost: tc.cost, Route: "tile", Zoom: 0})
		if (pass != nil) != (tc.code == http.StatusOK) || w.Code != tc.code {
			t.Errorf("cost %g against max_cost %g: admitted %v, %d; want %d", tc.cost, most, pass != nil, w.Code, tc.code)
		}
	}
}

// TestTollMostPerRequest: the IPv6 aggregate caps what one request may cost
// in the anonymous tier only (the tier it aggregates), and an in-flight TTL
// left at 0 is a minute while a configured one is kept.
func TestTollMostPerRequest(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 1, Capacity: 70}}
	for tier, want := range map[string]float64{AnonymousTier: 70, "free": 100, "small": 10} {
		if got := toll.mostPerRequest(toll.Tiers[tier]); got != want {
			t.Errorf("tier %s: at most %g per request, want %g", tier, got, want)
		}
	}
	if got := toll.inFlightTTL(); got != time.Minute {
		t.Errorf("in-flight TTL left at 0: %v, want 1m", got)
	}
	toll.InFlightTTL = 5 * time.Second
	if got := toll.inFlightTTL(); got != 5*time.Second {
		t.Errorf("in-flight TTL 5s: %v", got)
	}
}

func TestTollDryRunAndBudget(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt?dry_run=1", nil)
	r.Header.Set("X-API-Key", "k1")
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		if toll.AdmitTile(w, r, tileDemand(2, "places")) {
			t.Fatal("dry run went on to the query")
		}
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 {
			t.Fatalf("dry run: %d %s", w.Code, w.Body)
		}
		if body["cost"] != 60.0 || body["remaining"] != 100.0 || body["would_allow"] != true {
			t.Fatalf("dry run %d charged or mispriced: %v", i, body)
		}
		if w.Header().Get("X-Request-Cost") != "60" {
			t.Errorf("dry run cost header %q", w.Header().Get("X-Request-Cost"))
		}
	}
	// Spend for real, then /budget shows it and costs nothing.
	if _, ok := admit(t, toll, "k1", tileDemand(2, "places")); !ok {
		t.Fatal("spend refused")
	}
	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		br := httptest.NewRequest(http.MethodGet, "/budget", nil)
		br.Header.Set("Authorization", "Bearer k1")
		toll.ServeBudget(w, br)
		var b map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || w.Code != 200 {
			t.Fatalf("budget: %d %s", w.Code, w.Body)
		}
		if b["tier"] != "free" || b["capacity"] != 100.0 || b["rate"] != 20.0 || b["remaining"] != 40.0 || b["key"] != "k1" {
			t.Fatalf("budget %d: %v", i, b)
		}
	}
}

// holding serves tiles to key k1 of tier free under an in-flight cap:
// each request reports on entered whether it was admitted, and an
// admitted one holds its slot until release is closed; serve sends one
// request, whose answer arrives on answers.
type holding struct {
	entered chan bool
	release chan struct{}
	answers chan *httptest.ResponseRecorder
	h       http.Handler
}

func holdingTiles(toll *Toll, maxInFlight int) *holding {
	free := toll.Tiers["free"]
	free.MaxInFlight = maxInFlight
	toll.Tiers["free"] = free
	k := &holding{entered: make(chan bool, 8), release: make(chan struct{}), answers: make(chan *httptest.ResponseRecorder, 8)}
	k.h = Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := toll.AdmitTile(w, r, tileDemand(14, "places"))
		k.entered <- ok
		if ok {
			<-k.release
		}
	}))
	return k
}

func (k *holding) serve() {
	r := httptest.NewRequest(http.MethodGet, "/t", nil)
	r.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	k.h.ServeHTTP(w, r)
	k.answers <- w
}

func TestTollConcurrencyCap(t *testing.T) {
	k := holdingTiles(testToll(throttle.NewMemoryStore(throttle.MemoryOptions{})), 2)
	go k.serve()
	go k.serve()
	if !testenv.Receive(t, k.entered, "the first request") || !testenv.Receive(t, k.entered, "the second request") {
		t.Fatal("the first two concurrent requests were not admitted")
	}
	go k.serve()
	if testenv.Receive(t, k.entered, "the third request") {
		t.Fatal("a third concurrent request was admitted with max_in_flight 2")
	}
	if w := testenv.Receive(t, k.answers, "the third request's answer"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("third: %d, want 429", w.Code)
	}
	close(k.release)
	testenv.Receive(t, k.answers, "the first request to finish")
	testenv.Receive(t, k.answers, "the second request to finish")
	// Both slots were released when the handlers returned.
	go k.serve()
	if !testenv.Receive(t, k.entered, "a request after the others") {
		t.Fatal("a request after the others finished was refused: slots leaked")
	}
	testenv.Receive(t, k.answers, "the last request to finish")
}

func TestTollGlobalBudget(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	toll.Global = &throttle.Global{Store: toll.Store, Bucket: throttle.Bucket{Key: "global", Limit: throttle.Limit{Rate: 1, Capacity: 70}}}
	if err := toll.Validate(); err != nil {
		t.Fatal(err)
	}
	z2 := tileDemand(2, "places")
	if _, ok := admit(t, toll, "a", z2); !ok {
		t.Fatal("first refused")
	}
	// Key b has a full budget, but the database's is down to 10.
	w, ok := admit(t, toll, "b", z2)
	if ok || w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"global"`) || w.Header().Get("Retry-After") != "50" {
		t.Fatalf("global refusal: %v %d %q %s", ok, w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	// b was not charged.
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "100" {
		t.Fatalf("b's remaining after a global refusal: %q, want 100", got)
	}
	toll.Global.Bucket.Limit.Capacity = 60
	if toll.Validate() == nil {
		t.Fatal("a global budget no larger than the max price was accepted")
	}
}

func TestTollAllowAdmin(t *testing.T) {
	toll := testToll(nil)
	toll.Keys = fakeKeys{"boss": {ID: 1, Name: "boss", Tier: "free", Admin: true}, "user": {ID: 2, Name: "user", Tier: "free"}}
	for _, tc := range []struct {
		name string
		set  func(*http.Request)
		want bool
	}{
		{"admin key in header", func(r *http.Request) { r.Header.Set("X-API-Key", "boss") }, true},
		{"admin key as bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer boss") }, true},
		{"admin key in the query is refused", func(r *http.Request) { r.URL.RawQuery = "key=boss" }, false},
		{"non-admin key", func(r *http.Request) { r.Header.Set("X-API-Key", "user") }, false},
		{"unknown key", func(r *http.Request) { r.Header.Set("X-API-Key", "nobody") }, false},
		{"no key", func(*http.Request) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/geofences", nil)
			tc.set(r)
			if got := toll.AllowAdmin(r); got != tc.want {
				t.Errorf("AllowAdmin = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTollRefuseAdminCharges(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	codes := []int{}
	for i := 0; i < 4; i++ { // failed-auth capacity 3
		r := httptest.NewRequest(http.MethodPost, "/geofences", nil)
		r.RemoteAddr = "192.0.2.9:1"
		r.Header.Set("X-API-Key", "guess")
		w := httptest.NewRecorder()
		toll.RefuseAdmin(w, r)
		codes = append(codes, w.Code)
	}
	if codes[0] != 401 || codes[2] != 401 || codes[3] != 429 {
		t.Fatalf("admin guesses answered %v, want 401 ×3 then 429", codes)
	}
}

// Shadow mode waives the caller's own buckets — its /64 and its IPv6
// network's — and nothing else.
func TestShadowWaivesIPv6Aggregate(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	anon := toll.Tiers[AnonymousTier]
	anon.Shadow = true
	toll.Tiers[AnonymousTier] = anon
	toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 0.001, Capacity: 100}}
	z2 := tileDemand(2, "places")
	for i, remote := range []string{"[2001:db8:1:1::1]:443", "[2001:db8:1:2::1]:443"} {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		if !toll.AdmitTile(w, r, z2) {
			t.Fatalf("request %d refused in shadow mode: %d %s", i, w.Code, w.Body)
		}
		if shadowed := w.Header().Get("X-RateLimit-Shadow") == "would-refuse"; shadowed != (i == 1) {
			t.Errorf("request %d: X-RateLimit-Shadow %q", i, w.Header().Get("X-RateLimit-Shadow"))
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// At exactly the settle floor a request is settled at its database time;
// only below it does its estimate stand.
func TestChargedFromTheSettleFloorOn(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	for _, tc := range []struct {
		floor, db time.Duration
		want      float64
	}{
		{0, DefaultSettleFloor - time.Nanosecond, 7}, // the estimate
		{0, DefaultSettleFloor, 1},                   // 5 ms at 10 ms a token: the base, 1
		{0, 300 * time.Millisecond, 30},              // 300 ms at 10 ms a token
		{0, time.Hour, 60},                           // at most most
		{250 * time.Millisecond, 249 * time.Millisecond, 7},
		{250 * time.Millisecond, 250 * time.Millisecond, 25},
	} {
		toll.SettleFloor = tc.floor
		if got := toll.Charged(7, tc.db, 1, 60); got != tc.want {
			t.Errorf("settle floor %v: Charged(7, %v, 1, 60) = %v, want %v", tc.floor, tc.db, got, tc.want)
		}
	}
}
