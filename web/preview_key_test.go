package web_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/web"
)

// The preview page takes its API key from ?key=, and MapLibre's hash
// (hash: true) rewrites the address on every pan and zoom, query and all:
// unless the page drops the query first, the key is recorded again and
// again in the history, and bookmarked and shared with the view. The
// script must read the key, then replace the address with one that keeps
// the path and the hash but no query, before the map starts.
func TestPreviewDropsTheKeyFromTheAddress(t *testing.T) {
	resp := serve(t, web.Handler(), http.MethodGet, "/web/app.js", nil)
	b, _ := io.ReadAll(resp.Body)
	src := string(b)
	read := strings.Index(src, "params.get('key')")
	drop := regexp.MustCompile(`history\.replaceState\(\s*null,\s*'',\s*(window\.)?location\.pathname\s*\+\s*(window\.)?location\.hash\s*\)`).FindStringIndex(src)
	start := strings.Index(src, "new maplibregl.Map(")
	switch {
	case read < 0 || start < 0:
		t.Fatalf("app.js: reading the key at %d, the map made at %d: the test no longer fits the script", read, start)
	case drop == nil:
		t.Fatal("app.js never drops the query (and its key) from the address: history.replaceState(null, '', location.pathname + location.hash) is missing")
	case drop[0] < read || drop[0] > start:
		t.Errorf("app.js drops the query at %d: want it after the key is read (%d) and before the map starts (%d)", drop[0], read, start)
	}
}

// The page asked for with ?key= is kept in no cache: a browser's cache
// would keep the address, key and all, on disk. Without a query it stays
// no-cache (stored, revalidated by its ETag).
func TestPreviewWithAKeyIsNotStored(t *testing.T) {
	h := web.Handler()
	for _, tc := range []struct{ path, want string }{
		{"/", "no-cache"},
		{"/?key=gt_" + strings.Repeat("k", 43), "no-store"},
		{"/?api_key=s3cret", "no-store"},
		{"/web/app.js", "no-cache"},
		{"/web/app.js?key=s3cret", "no-store"},
	} {
		resp := serve(t, h, http.MethodGet, tc.path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", tc.path, resp.StatusCode)
		}
		if got := resp.Header.Get("Cache-Control"); got != tc.want {
			t.Errorf("%s: Cache-Control %q, want %q", tc.path, got, tc.want)
		}
	}
}
