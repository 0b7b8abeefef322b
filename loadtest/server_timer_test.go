package loadtest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// The server's own database time is read for a tile it drew; a tile it
// gave up on at its statement timeout took at least its answer's time
// (censored); a refused one (429) measured nothing, and is an error, not a
// slow query.
func TestServerTimerTakesOnlyDrawnOrTimedOutTiles(t *testing.T) {
	answers := map[uint32]func(w http.ResponseWriter, r *http.Request){
		0: func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, r, &problem.Error{Code: problem.Timeout, Detail: "the query exceeded its time limit", RetryAfter: 2})
		},
		1: func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 3})
		},
		2: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for x, answer := range answers {
			if r.URL.Path == TilePath("l", maptile.New(x, 0, 3)) {
				answer(w, r)
				return
			}
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	st := ServerTimer{Client: &Client{BaseURL: srv.URL}, Stats: testenv.Pool(t), Runs: 1}
	layer := &tiles.Layer{Name: "l"}
	if got, err := st.Time(t.Context(), layer, maptile.New(0, 0, 3)); err != nil || !got.Censored {
		t.Errorf("a server timeout: %+v, %v; want a censored time", got, err)
	}
	if got, err := st.Time(t.Context(), layer, maptile.New(1, 0, 3)); err == nil {
		t.Errorf("a refused tile: %+v, want an error", got)
	}
	if got, err := st.Time(t.Context(), layer, maptile.New(2, 0, 3)); err != nil || got.Censored {
		t.Errorf("a tile drawn empty: %+v, %v; want its database time", got, err)
	}
}
