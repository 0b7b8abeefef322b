package toll

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
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
