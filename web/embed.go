// Package web is geotoll's preview page: a full-window MapLibre GL JS map of
// every tile layer, with a live budget meter fed by the RateLimit headers of
// the tile responses and refused (429) tiles outlined in red.
//
// Everything the page loads is embedded in the binary — the page, its script
// and style sheet, and MapLibre GL JS itself (vendor/, the minified dist
// build with its licence) — so the page works with no CDN and no network
// beyond the geotoll server.
//
// Handler serves:
//
//	GET /                 index.html
//	GET /web/{name}       app.js, style.css, vendor/maplibre-gl.js, ...
//
// Every asset carries a strong ETag (a hash of its bytes) and
// `Cache-Control: no-cache`, so a browser revalidates each load and gets a
// 304 until the binary changes; nothing is cached past an upgrade. A
// request whose URL has a query — the page's ?key=, the only one it reads —
// is answered `Cache-Control: no-store` instead: no cache keeps an address
// that may carry a key (the page then drops the query from the address
// bar). Text that gzip makes smaller is gzipped once, at start-up, and sent
// so to clients that accept it (an ETag of its own, `Vary:
// Accept-Encoding`). Only the embedded files are served: no directory
// listings, no other paths.
//
// The browser test in web/browser (run by cmd/geotoll's TestBrowserPreview)
// loads the page in Chromium against a real server.
package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"html"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/geotoll/geotoll/internal/etag"
	"github.com/geotoll/geotoll/internal/negotiate"
	"github.com/geotoll/geotoll/problem"
)

//go:embed index.html app.js style.css vendor/maplibre-gl.js vendor/maplibre-gl.css vendor/LICENSE.txt
var files embed.FS

// Prefix is the URL path under which the assets other than index.html are
// served.
const Prefix = "/web/"

// contentType is the type of an embedded file, by extension; explicit so
// that it does not depend on the machine's mime tables.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	default:
		return "text/plain; charset=utf-8"
	}
}

// contentSecurityPolicy keeps the page to its own origin: scripts, styles
// and connections go only to the geotoll server (MapLibre's worker is a blob:
// URL it makes itself). It enforces "no CDN" in the browser.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; worker-src blob:; child-src blob:; " +
	"img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// atBase makes the page load everything from below base.
func atBase(page []byte, base string) []byte {
	page = bytes.ReplaceAll(page, []byte(`="`+Prefix), []byte(`="`+base+Prefix))
	meta := `<meta name="geotoll-base" content="` + html.EscapeString(base) + `">`
	return bytes.Replace(page, []byte(`<meta charset="utf-8">`), []byte(`<meta charset="utf-8">`+"\n"+meta), 1)
}

type asset struct {
	body        []byte
	etag        string
	contentType string
	// gz is body gzipped, under gzETag; nil when gzip would not make it
	// smaller by an eighth.
	gz     []byte
	gzETag string
}

// gzipped is body gzipped at the best compression (once, at start-up), or
// nil when that saves less than an eighth of it.
func gzipped(body []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil
	}
	if _, err := zw.Write(body); err != nil || zw.Close() != nil || buf.Len() > len(body)-len(body)/8 {
		return nil
	}
	return buf.Bytes()
}

// Handler returns the preview page's handler. It answers "/" with the page
// and Prefix+name with the embedded asset name; anything else is a
// problem+json 404.
func Handler() http.Handler { return HandlerAt("") }

// HandlerAt is Handler below a base path ("/maps"): it answers base+"/" and
// base+Prefix+name, and the page loads its assets, tiles and budget from
// below base (a meta element named geotoll-base tells the script).
func HandlerAt(base string) http.Handler {
	base = strings.TrimRight(base, "/")
	assets := make(map[string]asset)
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		if name == "index.html" {
			body = atBase(body, base)
		}
		a := asset{
			body:        body,
			etag:        etag.Of(body),
			contentType: contentType(name),
			gz:          gzipped(body),
		}
		if a.gz != nil {
			a.gzETag = a.etag[:len(a.etag)-1] + `-gz"`
		}
		assets[name] = a
		return nil
	})
	if err != nil {
		// The files are compiled in; failing to read them is a build bug.
		panic("web: reading embedded files: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			problem.Write(w, r, &problem.Error{Code: problem.NotAllowed, Detail: "method " + r.Method + " is not allowed here"})
			return
		}
		name, ok := "", false
		switch p := r.URL.Path; {
		case p == base+"/":
			name, ok = "index.html", true
		case strings.HasPrefix(p, base+Prefix):
			name = strings.TrimPrefix(p, base+Prefix)
			ok = name != "index.html" && fs.ValidPath(name)
		}
		a, found := assets[name]
		if !ok || !found {
			problem.Write(w, r, problem.Missing("", "no such file"))
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		if r.URL.RawQuery != "" {
			h.Set("Cache-Control", "no-store") // the URL may hold a key
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		h.Set("X-Content-Type-Options", "nosniff")
		body, tag := a.body, a.etag
		if a.gz != nil {
			h.Add("Vary", "Accept-Encoding")
			if negotiate.AcceptsGzip(r.Header.Values("Accept-Encoding")) {
				body, tag = a.gz, a.gzETag
				h.Set("Content-Encoding", "gzip")
			}
		}
		if name == "index.html" {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
			h.Set("Referrer-Policy", "no-referrer")
		}
		etag.Serve(w, r, body, tag, "this file")
	})
}
