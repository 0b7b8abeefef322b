package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
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

// A 200 whose body was cut short (a Content-Length above what came before
// the connection closed) is no tile served: Loop counts it as an error
// (status 0).
func TestLoopCountsACutBodyAsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n') // the request line; the rest is never read
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.mapbox-vector-tile\r\nContent-Length: 1000\r\n\r\nonly this")
			}()
		}
	}()
	c := &Client{BaseURL: "http://" + ln.Addr().String()}
	r, err := c.Loop(context.Background(), "l", []maptile.Tile{maptile.New(0, 0, 0)}, 2, 300*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK != 0 || r.Status[200] != 0 || r.Status[0] == 0 || r.Status[0] != r.Requests {
		t.Errorf("cut answers: %d OK of %d requests, %v; want every one counted as an error (status 0)", r.OK, r.Requests, r.Status)
	}
}

// A worker whose request failed pauses before its next one: against a
// port nothing listens on, every request fails at once, and without a
// pause a run would spin through hundreds of thousands of them.
func TestLoopPausesAfterAnError(t *testing.T) {
	c := &Client{BaseURL: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))} // nothing listens
	const workers, d = 2, 300 * time.Millisecond
	r, err := c.Loop(context.Background(), "l", []maptile.Tile{maptile.New(0, 0, 0)}, workers, d, false)
	if err != nil {
		t.Fatal(err)
	}
	// At most one request per pause per worker, and some slack.
	most := workers * (int(d/errorPause) + 5)
	if r.Requests == 0 || r.Status[0] != r.Requests || r.Requests > most {
		t.Errorf("%d requests in %s against a closed port (%v); want 1..%d, all errors", r.Requests, d, r.Status, most)
	}
}
