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

// A base URL the instruments append paths to takes no user, query or
// fragment: "http://127.0.0.1:8080?x=1" made every request's path part of
// the query (x=1/healthz), and the run measured the preview page. A base
// path is a base URL's own. The load generator (Options), the Client and
// the connections of the ceiling's and the crawl's runs check alike.
func TestBaseURLTakesNoQuery(t *testing.T) {
	for _, base := range []string{"http://127.0.0.1:8080?x=1", "http://127.0.0.1:8080?", "http://127.0.0.1:8080/#top",
		"http://u:p@127.0.0.1:8080", "ftp://127.0.0.1", "127.0.0.1:8080", "http://"} {
		if _, err := parseBase(base); err == nil {
			t.Errorf("parseBase(%q) took it", base)
		}
		if err := (&Client{BaseURL: base}).check(); err == nil {
			t.Errorf("Client %q: checked", base)
		}
		if _, err := newConn(base); err == nil {
			t.Errorf("newConn(%q) took it", base)
		}
		o := Options{BaseURL: base, Rate: 1, Duration: time.Second}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "-url") {
			t.Errorf("Options -url %q: %v, want an error naming -url", base, err)
		}
	}
	for _, base := range []string{"http://127.0.0.1:8080", "https://localhost", "http://127.0.0.1:8080/maps"} {
		if _, err := parseBase(base); err != nil {
			t.Errorf("parseBase(%q): %v", base, err)
		}
		o := Options{BaseURL: base, Rate: 1, Duration: time.Second}
		if err := o.Validate(); err != nil {
			t.Errorf("Options -url %q: %v", base, err)
		}
	}
}

// A dry run the server refuses says why, from its problem document: it
// said "status 401, <nil>".
func TestDryRunRefusedSaysWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"status":401,"detail":"unknown or revoked API key"}`))
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	_, err := c.DryRun(t.Context(), "l", maptile.New(0, 0, 0))
	if err == nil || !strings.HasSuffix(err.Error(), "status 401: unknown or revoked API key") {
		t.Errorf("a refused dry run: %v, want the status and the problem's detail", err)
	}
}
