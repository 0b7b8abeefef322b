package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testToll(store throttle.Store) *Toll {
	return &Toll{
		Store:     store,
		Prefix:    "test",
		Anonymous: Tier{Name: "anonymous", Limit: throttle.Limit{Rate: 10, Capacity: 80}},
		Keyed:     Tier{Name: "keyed", Limit: throttle.Limit{Rate: 20, Capacity: 100}},
		Default:   throttle.DefaultWeights(),
		FailMode:  FailClosed,
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
		"RateLimit-Policy":      `"keyed";q=100;w=5`,
		"RateLimit":             `"keyed";r=40;t=3`,
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
	if body["type"] != problem.TypeBase+"quota-exceeded" || body["cost"] != 60.0 || body["remaining"] != 42.0 || body["retry_after"] != 1.0 {
		t.Errorf("429 body %v", body)
	}
	if vp, _ := body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "keyed" {
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
	if got := w.Header().Get("RateLimit-Policy"); got != `"anonymous";q=80;w=8` {
		t.Errorf("anonymous policy %q", got)
	}
	if _, ok := admit(t, toll, "", z2); ok {
		t.Fatal("anonymous second z2 admitted with 20 tokens of 80")
	}
}

func TestTilePriceCompositeIsSumClamped(t *testing.T) {
	toll := testToll(nil)
	toll.LayerWeights = map[string]throttle.Weights{"cheap": {Base: 1, AreaWeight: 0, MaxCost: 10}}
	z14 := tileDemand(14, "places", "cheap")
	one := toll.TilePrice(tileDemand(14, "places"))
	if got := toll.TilePrice(z14); got != one+1 {
		t.Errorf("composite z14 = %v, want %v + 1", got, one)
	}
	if got := toll.TilePrice(tileDemand(0, "places", "places2", "cheap")); got != 60 {
		t.Errorf("composite z0 = %v, want clamp 60", got)
	}
}

// downStore fails like an unreachable Redis.
type downStore struct{}

func (downStore) Spend(context.Context, string, throttle.Limit, float64) (throttle.Result, error) {
	return throttle.Result{}, errors.New("redis down")
}

func (downStore) Peek(context.Context, string, throttle.Limit) (throttle.Result, error) {
	return throttle.Result{}, errors.New("redis down")
}

func TestTollFailModes(t *testing.T) {
	z14 := tileDemand(14, "places")
	for _, tc := range []struct {
		name   string
		mode   FailMode
		wantOK bool
		status int
	}{
		{"closed refuses with 503", FailClosed, false, http.StatusServiceUnavailable},
		{"open admits", FailOpen, true, 0},
		{"local charges the fallback", FailLocal, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toll := testToll(downStore{})
			toll.FailMode = tc.mode
			toll.Fallback = throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll.Replicas = 2
			w, ok := admit(t, toll, "k", z14)
			if ok != tc.wantOK {
				t.Fatalf("admitted = %v, want %v (%d %s)", ok, tc.wantOK, w.Code, w.Body)
			}
			if tc.status != 0 && w.Code != tc.status {
				t.Errorf("status %d, want %d", w.Code, tc.status)
			}
			if tc.mode == FailLocal {
				rem, _ := strconv.ParseFloat(w.Header().Get("X-RateLimit-Remaining"), 64)
				if want := math.Floor(100 - toll.TilePrice(z14) + 1e-4); rem != want {
					t.Errorf("local remaining %v, want %v", rem, want)
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
	toll.Anonymous.Limit.Capacity = 60 // == max cost: the priciest request could never pass
	err := toll.Validate()
	if err == nil || !strings.Contains(err.Error(), `tier "anonymous"`) {
		t.Fatalf("capacity == max_cost accepted: %v", err)
	}
	toll = testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.FailMode = "sometimes"
	if toll.Validate() == nil {
		t.Fatal("unknown fail mode accepted")
	}
}
