package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestCORSValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    CORS
		ok   bool
	}{
		{"off", CORS{}, true},
		{"star", CORS{Origins: []string{"*"}}, true},
		{"listed with credentials", CORS{Origins: []string{"https://maps.example.com", "http://localhost:5173"}, Credentials: true}, true},
		{"star with credentials", CORS{Origins: []string{"*"}, Credentials: true}, false},
		{"star among others with credentials", CORS{Origins: []string{"https://a.example", "*"}, Credentials: true}, false},
		{"path", CORS{Origins: []string{"https://a.example/maps"}}, false},
		{"trailing slash", CORS{Origins: []string{"https://a.example/"}}, false},
		{"no scheme", CORS{Origins: []string{"a.example"}}, false},
		{"other scheme", CORS{Origins: []string{"ftp://a.example"}}, false},
		{"userinfo", CORS{Origins: []string{"https://u@a.example"}}, false},
		{"null", CORS{Origins: []string{"null"}}, false},
		{"negative max age", CORS{Origins: []string{"*"}, MaxAge: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate(%+v) = %v, want ok=%v", tc.c, err, tc.ok)
			}
		})
	}
}

func corsHandler(c CORS) http.Handler {
	return New(Options{CORS: c, Logger: quietLogger()})
}

func corsRequest(h http.Handler, method, origin string, hdr ...string) *httptest.ResponseRecorder {
	if origin != "" {
		hdr = append([]string{"Origin", origin}, hdr...)
	}
	return serve(h, method, "/healthz", hdr...)
}

func TestCORSWildcard(t *testing.T) {
	t.Parallel()
	h := corsHandler(CORS{Origins: []string{"*"}})
	w := corsRequest(h, http.MethodGet, "https://anywhere.example")
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "*" || w.Header().Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("simple request: %d %v", w.Code, w.Header())
	}
	expose := w.Header().Get("Access-Control-Expose-Headers")
	for _, hdr := range []string{"ETag", "X-Cache", "RateLimit", "X-Request-Cost", "Retry-After", "X-Tile-Reduced"} {
		if !strings.Contains(expose, hdr) {
			t.Errorf("Expose-Headers %q lacks %s", expose, hdr)
		}
	}
	if slices.Contains(w.Header().Values("Vary"), "Origin") {
		t.Error("a wildcard answer varies by Origin")
	}
	pre := corsRequest(h, http.MethodOptions, "https://anywhere.example",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-api-key")
	if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(pre.Header().Get("Access-Control-Allow-Headers"), "X-API-Key") ||
		!strings.Contains(pre.Header().Get("Access-Control-Allow-Methods"), "GET") ||
		pre.Header().Get("Access-Control-Max-Age") != "600" {
		t.Errorf("preflight: %d %v", pre.Code, pre.Header())
	}
	// A request without Origin gets the same headers: a shared cache may
	// keep its answer (a public tile) and hand it to a map on another
	// origin, whose browser refuses it without them.
	plain := corsRequest(h, http.MethodGet, "")
	if plain.Header().Get("Access-Control-Allow-Origin") != "*" || plain.Header().Get("Access-Control-Expose-Headers") != expose {
		t.Errorf("without an Origin: Allow-Origin %q, Expose-Headers %q; want *, %q",
			plain.Header().Get("Access-Control-Allow-Origin"), plain.Header().Get("Access-Control-Expose-Headers"), expose)
	}
	if slices.Contains(plain.Header().Values("Vary"), "Origin") {
		t.Error("a wildcard answer without an Origin varies by Origin")
	}
	if missing := serve(h, http.MethodGet, "/nope"); missing.Code != http.StatusNotFound ||
		missing.Header().Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("a 404 without an Origin: %d, Allow-Origin %q; want 404, *", missing.Code, missing.Header().Get("Access-Control-Allow-Origin"))
	}
}

