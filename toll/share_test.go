package toll

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// An anonymous caller's statements run in the anonymous share of the
// pool; a keyed caller's in its key's own share, each key's another.
func TestSharesOfThePool(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := &pgcall.DB{Pool: pool, AcquireTimeout: 5 * time.Second}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.AnonymousShare = pgcall.NewShare(2)
	toll.KeyShares = pgcall.NewShares(3, time.Minute)
	var (
		share   *pgcall.Share
		inShare int
	)
	h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !toll.AdmitTile(w, r, tileDemand(14, "places")) {
			return // share stays nil: the loop says so
		}
		share = pgcall.ShareOf(r.Context())
		_, err := db.Read(r.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second,
			Scan: func(rows pgx.Rows) error { inShare = share.InUse(); rows.Close(); return nil }})
		if err != nil {
			t.Error(err)
		}
	}))
	shares := map[string]*pgcall.Share{}
	for _, key := range []string{"", "k1", "a", "k1"} {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/14/0/0.mvt", nil)
		r.RemoteAddr = "192.0.2.9:5555"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		share, inShare = nil, -1
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if share == nil || inShare != 1 {
			t.Fatalf("key %q: %d, share %v, %d of its slots in use during its statement, want 1", key, w.Code, share, inShare)
		}
		if before, seen := shares[key]; seen && before != share {
			t.Errorf("key %q: a second share", key)
		}
		shares[key] = share
		if n := share.InUse(); n != 0 {
			t.Errorf("key %q: %d slots held after the request", key, n)
		}
	}
	if shares[""] != toll.AnonymousShare || shares["k1"].Size() != 3 || shares["k1"] == shares["a"] || shares["k1"] == shares[""] {
		t.Errorf("anonymous %p (the anonymous share %p), k1 %p of %d, a %p", shares[""], toll.AnonymousShare, shares["k1"], shares["k1"].Size(), shares["a"])
	}
}
