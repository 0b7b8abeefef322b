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
// pool; a keyed caller's do not.
func TestAnonymousShare(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), testenv.ReadDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := &pgcall.DB{Pool: pool, AcquireTimeout: 5 * time.Second}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.AnonymousShare = pgcall.NewShare(2)
	inShare := -1
	h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !toll.AdmitTile(w, r, tileDemand(14, "places")) {
			t.Errorf("refused: %d", w.(*httptest.ResponseRecorder).Code)
			return
		}
		_, err := db.Read(r.Context(), pgcall.Statement{SQL: `SELECT 1`, Timeout: time.Second,
			Scan: func(rows pgx.Rows) error { inShare = toll.AnonymousShare.InUse(); rows.Close(); return nil }})
		if err != nil {
			t.Error(err)
		}
	}))
	for _, tc := range []struct {
		key  string
		want int
	}{{"", 1}, {"k1", 0}} {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/14/0/0.mvt", nil)
		r.RemoteAddr = "192.0.2.9:5555"
		if tc.key != "" {
			r.Header.Set("X-API-Key", tc.key)
		}
		inShare = -1
		h.ServeHTTP(httptest.NewRecorder(), r)
		if inShare != tc.want {
			t.Errorf("key %q: %d slots of the anonymous share in use during its statement, want %d", tc.key, inShare, tc.want)
		}
	}
	if n := toll.AnonymousShare.InUse(); n != 0 {
		t.Errorf("%d slots held after the requests", n)
	}
}
