package server

import (
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/toll"
)

// withKeyedPrivate keeps caches from serving one caller's responses to
// another. A response to a request that presents an API key was charged to
// that key and carries its budget headers: a "public" Cache-Control
// becomes "private" (its max-age kept), and one without Cache-Control gets
// "private", so that no shared cache (CDN, proxy) keeps it. Every response
// a cache may keep — a Cache-Control without no-store: public or private,
// keyed or anonymous, 200 or 304 — gets Vary: Authorization, X-API-Key, so
// that no cache answers a request with another key, or none, from it: a
// shared cache never answers a keyed request (which must be charged) with
// an anonymous tile, nor a browser's cache a request with another key (or
// none) with a keyed answer, whose budget headers and Cache-Control are
// that key's.
func withKeyedPrivate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, keyed := toll.APIKey(r)
		next.ServeHTTP(&cacheScope{ResponseWriter: w, keyed: keyed}, r)
	})
}

// cacheScope rewrites Cache-Control once, just before the header is sent.
type cacheScope struct {
	http.ResponseWriter
	keyed, sent bool
}

func (c *cacheScope) WriteHeader(code int) {
	if !c.sent {
		c.sent = true
		scopeCache(c.Header(), c.keyed)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *cacheScope) Write(b []byte) (int, error) {
	if !c.sent {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// FlushError sends the (rewritten) header first when nothing was written.
func (c *cacheScope) FlushError() error {
	if !c.sent {
		c.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *cacheScope) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// scopeCache applies withKeyedPrivate's rule to a response header.
func scopeCache(h http.Header, keyed bool) {
	cc := h.Get("Cache-Control")
	public, noStore := false, false
	var kept []string
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		name, _, _ := strings.Cut(d, "=")
		switch strings.ToLower(name) {
		case "public":
			public = true
			continue
		case "no-store":
			noStore = true
		case "s-maxage": // a shared cache's own lifetime: meaningless when private
			if keyed {
				continue
			}
		case "":
			continue
		}
		kept = append(kept, d)
	}
	if keyed && (public || cc == "") {
		cc = strings.Join(append([]string{"private"}, kept...), ", ")
		h.Set("Cache-Control", cc)
	}
	if cc != "" && !noStore {
		h.Add("Vary", "Authorization, X-API-Key")
	}
}
