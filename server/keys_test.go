package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/throttle"
)

// loadedRing is a key ring loaded once with an admin key "boss" and an
// ordinary key "user", whose reloads fail.
func loadedRing(t *testing.T, maxAge time.Duration) *apikeys.Ring {
	t.Helper()
	loads := 0
	ring := apikeys.NewRing(func(context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		if loads++; loads > 1 {
			return nil, errors.New("database down")
		}
		return map[apikeys.Hash]apikeys.Key{
			apikeys.HashOf("boss"): {ID: 1, Name: "boss", Tier: "free", Admin: true},
			apikeys.HashOf("user"): {ID: 2, Name: "user", Tier: "free"},
		}, nil
	}, time.Hour, discard())
	ring.MaxAge = maxAge
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ring
}

// The ring's age shows in /readyz's detail and in the metrics; stale keys
// leave the process ready but say so, and refuse admin keys with a 403
// that says why.
func TestKeyRingReadinessAndMetrics(t *testing.T) {
	fresh, stale := loadedRing(t, time.Hour), loadedRing(t, time.Nanosecond)
	never := apikeys.NewRing(nil, time.Hour, discard())
	for _, tc := range []struct {
		name string
		ring *apikeys.Ring
		want string
	}{
		{"fresh", fresh, "ok: 2 keys, loaded "},
		{"stale", stale, "degraded: API keys last loaded "},
		{"never loaded", never, "degraded: API keys not loaded yet: keyed callers get 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{Logger: discard(), Ready: checkedNow(t, map[string]Check{"api_keys": KeysCheck(tc.ring)})})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"api_keys":"`+tc.want) {
				t.Fatalf("/readyz %d %s, want api_keys %q", w.Code, w.Body, tc.want)
			}
			reg := prometheus.NewRegistry()
			if err := WatchKeys(reg, tc.ring); err != nil {
				t.Fatal(err)
			}
			if n, err := testutil.GatherAndCount(reg, "geotoll_api_keys_age_seconds", "geotoll_api_keys_stale", "geotoll_api_keys"); err != nil || n != 3 {
				t.Fatalf("key ring metrics: %d %v", n, err)
			}
		})
	}

	gate := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	gate.Keys = stale
	r := httptest.NewRequest(http.MethodPost, "/geofences", nil)
	r.Header.Set("X-API-Key", "boss")
	if gate.AllowAdmin(r) {
		t.Fatal("an admin key kept its rights with stale keys")
	}
	w := httptest.NewRecorder()
	gate.RefuseAdmin(w, r)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "suspended") {
		t.Fatalf("stale admin key: %d %s", w.Code, w.Body)
	}
	if !strings.Contains(KeysCheck(stale)(t.Context()).Error(), "admin keys refused") {
		t.Fatalf("stale admin key: %d %s", w.Code, w.Body)
	}
	gate.Keys = fresh
	if !gate.AllowAdmin(r) {
		t.Fatal("a fresh admin key was refused")
	}
}
