//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
)

// TestBrowserPreview loads the preview page (package web) in a real headless
// Chromium against a whole server on real PostGIS and Redis: it runs
// web/browser/preview.test.mjs (node's test runner, playwright-core driving
// Debian's /usr/bin/chromium), which waits for the tiles, asserts through
// map.queryRenderedFeatures that features were drawn and that the budget
// meter read the RateLimit headers, provokes 429s and checks that they are
// outlined, checks that a tile answered 503 with a Retry-After is asked
// again once (the 503 stubbed in the browser), draws the demo at z2 and z5
// from its overviews (clusters with point_count > 1 rendered, through a
// key with room for low-zoom tiles), and saves screenshots to artifacts/
// (preview-z2.png, preview-z5.png among them).
//
// It needs Chromium, node and web/browser/node_modules (`make
// browser-deps`, which `make test` runs first); without them it fails when
// services are required (make test, CI) and skips otherwise.
func TestBrowserPreview(t *testing.T) {
	if testing.Short() && !testenv.Required() {
		t.Skip("browser test skipped in -short mode (never in CI)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "web", "browser")
	chromium := os.Getenv("GEOTOLL_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	var missing []string
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (Debian package chromium)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node (Node.js 20 or later)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "web/browser/node_modules (npm ci)")
	}
	if len(missing) > 0 {
		msg := "the browser test needs " + strings.Join(missing, ", ") + ": run `make browser-deps`"
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	prepareDemo(t)
	key := createKey(t, "pro") // room for the low-zoom views; the rest of the page runs anonymously
	// Priced by size: the page's refusals (a z5 places tile costs about 40
	// tokens) are what the test draws. By the work it reads, an honest
	// map's tiles cost a token or less, and nothing is refused.
	base, _ := startServer(t, sizePrices)

	// The script bounds each of its tests, and a run takes under a minute;
	// this backstop is shorter than their timeouts added up (about 8
	// minutes), so that a stuck run fails well within make test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", filepath.Join(dir, "preview.test.mjs"))
	cmd.Dir = root
	cmd.Env = append(withoutProxy(os.Environ()),
		"GEOTOLL_PREVIEW_URL="+base,
		"GEOTOLL_CHROMIUM="+chromium,
		"GEOTOLL_ARTIFACTS="+filepath.Join(root, "artifacts"),
		"GEOTOLL_PREVIEW_KEY="+key,
		"NO_PROXY=127.0.0.1,localhost,::1",
		"no_proxy=127.0.0.1,localhost,::1",
	)
	// Chromium runs in node's process group: a timeout kills all of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err = cmd.Run()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("browser test timed out after %v:\n%s", time.Since(start).Round(time.Second), out.String())
		}
		t.Fatalf("browser test failed (%v) after %v:\n%s", err, time.Since(start).Round(time.Second), out.String())
	}
	t.Logf("browser test passed in %v; screenshots in %s\n%s", time.Since(start).Round(100*time.Millisecond), filepath.Join(root, "artifacts"), out.String())
}

// The whole server mounts the preview page at / and its assets at /web/.
func TestPreviewPageServed(t *testing.T) {
	t.Parallel()
	base, _ := startServer(t, nil)
	for _, tc := range []struct {
		path   string
		status int
		ctype  string
	}{
		{"/", http.StatusOK, "text/html; charset=utf-8"},
		{"/web/app.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"/web/vendor/maplibre-gl.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"/web/vendor/maplibre-gl.css", http.StatusOK, "text/css; charset=utf-8"},
		{"/web/nope.js", http.StatusNotFound, "application/problem+json"},
	} {
		resp, _ := get(t, base+tc.path, "")
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: %d %q, want %d %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.ctype)
		}
		if resp.Header.Get("X-Request-Cost") != "" {
			t.Errorf("%s: the page was priced", tc.path)
		}
	}
	// An If-Match that names no current version is a 412 problem, as the
	// published description (which every answer here is checked against)
	// says.
	for _, path := range []string{"/", "/web/app.js", "/web/vendor/maplibre-gl.css"} {
		resp, body := fetch(t, http.MethodGet, base+path, "If-Match", `"stale"`)
		if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s If-Match \"stale\": %d %q %s, want a 412 problem", path, resp.StatusCode, resp.Header.Get("Content-Type"), short(body))
		}
	}
}

// withoutProxy drops proxy settings: the browser talks only to the server on
// loopback, never through a proxy.
func withoutProxy(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(name) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		out = append(out, kv)
	}
	return out
}
