package toll

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/apikeys"
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

// A key given twice — two X-API-Key or Authorization headers, or ?key=
// twice — is a 400 that costs nothing, wherever keys are read: the first
// value won (an empty first ?key= made the call anonymous), where another
// part of the stack (a cache keyed on the query) could read the other.
func TestKeyGivenTwiceIsMalformed(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Keys = fakeKeys{"k1": {ID: 1, Name: "k1", Tier: "free"}, "boss": {ID: 2, Name: "boss", Tier: "free", Admin: true}}
	type serve func(w http.ResponseWriter, r *http.Request)
	tile := func(w http.ResponseWriter, r *http.Request) { toll.AdmitTile(w, r, tileDemand(2, "places")) }
	admin := func(w http.ResponseWriter, r *http.Request) {
		if !toll.AllowAdmin(r) {
			toll.RefuseAdmin(w, r)
		}
	}
	for _, tc := range []struct {
		name    string
		serve   serve
		target  string
		headers [][2]string
		param   string // the problem's param: the parameter or header at fault
	}{
		{"tile, ?key= twice", tile, "/tiles/places/2/0/0.mvt?key=&key=k1", nil, "key"},
		{"tile, ?key= twice, both valid", tile, "/tiles/places/2/0/0.mvt?key=k1&key=k1", nil, "key"},
		{"budget, X-API-Key twice", toll.ServeBudget, "/budget", [][2]string{{"X-API-Key", "k1"}, {"X-API-Key", "nope"}}, "X-API-Key"},
		{"budget, Authorization twice", toll.ServeBudget, "/budget", [][2]string{{"Authorization", "Bearer k1"}, {"Authorization", "Bearer nope"}}, "Authorization"},
		{"admin, X-API-Key twice", admin, "/geofence/fences", [][2]string{{"X-API-Key", "boss"}, {"X-API-Key", "k1"}}, "X-API-Key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			r.RemoteAddr = "192.0.2.46:1000"
			for _, h := range tc.headers {
				r.Header.Add(h[0], h[1])
			}
			w := httptest.NewRecorder()
			tc.serve(w, r)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "given more than once") {
				t.Errorf("%d %s, want a 400 saying the key is given more than once", w.Code, w.Body)
			}
			if !strings.Contains(w.Body.String(), `"param":"`+tc.param+`"`) {
				t.Errorf("%s, want param %q", w.Body, tc.param)
			}
			if rl := w.Header().Get("RateLimit"); rl != "" {
				t.Errorf("RateLimit %q on a 400 that charges nothing", rl)
			}
		})
	}
	// Nothing was charged: the address's failed-auth bucket (3) is whole.
	for i := range 3 {
		if w, _ := admit(t, toll, "gt_wrong", tileDemand(2, "places")); w.Code != http.StatusUnauthorized {
			t.Fatalf("unknown key %d after the 400s: %d, want 401", i+1, w.Code)
		}
	}
}

// Only the key a request presents counts: a second ?key= beside an
// X-API-Key (which wins) is no repeated key, nor one beside a Basic
// Authorization, which is no key at all but does not hide the query's.
func TestKeyGivenTwiceCountsWhereItIsRead(t *testing.T) {
	for _, tc := range []struct {
		target  string
		headers [][2]string
		want    string
	}{
		{"/x?key=a&key=b", [][2]string{{"X-API-Key", "k1"}}, ""},
		{"/x?key=a&key=b", [][2]string{{"Authorization", "Bearer k1"}}, ""},
		{"/x?key=a&key=b", [][2]string{{"Authorization", "Basic eDp5"}}, "key"},
		{"/x?key=a", [][2]string{{"Authorization", "Basic eDp5"}, {"Authorization", "Bearer k1"}}, "Authorization"},
		{"/x?key=a", [][2]string{{"X-API-Key", ""}, {"X-API-Key", "k1"}}, "X-API-Key"},
		{"/x?keys=a&key=b", nil, ""},
		{"/x?k%65y=a&k%65y=b", nil, "key"},
		{"/x", [][2]string{{"Authorization", "Basic eDp5"}, {"Authorization", "Basic eTp6"}}, ""},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.target, nil)
		for _, h := range tc.headers {
			r.Header.Add(h[0], h[1])
		}
		if got := apikeys.Repeated(r, true); got != tc.want {
			t.Errorf("%s %v: repeated %q, want %q", tc.target, tc.headers, got, tc.want)
		}
	}
}
