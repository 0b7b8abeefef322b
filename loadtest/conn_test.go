package loadtest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// conn reads every kind of answer geotoll's server gives, and keeps the
// connection when it may.
func TestConnReadsResponses(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "k" || r.Header.Get("Accept-Encoding") != "gzip" || r.Host == "" {
			t.Errorf("request headers %v, host %q", r.Header, r.Host)
		}
		w.Header().Set("X-Request-Cost", "1.5")
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			_, _ = w.Write([]byte("hello"))
		case "/chunked": // flushed before the end: sent chunked
			_, _ = w.Write([]byte("hello, "))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte(strings.Repeat("x", 10000)))
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/close":
			w.Header().Set("Connection", "close")
			http.Error(w, "refused", http.StatusTooManyRequests)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := newConn(srv.URL, "X-API-Key: k", "Accept-Encoding: gzip")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		path   string
		status int
		bytes  int64
		conns  int32 // connections opened so far, after the request
	}{
		{"/length", 200, 5, 1},
		{"/chunked", 200, 10007, 1},
		{"/empty", 204, 0, 1},
		{"/close", 429, int64(len("refused\n")), 1},
		{"/length", 200, 5, 2}, // the server closed the last one
	} {
		r, err := c.get(ctx, tc.path, "X-Request-Cost")
		if err != nil || r.status != tc.status || r.bytes != tc.bytes || r.headers["X-Request-Cost"] != "1.5" {
			t.Fatalf("%s: %+v, %v; want %d with %d bytes and the cost header", tc.path, r, err, tc.status, tc.bytes)
		}
		if n := conns.Load(); n != tc.conns {
			t.Errorf("after %s: %d connections opened, want %d", tc.path, n, tc.conns)
		}
	}
}

func TestNewConnRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "127.0.0.1:80", "http://", "://"} {
		if _, err := newConn(u); err == nil {
			t.Errorf("newConn(%q) accepted", u)
		}
	}
}

// A base URL's path is the start of every request's: the raw connections
// of the flood, the ceiling and the crawl asked for /tiles/… where the
// Client asked for /maps/tiles/…, and got 404s from a server under a base
// path.
func TestConnSendsBelowTheBasePath(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Path
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL + "/maps", srv.URL + "/maps/"} {
		c, err := newConn(base)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := c.get(ctx, "/tiles/places/0/0/0.mvt")
		cancel()
		c.Close()
		if err != nil || r.status != http.StatusNoContent {
			t.Fatalf("%s: %+v, %v", base, r, err)
		}
		if p := <-got; p != "/maps/tiles/places/0/0/0.mvt" {
			t.Errorf("base %s: the server was asked for %s, want /maps/tiles/places/0/0/0.mvt", base, p)
		}
	}
}