func TestCORSListedOriginsWithCredentials(t *testing.T) {
	t.Parallel()
	h := corsHandler(CORS{Origins: []string{"https://maps.example.com"}, Credentials: true})
	w := corsRequest(h, http.MethodGet, "https://maps.example.com")
	if w.Header().Get("Access-Control-Allow-Origin") != "https://maps.example.com" ||
		w.Header().Get("Access-Control-Allow-Credentials") != "true" || !slices.Contains(w.Header().Values("Vary"), "Origin") {
		t.Errorf("allowed origin: %v", w.Header())
	}
	other := corsRequest(h, http.MethodGet, "https://evil.example")
	if other.Code != 200 || other.Header().Get("Access-Control-Allow-Origin") != "" || other.Header().Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("other origin: %d %v (the request is served, without CORS headers)", other.Code, other.Header())
	}
	if !slices.Contains(other.Header().Values("Vary"), "Origin") {
		t.Error("the answer to another origin does not vary by Origin: a cache could hand it to the allowed one")
	}
	pre := corsRequest(h, http.MethodOptions, "https://evil.example", "Access-Control-Request-Method", "GET")
	if pre.Code != http.StatusForbidden || pre.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight of another origin: %d %v", pre.Code, pre.Header())
	}
	// A plain OPTIONS (not a preflight) goes to the router: 204 with Allow.
	if w := corsRequest(h, http.MethodOptions, "https://maps.example.com"); w.Code != http.StatusNoContent || w.Header().Get("Allow") != "GET, HEAD, OPTIONS" {
		t.Errorf("plain OPTIONS: %d Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

// A preflight names the methods the path's routes take (Allow and
// Access-Control-Allow-Methods alike): a browser told it may POST to a
// tile would send one and get a 405. A preflight of a path no route
// answers is a 404, as any OPTIONS there is; an OPTIONS without Origin is
// no preflight, whatever else it carries: the router answers it.
func TestCORSPreflightNamesThePathsMethods(t *testing.T) {
	t.Parallel()
	h := corsHandler(CORS{Origins: []string{"https://maps.example.com"}})
	pre := serve(h, http.MethodOptions, "/healthz", "Origin", "https://maps.example.com", "Access-Control-Request-Method", "GET")
	if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Methods") != "GET, HEAD" ||
		pre.Header().Get("Allow") != "GET, HEAD, OPTIONS" || pre.Header().Get("Access-Control-Allow-Origin") != "https://maps.example.com" {
		t.Errorf("preflight of /healthz: %d %v; want 204, Allow-Methods \"GET, HEAD\", Allow \"GET, HEAD, OPTIONS\"", pre.Code, pre.Header())
	}
	// A path not in canonical form (a base URL ending in /) is redirected,
	// and the browser's request follows: its preflight names the methods
	// of the canonical path.
	for _, path := range []string{"//healthz", "/x/../healthz"} {
		pre := serve(h, http.MethodOptions, path, "Origin", "https://maps.example.com", "Access-Control-Request-Method", "GET")
		if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Methods") != "GET, HEAD" {
			t.Errorf("preflight of %s: %d %v; want 204, Allow-Methods \"GET, HEAD\"", path, pre.Code, pre.Header())
		}
	}
	nowhere := serve(h, http.MethodOptions, "/no/such/route", "Origin", "https://maps.example.com", "Access-Control-Request-Method", "GET")
	if nowhere.Code != http.StatusNotFound || nowhere.Header().Get("Access-Control-Allow-Methods") != "" ||
		nowhere.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("preflight of an unknown path: %d %v; want a 404 problem without Allow-Methods", nowhere.Code, nowhere.Header())
	}
	plain := serve(h, http.MethodOptions, "/healthz", "Access-Control-Request-Method", "GET")
	if plain.Code != http.StatusNoContent || plain.Header().Get("Allow") != "GET, HEAD, OPTIONS" ||
		plain.Header().Get("Access-Control-Allow-Methods") != "" || plain.Header().Get("Access-Control-Max-Age") != "" {
		t.Errorf("OPTIONS without Origin: %d %v; want the router's 204 with Allow, no preflight headers", plain.Code, plain.Header())
	}
}

