package loadtest

import (
	"net/http"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// The server's own database time is read for a tile it drew; a tile it
// gave up on at its statement timeout took at least its answer's time
// (censored); a refused one (429) measured nothing, and is an error, not a
// slow query.
func TestServerTimerTakesOnlyDrawnOrTimedOutTiles(t *testing.T) {
	srv := tileAnswers(t, map[uint32]http.HandlerFunc{0: answerTimeout, 1: answerRefused, 2: answerEmpty})
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
