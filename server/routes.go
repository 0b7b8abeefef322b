package server

import (
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// route is one row of the API: the methods and the path (below the base
// path) a handler answers. An alias is an older path of a route: it serves
// the same handler and its metrics carry the route's own path.
type route struct {
	methods []string
	path    string
	handler http.Handler
	aliasOf string
}

// The methods of routes: every read answers HEAD too (RFC 9110 §9.1), the
// priced geofence queries included — a HEAD is priced and run as its GET
// is, its body left out.
func methods() (get, post, put, del []string) {
	return []string{http.MethodGet, http.MethodHead}, []string{http.MethodPost}, []string{http.MethodPut}, []string{http.MethodDelete}
}

// Paths of the API, below the base path, as its metrics name them.
const (
	PathHealth   = "/healthz"
	PathReady    = "/readyz"
	PathMetrics  = "/metrics"
	PathOpenAPI  = "/openapi.json"
	PathBudget   = "/budget"
	PathCatalog  = "/tiles"
	PathTileJSON = "/tiles/{" + tiles.VarLayer + "}.json"
	PathTile     = "/tiles/{" + tiles.VarLayer + "}/{" + tiles.VarZ + "}/{" + tiles.VarX + "}/{" + tiles.VarY + "}"
	PathWithin   = "/geofence/within"
	PathBBox     = "/geofence/bbox"
	PathContains = "/geofence/contains"
	PathCheck    = "/geofence/check"
	PathFences   = "/geofence/fences"
	PathFence    = "/geofence/fences/{" + geofence.VarID + ":[0-9]+}"
)

// routes is every route of the public listener, in one table; a part
// Options leaves nil has no routes. /tiles/{layer}.json has one segment
// after /tiles/ and the tile route four: neither can shadow the other.
func (o Options) routes() []route {
	get, post, put, del := methods()
	var rs []route
	// The tile route first: mux tries routes in order and tiles are the
	// hot path (no route here matches another's paths, so order changes
	// nothing else).
	if t := o.Tiles; t != nil {
		rs = append(rs, route{get, PathTile, t, ""})
	}
	rs = append(rs,
		route{get, PathHealth, http.HandlerFunc(healthz), ""},
		route{get, PathReady, o.readyHandler(), ""},
	)
	if o.OpenAPI != nil {
		rs = append(rs, route{get, PathOpenAPI, o.OpenAPI, ""})
	}
	if o.Metrics != nil && !o.OpsListener {
		rs = append(rs, route{get, PathMetrics, noStore(o.Metrics.Handler()), ""})
	}
	if o.Budget != nil {
		rs = append(rs, route{get, PathBudget, o.Budget, ""})
	}
	if t := o.Tiles; t != nil {
		rs = append(rs,
			route{get, PathCatalog, t.Index(), ""},
			route{get, PathTileJSON, t.TileJSON(), ""},
		)
	}
	if g := o.Geofence; g != nil {
		list, create := g.Admin(g.ListFences), g.Admin(g.CreateFence)
		one, replace, remove := g.Admin(g.GetFence), g.Admin(g.ReplaceFence), g.Admin(g.DeleteFence)
		rs = append(rs,
			route{get, PathWithin, http.HandlerFunc(g.Within), ""},
			route{get, PathBBox, http.HandlerFunc(g.BBox), ""},
			route{get, PathContains, http.HandlerFunc(g.Contains), ""},
			route{post, PathCheck, http.HandlerFunc(g.Check), ""},
			route{get, PathFences, list, ""},
			route{post, PathFences, create, ""},
			route{get, PathFence, one, ""},
			route{put, PathFence, replace, ""},
			route{del, PathFence, remove, ""},
			// The fence admin's older paths.
			route{get, "/geofences", list, PathFences},
			route{post, "/geofences", create, PathFences},
			route{get, "/geofences/{" + geofence.VarID + ":[0-9]+}", one, PathFence},
			route{put, "/geofences/{" + geofence.VarID + ":[0-9]+}", replace, PathFence},
			route{del, "/geofences/{" + geofence.VarID + ":[0-9]+}", remove, PathFence},
		)
	}
	if o.Web != nil {
		rs = append(rs, route{get, "/", o.Web, ""}, route{get, "/web/{path:.*}", o.Web, ""})
	}
	return rs
}

// opsRoutes are the routes of the operators' listener (metrics_listen).
func (o Options) opsRoutes() []route {
	get, _, _, _ := methods()
	rs := []route{
		{get, PathHealth, http.HandlerFunc(healthz), ""},
		{get, PathReady, o.ready(), ""},
	}
	if o.Metrics != nil {
		rs = append(rs, route{get, PathMetrics, noStore(o.Metrics.Handler()), ""})
	}
	return rs
}

// noStore marks what h answers as live: no cache keeps it (the metrics,
// as /healthz and /readyz).
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// newRouter registers rs below base, with problem+json answers for
// unknown paths and methods (405 with Allow).
func newRouter(base string, rs []route) *mux.Router {
	r := mux.NewRouter().SkipClean(true) // cleanPath redirects instead, keeping the method
	r.NotFoundHandler = http.HandlerFunc(notFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		notAllowed(r, w, req)
	})
	for _, rt := range rs {
		name := rt.path
		if rt.aliasOf != "" {
			name = rt.aliasOf
		}
		r.Handle(base+rt.path, rt.handler).Methods(rt.methods...).Name(documentedPath(name))
	}
	return r
}

