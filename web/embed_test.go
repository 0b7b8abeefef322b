package web_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/web"
)

func serve(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestAssets(t *testing.T) {
	h := web.Handler()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/web/app.js">`},
		{"/web/app.js", "text/javascript; charset=utf-8", "addProtocol('geotoll'"},
		{"/web/style.css", "text/css; charset=utf-8", "#panel"},
		{"/web/vendor/maplibre-gl.js", "text/javascript; charset=utf-8", "MapLibre GL JS"},
		{"/web/vendor/maplibre-gl.css", "text/css; charset=utf-8", ".maplibregl-map"},
		{"/web/vendor/LICENSE.txt", "text/plain; charset=utf-8", "BSD"},
	} {
		resp := serve(t, h, http.MethodGet, tc.path, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", tc.path, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("%s: Cache-Control %q", tc.path, got)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", tc.path)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("%s: body lacks %q", tc.path, tc.contains)
		}
		etag := resp.Header.Get("ETag")
		if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
			t.Errorf("%s: ETag %q", tc.path, etag)
			continue
		}
		// A revalidation with the same ETag is a bodiless 304.
		again := serve(t, h, http.MethodGet, tc.path, map[string]string{"If-None-Match": etag})
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("%s: If-None-Match: status %d, want 304", tc.path, again.StatusCode)
		}
		if b, _ := io.ReadAll(again.Body); len(b) != 0 {
			t.Errorf("%s: 304 with a body", tc.path)
		}
		head := serve(t, h, http.MethodHead, tc.path, nil)
		if b, _ := io.ReadAll(head.Body); head.StatusCode != http.StatusOK || len(b) != 0 || head.Header.Get("ETag") != etag {
			t.Errorf("%s: HEAD: %d, %d bytes, ETag %q", tc.path, head.StatusCode, len(b), head.Header.Get("ETag"))
		}
	}
}

func TestETagsDiffer(t *testing.T) {
	h := web.Handler()
	a := serve(t, h, http.MethodGet, "/web/app.js", nil).Header.Get("ETag")
	b := serve(t, h, http.MethodGet, "/web/style.css", nil).Header.Get("ETag")
	if a == b {
		t.Fatalf("two files share ETag %q", a)
	}
}

// Only the embedded files are served: no listings, no index.html
// redirects, no paths outside the folder.
func TestOnlyEmbeddedFiles(t *testing.T) {
	h := web.Handler()
	for _, path := range []string{
		"/web/", "/web/vendor", "/web/vendor/", "/web/index.html", "/web/nope.js",
		"/web/../embed.go", "/web/embed.go", "/web/browser/package.json", "/index.html", "/web//app.js",
	} {
		resp := serve(t, h, http.MethodGet, path, nil)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q, want a problem+json 404", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	resp := serve(t, h, http.MethodPost, "/", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
}

// The page loads nothing from elsewhere: its CSP keeps it to its own origin,
// and neither it nor the script names another host.
func TestNoExternalResources(t *testing.T) {
	h := web.Handler()
	resp := serve(t, h, http.MethodGet, "/", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "glyphs:", "sprite:", "'symbol'"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s mentions %q", name, bad)
			}
		}
	}
}