func TestCORSOff(t *testing.T) {
	t.Parallel()
	w := corsRequest(corsHandler(CORS{}), http.MethodGet, "https://a.example")
	for k := range w.Header() {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("CORS off but %s sent", k)
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// exposedHeaders is Access-Control-Expose-Headers as a set.
func exposedHeaders(h http.Header) map[string]bool {
	out := map[string]bool{}
	for _, v := range strings.Split(h.Get("Access-Control-Expose-Headers"), ",") {
		out[http.CanonicalHeaderKey(strings.TrimSpace(v))] = true
	}
	return out
}

// A script on another origin reads only the CORS-safelisted response
// headers and those exposed: every header the API sets for its clients —
// the budget, the price paid at the door, where a new fence lives, what
// to retry after, which methods a route takes — must be exposed.
func TestCORSExposesWhatClientsRead(t *testing.T) {
	t.Parallel()
	w := corsRequest(corsHandler(CORS{Origins: []string{"*"}}), http.MethodGet, "https://maps.example.com")
	exposed := exposedHeaders(w.Header())
	for _, hdr := range []string{
		"Allow", "ETag", "Location", "RateLimit", "RateLimit-Policy", "Retry-After", "WWW-Authenticate",
		"X-Cache", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Shadow",
		"X-Request-Cost", "X-Request-Cost-Estimate", "X-Request-ID", "X-Tile-Reduced",
	} {
		if !exposed[http.CanonicalHeaderKey(hdr)] {
			t.Errorf("Access-Control-Expose-Headers lacks %s", hdr)
		}
	}
}

// Every response header the server's packages set by name is exposed, or
// CORS-safelisted, or of no use to a script (listed here with why): a
// header added later without being exposed fails this test.
func TestCORSExposesEveryHeaderTheServerSets(t *testing.T) {
	t.Parallel()
	exposed := exposedHeaders(corsRequest(corsHandler(CORS{Origins: []string{"*"}}), http.MethodGet, "https://a.example").Header())
	notForScripts := map[string]string{
		"Cache-Control": "safelisted", "Content-Language": "safelisted", "Content-Length": "safelisted",
		"Content-Type": "safelisted", "Expires": "safelisted", "Last-Modified": "safelisted", "Pragma": "safelisted",
		"Vary": "for caches", "Age": "for caches", "Connection": "for the connection", "Content-Encoding": "decoded by the browser",
		"Content-Security-Policy": "for the browser", "Referrer-Policy": "for the browser", "X-Content-Type-Options": "for the browser",
		"Accept-Encoding": "a request header (tests, load test client)", "X-Api-Key": "a request header",
		"Accept-Post": "on a 415 whose problem detail names the media types too, as Accept-Encoding's does the coding",
	}
	set := map[string][]string{}
	for _, dir := range []string{".", "../toll", "../tiles", "../geofence", "../problem", "../web", "../internal/pgcall"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) != 2 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Set" && sel.Sel.Name != "Add") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				name, err := strconv.Unquote(lit.Value)
				if err != nil || name == "" || strings.ContainsAny(name, " =:/{}") || name[0] < 'A' || name[0] > 'Z' {
					return true // not a header name (a query parameter, a span attribute…)
				}
				name = http.CanonicalHeaderKey(name)
				set[name] = append(set[name], file)
				return true
			})
		}
	}
	if len(set) < 10 {
		t.Fatalf("found only %d header names set: the scan is broken", len(set))
	}
	for name, files := range set {
		if strings.HasPrefix(name, "Access-Control-") || exposed[name] || notForScripts[name] != "" {
			continue
		}
		t.Errorf("%s (set in %v) is neither exposed to scripts on other origins nor listed as of no use to them", name, files)
	}
}

// MapLibre and browsers send Cache-Control and Pragma on a reload (and a
// client asking for a fresh render sets Cache-Control: no-cache itself):
// a preflight that does not allow them fails every such request.
func TestCORSPreflightAllowsCacheHeaders(t *testing.T) {
	t.Parallel()
	pre := corsRequest(corsHandler(CORS{Origins: []string{"*"}}), http.MethodOptions, "https://maps.example.com",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "cache-control, pragma, x-api-key")
	allowed := map[string]bool{}
	for _, v := range strings.Split(pre.Header().Get("Access-Control-Allow-Headers"), ",") {
		allowed[http.CanonicalHeaderKey(strings.TrimSpace(v))] = true
	}
	for _, hdr := range []string{"Authorization", "Cache-Control", "Content-Type", "If-Match", "If-None-Match", "Pragma", "X-API-Key", "X-Request-ID"} {
		if !allowed[http.CanonicalHeaderKey(hdr)] {
			t.Errorf("preflight: Access-Control-Allow-Headers %q lacks %s", pre.Header().Get("Access-Control-Allow-Headers"), hdr)
		}
	}
}

// A browser app instrumented with OpenTelemetry sends the W3C trace
// context (traceparent, tracestate) with every request, which the
// server's spans follow: a preflight that does not allow them fails every
// such request.
func TestCORSPreflightAllowsTraceContext(t *testing.T) {
	t.Parallel()
	for _, origins := range [][]string{{"*"}, {"https://maps.example.com"}} {
		pre := corsRequest(corsHandler(CORS{Origins: origins}), http.MethodOptions, "https://maps.example.com",
			"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "traceparent, tracestate")
		allowed := map[string]bool{}
		for _, v := range strings.Split(pre.Header().Get("Access-Control-Allow-Headers"), ",") {
			allowed[strings.ToLower(strings.TrimSpace(v))] = true
		}
		if pre.Code != http.StatusNoContent || !allowed["traceparent"] || !allowed["tracestate"] {
			t.Errorf("origins %q: preflight %d, Access-Control-Allow-Headers %q; want 204 allowing traceparent and tracestate",
				origins, pre.Code, pre.Header().Get("Access-Control-Allow-Headers"))
		}
	}
}
