package loadtest

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
)

// No two of Loop's requests for one tile are ever in flight together: a
// server that coalesces them would otherwise answer more tiles than it
// renders. Every tile of the list is asked for.
func TestLoopNeverAsksForOneTileTwiceAtOnce(t *testing.T) {
	var (
		mu       sync.Mutex
		open     = map[string]bool{}
		seen     = map[string]bool{}
		overlaps int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if open[r.URL.Path] {
			overlaps++
		}
		open[r.URL.Path], seen[r.URL.Path] = true, true
		mu.Unlock()
		// Uneven service times let workers drift into one another, as
		// on a real server.
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
		mu.Lock()
		delete(open, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	var ts []maptile.Tile
	for i := range 37 {
		ts = append(ts, maptile.New(uint32(i), 0, 14))
	}
	c := &Client{BaseURL: srv.URL}
	r, err := c.Loop(context.Background(), "l", ts, 8, 500*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d requests found their tile already in flight", overlaps)
	}
	if len(seen) != len(ts) || r.OK != r.Requests || r.OK < len(ts) {
		t.Errorf("%d of %d tiles asked for; %d OK of %d requests: %v", len(seen), len(ts), r.OK, r.Requests, r.Status)
	}
}

func TestStripe(t *testing.T) {
	ts := []maptile.Tile{maptile.New(0, 0, 1), maptile.New(1, 0, 1), maptile.New(0, 1, 1), maptile.New(1, 1, 1), maptile.New(0, 0, 2)}
	for _, tc := range []struct {
		name       string
		w, workers int
		want       []maptile.Tile
	}{
		{"first of two", 0, 2, []maptile.Tile{ts[0], ts[2], ts[4]}},
		{"second of two", 1, 2, []maptile.Tile{ts[1], ts[3]}},
		{"one worker", 0, 1, ts},
		{"more workers than tiles", 6, 8, []maptile.Tile{ts[1]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := stripe(ts, tc.w, tc.workers)
			if len(got) != len(tc.want) {
				t.Fatalf("stripe(%d of %d) = %v, want %v", tc.w, tc.workers, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("stripe(%d of %d) = %v, want %v", tc.w, tc.workers, got, tc.want)
				}
			}
		})
	}
}