// TestAssetsGzipped: a client that accepts gzip gets the page and its
// assets gzipped — MapLibre GL JS is 800 KB as sent, about a quarter of
// that gzipped — byte for byte the asset once decoded, under an ETag of
// their own (a 304 for it; the identity ETag is not the gzipped body's);
// a client that does not (no header, gzip;q=0) gets them as they are.
// Every answer says it varies by Accept-Encoding.
func TestAssetsGzipped(t *testing.T) {
	h := web.Handler()
	for _, path := range []string{"/", "/web/app.js", "/web/style.css", "/web/vendor/maplibre-gl.js", "/web/vendor/maplibre-gl.css"} {
		plain := serve(t, h, http.MethodGet, path, nil)
		want, _ := io.ReadAll(plain.Body)
		if plain.Header.Get("Content-Encoding") != "" || !strings.Contains(plain.Header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s without Accept-Encoding: Content-Encoding %q, Vary %q; want none, Accept-Encoding",
				path, plain.Header.Get("Content-Encoding"), plain.Header.Get("Vary"))
		}
		if refused := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": "gzip;q=0, br"}); refused.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s with gzip;q=0: Content-Encoding %q", path, refused.Header.Get("Content-Encoding"))
		}
		gz := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": "gzip, deflate, br"})
		if gz.StatusCode != http.StatusOK || gz.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(gz.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("%s for a gzip client: %d, Content-Encoding %q, Vary %q", path, gz.StatusCode, gz.Header.Get("Content-Encoding"), gz.Header.Get("Vary"))
		}
		sent, _ := io.ReadAll(gz.Body)
		zr, err := gzip.NewReader(bytes.NewReader(sent))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s gzipped decodes to %d bytes (%v), want the %d of the asset", path, len(got), err, len(want))
		}
		if len(sent) >= len(want) {
			t.Errorf("%s: %d bytes gzipped, %d as is", path, len(sent), len(want))
		}
		tag := gz.Header.Get("ETag")
		if tag == "" || tag == plain.Header.Get("ETag") {
			t.Errorf("%s: gzipped ETag %q, identity %q: want two", path, tag, plain.Header.Get("ETag"))
		}
		if r := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": tag}); r.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated with its gzipped ETag: %d, want 304", path, r.StatusCode)
		}
		if r := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": plain.Header.Get("ETag")}); r.StatusCode != http.StatusOK {
			t.Errorf("%s revalidated gzipped with the identity ETag: %d, want 200 (another representation)", path, r.StatusCode)
		}
	}
}

// TestAssetConditionsAndRanges: a failed If-Match is a 412 problem
// document — never Content-Encoding: gzip on it, even for a client that
// accepts gzip — and If-Match naming the asset (or *) serves it. A Range,
// satisfiable or not, is ignored: the whole asset, a 200 (never a 206, or
// a plain-text 416), and no Accept-Ranges inviting one. An asset has no
// modification date, so If-Unmodified-Since is ignored too.
func TestAssetConditionsAndRanges(t *testing.T) {
	h := web.Handler()
	for _, path := range []string{"/", "/web/app.js", "/web/vendor/LICENSE.txt"} {
		for _, enc := range []string{"", "gzip"} {
			plain := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": enc})
			whole, _ := io.ReadAll(plain.Body)
			etag := plain.Header.Get("ETag")
			if plain.StatusCode != http.StatusOK || plain.Header.Get("Content-Length") != strconv.Itoa(len(whole)) {
				t.Fatalf("%s (Accept-Encoding %q): %d, Content-Length %q for %d bytes", path, enc, plain.StatusCode, plain.Header.Get("Content-Length"), len(whole))
			}
			for _, bad := range []string{`"nope"`, "W/" + etag, `"nope", W/` + etag} {
				resp := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": enc, "If-Match": bad})
				body, _ := io.ReadAll(resp.Body)
				var doc map[string]any
				if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("Content-Type") != "application/problem+json" ||
					resp.Header.Get("Content-Encoding") != "" || json.Unmarshal(body, &doc) != nil || doc["status"] != float64(412) || doc["param"] != "If-Match" {
					t.Errorf("%s (Accept-Encoding %q) If-Match %s: %d %q Content-Encoding %q %s; want a 412 problem", path, enc, bad,
						resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"), body)
				}
			}
			for _, good := range []string{etag, "*", `"nope", ` + etag} {
				if resp := serve(t, h, http.MethodGet, path, map[string]string{"Accept-Encoding": enc, "If-Match": good}); resp.StatusCode != http.StatusOK {
					t.Errorf("%s (Accept-Encoding %q) If-Match %s: %d, want 200", path, enc, good, resp.StatusCode)
				}
			}
			for _, hdr := range []map[string]string{
				{"Range": "bytes=0-9"},
				{"Range": "bytes=0-0,5-9"},
				{"Range": "bytes=100000000-"},
				{"Range": "pages=1"},
				{"Range": "bytes=0-9", "If-Range": etag},
				{"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"},
			} {
				hdr["Accept-Encoding"] = enc
				resp := serve(t, h, http.MethodGet, path, hdr)
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || !bytes.Equal(body, whole) || resp.Header.Get("Content-Range") != "" || resp.Header.Get("Accept-Ranges") != "" {
					t.Errorf("%s (Accept-Encoding %q) %v: %d, %d bytes, Content-Range %q, Accept-Ranges %q; want 200 with the whole asset",
						path, enc, hdr, resp.StatusCode, len(body), resp.Header.Get("Content-Range"), resp.Header.Get("Accept-Ranges"))
				}
			}
		}
	}
}
