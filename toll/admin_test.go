package toll

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

// A valid key without admin rights on a fence admin route is a 403 that
// charges nothing — not a 401 that burns its IP's failed-auth bucket, which
// every client behind the same NAT shares. Unknown keys still pay.
func TestAdminRouteForbidsNonAdminKeyFree(t *testing.T) {
	toll, keys := redisToll(t)
	toll.Keys = fakeKeys{
		"boss": {ID: 1, Name: "boss", Tier: "free", Admin: true},
		"user": {ID: 2, Name: "user", Tier: "free"},
	}
	fences, err := geofence.NewHandler(geofence.Options{
		Limits: geofence.DefaultLimits(), Admin: toll, Gate: toll,
		Reader: geofence.NewStore(testenv.ReadPool(t)), Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	router.HandleFunc("/geofences", fences.Admin(fences.ListFences))
	h := Finish(router)
	get := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/geofences?limit=1", nil)
		r.RemoteAddr = "192.0.2.44:1000"
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 20 { // more than the failed-auth capacity (3)
		w := get("user")
		if w.Code != http.StatusForbidden || w.Header().Get("Content-Type") != problem.ContentType {
			t.Fatalf("non-admin key, call %d: %d %s", i, w.Code, w.Body)
		}
	}
	if k := keys(); len(k) != 0 {
		t.Fatalf("refusing a non-admin key wrote %q to Redis; it must charge nothing", k)
	}
	if w := get("boss"); w.Code != http.StatusOK {
		t.Fatalf("admin key: %d %s", w.Code, w.Body)
	}
	w := get("guess")
	if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("unknown key: %d %s", w.Code, w.Body)
	}
	if k := keys(); len(k) != 1 {
		t.Fatalf("an unknown key on an admin route left %q, want its IP's failed-auth bucket", k)
	}
}

// A fence admin route takes its key from a header only. A request that
// presents none there — no key at all, or a valid admin key in ?key= — is
// told where the key goes: its 401 must not call the key "unknown or
// revoked", which sends an operator hunting for a revocation that never
// happened. Each still pays its IP's failed-auth token.
func TestAdminRefusalSaysWhereTheKeyGoes(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.FailedAuth = throttle.Limit{Rate: 0.1, Capacity: 10}
	toll.Keys = fakeKeys{"boss": {ID: 1, Name: "boss", Tier: "free", Admin: true}}
	for _, tc := range []struct {
		name, target, key string
		want, never       string
	}{
		{"no key", "/geofence/fences", "", "X-API-Key", "unknown or revoked"},
		{"admin key in the query", "/geofence/fences?key=boss", "", "?key=", "unknown or revoked"},
		{"unknown key", "/geofence/fences", "guess", "unknown or revoked", "?key="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			r.RemoteAddr = "192.0.2.45:1000"
			if tc.key != "" {
				r.Header.Set("X-API-Key", tc.key)
			}
			if toll.AllowAdmin(r) {
				t.Fatal("admitted to fence admin")
			}
			w := httptest.NewRecorder()
			toll.RefuseAdmin(w, r)
			var p struct{ Detail string }
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusUnauthorized {
				t.Fatalf("%d %s, want a 401 problem", w.Code, w.Body)
			}
			if !strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, tc.never) {
				t.Errorf("detail %q: want it to name %q, and never %q", p.Detail, tc.want, tc.never)
			}
			if rl := w.Header().Get("RateLimit"); !strings.HasPrefix(rl, `"failed-auth"`) {
				t.Errorf("RateLimit %q: the refusal must be charged to the failed-auth bucket", rl)
			}
		})
	}
}
