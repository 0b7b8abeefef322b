package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// tiles.js declares 304 an expected status (a conditional request's tile
// not modified), and its check passes on one: a run whose server answers
// 304 with the budget headers, as geotoll does, has no failed check and no
// failed request.
func TestLoadtestK6TilesChecksPassANotModified(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", `"default";q=100;w=60`)
		w.Header().Set("RateLimit", `"default";r=99;t=1`)
		w.Header().Set("ETag", `"t1"`)
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	run := runK6(t, "tiles.js", 4, map[string]string{"BASE_URL": srv.URL, "ZOOMS": "14"})
	if len(run.Requests) < 4 {
		t.Fatalf("%d requests, want 4", len(run.Requests))
	}
	for _, r := range run.Requests {
		if r.Status != http.StatusNotModified || r.Failed {
			t.Errorf("%s → %d, counted failed %v; want a 304, not failed", r.URL, r.Status, r.Failed)
		}
	}
	for _, c := range run.Checks {
		if !c.OK {
			t.Errorf("check %q failed on a %d", c.Name, c.Status)
		}
	}
}
