package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// Only a 503 at which the server gave up on an admitted request's query
// (problem type timeout) takes the tile's size from the database's
// drawing; a 429, or a 503 of the rate limiter or the global budget,
// measured nothing of the tile and is no tile drawn.
func TestZoomsTakeTheDatabasesTileOnlyForAServerTimeout(t *testing.T) {
	srv := tileAnswers(t, map[uint32]http.HandlerFunc{
		0: answerTimeout,
		1: answerUnavailable,
		2: answerRefused,
		3: func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, r, &problem.Error{Code: problem.ReducedCapacity, RetryAfter: 1})
		},
		4: answerEmpty,
	})
	c := &Client{BaseURL: srv.URL}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	db := Timing{MS: 30, Bytes: 1234, Features: 7}
	for _, tc := range []struct {
		name     string
		x        uint32
		censored bool
		bytes    int
		ok       bool
	}{
		{"server timeout", 0, false, 1234, true},
		{"server timeout, database timed out too", 0, true, 0, false},
		{"rate limiter unavailable", 1, false, 0, false},
		{"refused", 2, false, 0, false},
		{"global budget spent", 3, false, 0, false},
		{"drawn empty", 4, false, 0, true},
	} {
		r, err := c.Tile(t.Context(), "l", maptile.New(tc.x, 0, 3))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tm := db
		tm.Censored = tc.censored
		if b, _, ok := tileSize(r, tm); b != tc.bytes || ok != tc.ok {
			t.Errorf("%s (status %d): %d bytes, drawn %v; want %d, %v", tc.name, r.Status, b, ok, tc.bytes, tc.ok)
		}
	}
}

// countingTimer counts the tiles it is asked to time.
type countingTimer struct{ n *int }

func (c countingTimer) Time(context.Context, *tiles.Layer, maptile.Tile) (Timing, error) {
	*c.n++
	return Timing{MS: 1, Bytes: 100, Features: 2}, nil
}
func (countingTimer) String() string { return "counting" }

// A tile the server refused is not timed — a server timer's own request
// would be refused as well, and fail the run before its table is printed —
// but counted in its row by status, where the run's outcome finds it.
func TestZoomsTimeNoRefusedTile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(answerRefused))
	defer srv.Close()
	timed := 0
	rows, err := RunZooms(t.Context(), ZoomOptions{Client: &Client{BaseURL: srv.URL}, Pool: testenv.ReadPool(t),
		Timer: countingTimer{&timed}, Layer: placesLayer(t), PerZoom: 2, MinZoom: 10, MaxZoom: 11})
	if err != nil {
		t.Fatal(err)
	}
	if timed != 0 || len(rows) != 2 {
		t.Fatalf("%d tiles timed, %d rows; want none timed, 2 rows", timed, len(rows))
	}
	for _, r := range rows {
		if r.Status[http.StatusTooManyRequests] != 2 || r.Tiles != 2 || r.Failed() != 2 {
			t.Errorf("z%d: statuses %v, %d tiles, %d failed; want 2 tiles, both refused", r.Zoom, r.Status, r.Tiles, r.Failed())
		}
	}
}

// Every tile asked for counts in its row, refused or drawn: a row whose
// tiles were partly refused reports them as failed (ZoomRow.Failed), so
// that the run's outcome sees them, and its medians are over the drawn
// tiles alone.
func TestZoomsCountEveryTileAskedFor(t *testing.T) {
	var asked, refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1)%2 == 0 { // every second tile refused
			refused.Add(1)
			answerRefused(w, r)
			return
		}
		answerEmpty(w, r)
	}))
	defer srv.Close()
	timed := 0
	rows, err := RunZooms(t.Context(), ZoomOptions{Client: &Client{BaseURL: srv.URL}, Pool: testenv.ReadPool(t),
		Timer: countingTimer{&timed}, Layer: placesLayer(t), PerZoom: 4, MinZoom: 10, MaxZoom: 11})
	if err != nil {
		t.Fatal(err)
	}
	tiles, failed := 0, 0
	for _, r := range rows {
		tiles += r.Tiles
		failed += r.Failed()
		if r.Tiles != r.Status[http.StatusNoContent]+r.Status[http.StatusTooManyRequests] {
			t.Errorf("z%d: %d tiles, statuses %v; want every tile asked for counted", r.Zoom, r.Tiles, r.Status)
		}
		if r.Failed() != r.Status[http.StatusTooManyRequests] {
			t.Errorf("z%d: %d failed, statuses %v; want the refused ones", r.Zoom, r.Failed(), r.Status)
		}
	}
	if tiles != int(asked.Load()) || failed != int(refused.Load()) || failed == 0 || timed != tiles-failed {
		t.Errorf("%d tiles counted, %d failed, %d timed; the server was asked for %d and refused %d", tiles, failed, timed, asked.Load(), refused.Load())
	}
}

// Answers of a fake server: the server's own timeout (503, problem type
// timeout), a refusal (429), an empty tile (204).
func answerTimeout(w http.ResponseWriter, r *http.Request) {
	problem.Write(w, r, &problem.Error{Code: problem.Timeout, Detail: "the query exceeded its time limit", RetryAfter: 2})
}

func answerUnavailable(w http.ResponseWriter, r *http.Request) {
	problem.Write(w, r, &problem.Error{Code: problem.Unavailable, Detail: "the rate limiter is unavailable", RetryAfter: 1})
}

func answerRefused(w http.ResponseWriter, r *http.Request) {
	problem.Write(w, r, &problem.Error{Code: problem.Exhausted, RetryAfter: 3})
}

func answerEmpty(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

// tileAnswers is a server answering the tile x/0/3 of layer "l" with
// answers[x], and any other path 404; closed when the test ends.
func tileAnswers(t *testing.T, answers map[uint32]http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for x, answer := range answers {
			if r.URL.Path == TilePath("l", maptile.New(x, 0, 3)) {
				answer(w, r)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}
