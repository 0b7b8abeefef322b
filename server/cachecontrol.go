package server

import (
	"net/http"
	"strings"

	"github.com/geotoll/geotoll/toll"
)

// withKeyedPrivate keeps shared caches (CDNs, proxies) from serving one
// caller's responses to another. A response to a request that presents an
// API key was charged to that key and carries its budget headers: a
// "public" Cache-Control becomes "private" (its max-age kept), and one
// without Cache-Control gets "private". A public response to an anonymous
// request gets Vary: Authorization, X-API-Key, so that a shared cache never
// answers a keyed request — which must be charged — with it.
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
	public := false
	var kept []string
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		name, _, _ := strings.Cut(d, "=")
		switch strings.ToLower(name) {
		case "public":
			public = true
			continue
		case "s-maxage": // a shared cache's own lifetime: meaningless when private
			if keyed {
				continue
			}
		case "":
			continue
		}
		kept = append(kept, d)
	}
	switch {
	case keyed && (public || cc == ""):
		h.Set("Cache-Control", strings.Join(append([]string{"private"}, kept...), ", "))
	case !keyed && public:
		h.Add("Vary", "Authorization, X-API-Key")
	}
}