// documentedPath is a route's path template as /openapi.json names it, the
// name its metrics and spans carry: without the patterns its variables
// match ("/geofence/fences/{id:[0-9]+}" is "/geofence/fences/{id}").
func documentedPath(template string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(template, '{')
		if open < 0 {
			b.WriteString(template)
			return b.String()
		}
		end := strings.IndexByte(template[open:], '}')
		if end < 0 {
			b.WriteString(template)
			return b.String()
		}
		v := template[open : open+end]
		if colon := strings.IndexByte(v, ':'); colon >= 0 {
			v = v[:colon]
		}
		b.WriteString(template[:open] + v + "}")
		template = template[open+end+1:]
	}
}

// cleanPath redirects a request whose path is not in canonical form — a
// double slash (a base URL with a trailing slash), a dot segment — to its
// clean form, the query kept as sent (a map client's ?key=, dry_run), as
// gorilla/mux would, but with 308 for a method other than GET and HEAD: a
// client that follows a 301 may send a POST, PUT or DELETE again as a GET,
// without its body. A trailing slash stays (and is not a route). A path
// with an encoded reserved character (%2F, %2C…; but for ! ' ( ) * [ ],
// which Go's canonical form encodes itself, and no route has) is not
// found: it is not the path with that character there (RFC 3986 §2.2,
// §6.2.2.2) — an encoded slash ends no segment, an encoded comma
// separates no composite's layers — and served as that path, one tile
// would have several addresses, each a cache entry of its own and a rule
// of a CDN's or firewall's to get round. Any other encoding but the
// canonical one (an encoded letter, digit or dot; lower-case hex) is
// redirected to it, as the same path (§6.2.2.1, §6.2.2.2). Below a base
// path, the base itself ("/maps") is redirected to its root ("/maps/",
// the preview page), as a user types it.
func cleanPath(base string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.RequestURI == "*" {
			// The asterisk form ("GET *"): a request of the server as a
			// whole, which only OPTIONS makes (net/http answers it).
			problem.Write(w, r, problem.Malformed("", "the request target %q names no resource: send a path", r.RequestURI))
			return
		}
		if encodesReserved(r.URL.RawPath) {
			notFound(w, r)
			return
		}
		p := r.URL.Path
		clean := canonicalPath(base, p)
		// RawPath is set only when the path was sent encoded otherwise
		// than Go encodes it: the redirect's Location is that encoding.
		if clean == p && r.URL.RawPath == "" {
			next.ServeHTTP(w, r)
			return
		}
		u := url.URL{Path: clean, RawQuery: escapeQuery(r.URL.RawQuery)}
		w.Header().Set("Location", u.String())
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			w.WriteHeader(http.StatusMovedPermanently)
		} else {
			w.WriteHeader(http.StatusPermanentRedirect)
		}
	})
}

// canonicalPath is p in canonical form, as cleanPath redirects to it: dot
// segments and double slashes gone, a trailing slash kept, and the base
// path itself ("/maps") its root ("/maps/").
func canonicalPath(base, p string) string {
	clean := path.Clean("/" + p)
	if (strings.HasSuffix(p, "/") && clean != "/") || (base != "" && clean == base) {
		clean += "/"
	}
	return clean
}

// escapeQuery percent-encodes the bytes of a query as sent that a URI's
// query may not hold (RFC 3986 §3.4: non-ASCII bytes, controls, space,
// "#<>[\]^`{|}, and a % that begins no percent-encoding), so that a
// redirect's Location is a URI reference whose query is the one sent (a
// raw # would end it there); what a query may hold, its
// percent-encodings included, stays as sent.
func escapeQuery(raw string) string {
	const hex = "0123456789ABCDEF"
	var out []byte // nil while nothing needed escaping
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c > ' ' && c < 0x7f && strings.IndexByte(`"#<>[\]^`+"`{|}", c) < 0 && (c != '%' || escaped(raw[i+1:])) {
			if out != nil {
				out = append(out, c)
			}
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(raw)+8), raw[:i]...)
		}
		out = append(out, '%', hex[c>>4], hex[c&15])
	}
	if out == nil {
		return raw
	}
	return string(out)
}

// escaped reports whether s begins with two hex digits: a % before it is a
// percent-encoding.
func escaped(s string) bool {
	return len(s) >= 2 && isHex(s[0]) && isHex(s[1])
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// encodesReserved reports whether the encoded path raw has a reserved
// character percent-encoded (RFC 3986 §2.2).
func encodesReserved(raw string) bool {
	for i := 0; i+2 < len(raw); i++ {
		if raw[i] != '%' {
			continue
		}
		if b, err := strconv.ParseUint(raw[i+1:i+3], 16, 8); err == nil && strings.IndexByte(":/?#[]@!$&'()*+,;=", byte(b)) >= 0 {
			return true
		}
	}
	return false
}

// routeName is the name of the route r matched: its path below the base
// path (an alias's is its route's), or "" when none matched.
func routeName(r *http.Request) string {
	if cur := mux.CurrentRoute(r); cur != nil {
		return cur.GetName()
	}
	return ""
}

// allowedMethods lists the methods some route of router answers at req's
// path, and names the first such route (its name, as routeName gives it).
func allowedMethods(router *mux.Router, req *http.Request) (allowed []string, route string) {
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if router.Match(probe, &match) && match.MatchErr == nil {
			allowed = append(allowed, m)
			if route == "" && match.Route != nil {
				route = match.Route.GetName()
			}
		}
	}
	return allowed, route
}

// trimBase is the base path as it prefixes routes: "" or "/maps" (no
// trailing slash).
func trimBase(base string) string {
	base = strings.TrimRight(base, "/")
	if base != "" && !strings.HasPrefix(base, "/") {
		base = "/" + base
	}
	return base
}
