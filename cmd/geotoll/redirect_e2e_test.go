package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A path that is not in canonical form (a double slash, a dot segment) is
// redirected to its clean form with its query: 301 for a GET, 308 for the
// other methods. The contract checks each redirect against the operation
// of the clean path, which must document it and its Location.
func TestEndToEndRedirectsNonCanonicalPaths(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path, body string
		status             int
		location           string
	}{
		{http.MethodGet, "//tiles/places.json?x=1", "", http.StatusMovedPermanently, "/tiles/places.json?x=1"},
		{http.MethodPost, "/geofence/./check?layer=districts", `{"points":[]}`, http.StatusPermanentRedirect, "/geofence/check?layer=districts"},
		{http.MethodPut, "/geofence//fences/7", `{}`, http.StatusPermanentRedirect, "/geofence/fences/7"},
		{http.MethodDelete, "/geofence/fences/../fences/7", "", http.StatusPermanentRedirect, "/geofence/fences/7"},
		// a path no operation describes is redirected all the same
		{http.MethodGet, "//no/such/route", "", http.StatusMovedPermanently, "/no/such/route"},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location || len(body) != 0 {
			t.Errorf("%s %s: %d Location %q body %s, want %d Location %q and no body",
				tc.method, tc.path, resp.StatusCode, resp.Header.Get("Location"), short(body), tc.status, tc.location)
		}
	}

	// A client that follows the redirect gets the clean path's answer.
	if resp, body := get(t, base+"//tiles/places.json?x=1", ""); resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/tiles/places.json" {
		t.Errorf("following //tiles/places.json: %d at %s: %s", resp.StatusCode, resp.Request.URL, short(body))
	}
}
