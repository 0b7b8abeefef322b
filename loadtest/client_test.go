package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"
)

// remote is an address that is not loopback (TEST-NET-1: never routed).
const remote = "http://192.0.2.1:8080"

// redirecting answers every request with a 301 to target's same path.
func redirecting(t *testing.T, target string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusMovedPermanently)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A redirect does not take the instruments off loopback, as -url could
// not: it is refused, unless AllowRemote; one to loopback is followed.
func TestClientFollowsRedirectsOnlyToLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &Client{BaseURL: redirecting(t, remote).URL}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Tile(ctx, "l", maptile.New(0, 0, 0))
	if err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("a redirect to %s: error %v, want one saying the host is not loopback", remote, err)
	}
	if _, err := c.DryRun(ctx, "l", maptile.New(0, 0, 0)); err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("a dry run redirected to %s: error %v, want one saying the host is not loopback", remote, err)
	}

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer target.Close()
	c = &Client{BaseURL: redirecting(t, target.URL).URL}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Tile(ctx, "l", maptile.New(0, 0, 0)); err != nil || r.Status != http.StatusNoContent {
		t.Errorf("a redirect to loopback: %+v, %v; want it followed to a 204", r, err)
	}

	// With AllowRemote a redirect to another host is followed.
	c = &Client{BaseURL: "http://127.0.0.1:1", AllowRemote: true}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	f := c.HTTP.CheckRedirect
	if f == nil {
		t.Fatal("check set no CheckRedirect")
	}
	if err := f(httptest.NewRequest(http.MethodGet, remote+"/x", nil), []*http.Request{{}}); err != nil {
		t.Errorf("with AllowRemote a redirect to %s is refused: %v", remote, err)
	}
}
