package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

func TestRedactQuery(t *testing.T) {
	got := RedactQuery("key=s3cret&lng=1&api_key=x")
	if strings.Contains(got, "s3cret") || strings.Contains(got, "=x") || !strings.Contains(got, "lng=1") {
		t.Fatalf("RedactQuery = %q", got)
	}
}

// A key sent in the query under another name than key — a typo (KEY,
// Key), another service's habit (apikey, access_token, token) — is not
// taken, but it is still a secret: the access log must not keep it.
func TestRedactQueryHidesAKeyUnderAnyName(t *testing.T) {
	key := "gt_" + strings.Repeat("x7", 21) + "Q" // the shape of a key apikeys.Generate makes
	for _, raw := range []string{
		"KEY=" + key, "Key=" + key, "apikey=" + key, "access_token=" + key, "token=" + key,
		"lng=1&k=" + key, "API_KEY=s3cret", "ApiKey=s3cret", "Access_Token=s3cret", "TOKEN=s3cret",
	} {
		got := RedactQuery(raw)
		if strings.Contains(got, key) || strings.Contains(got, "s3cret") {
			t.Errorf("RedactQuery(%q) = %q: the secret is logged", raw, got)
		}
	}
	// The mark anywhere in a value: a key after a space (it was logged).
	for _, raw := range []string{"x=%20" + key, "x=+" + key, "lng=1&x=my" + key} {
		if got := RedactQuery(raw); strings.Contains(got, key) {
			t.Errorf("RedactQuery(%q) = %q: the key is logged", raw, got)
		}
	}
	// A bare key is a parameter's name, with no value — or holds it, its
	// equals sign encoded (key%3Dgt_…: it was logged).
	for _, raw := range []string{key, "lng=1&" + key, key + "=1&lng=2", "key%3D" + key, "lng=1&key%3D" + key} {
		if got := RedactQuery(raw); strings.Contains(got, key) || !strings.Contains(got, "REDACTED") {
			t.Errorf("RedactQuery(%q) = %q: the bare key is logged", raw, got)
		}
	}
	if got := RedactQuery("layer=gt&lng=13.4&monkey=1"); got != "layer=gt&lng=13.4&monkey=1" {
		t.Errorf("RedactQuery hid what is no secret: %q", got)
	}
}

func TestRoutesAndMiddleware(t *testing.T) {
	var logs bytes.Buffer
	h := New(Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Ready: checkedNow(t, map[string]Check{
			"good": func(context.Context) error { return nil },
			"bad":  func(context.Context) error { return errors.New("boom") },
		}),
	})
	get := func(path string, hdr ...string) *httptest.ResponseRecorder {
		return serve(h, http.MethodGet, path, hdr...)
	}

	if w := get("/healthz"); w.Code != 200 || w.Body.String() != "ok\n" {
		t.Errorf("healthz %d %q", w.Code, w.Body)
	}
	w := get("/readyz")
	var ready struct {
		Ready  bool
		Checks map[string]string
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ready); err != nil || w.Code != 503 || ready.Ready ||
		ready.Checks["good"] != "ok" || !strings.Contains(ready.Checks["bad"], "boom") {
		t.Errorf("readyz %d %s", w.Code, w.Body)
	}
	w = get("/nope?key=s3cret", "X-Request-ID", "abc-123")
	if w.Code != 404 || w.Header().Get("Content-Type") != problem.ContentType {
		t.Errorf("unknown route: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if got := w.Header().Get("X-Request-ID"); got != "abc-123" {
		t.Errorf("request id not echoed: %q", got)
	}
	if w := get("/healthz", "X-Request-ID", "bad id with spaces"); w.Header().Get("X-Request-ID") == "bad id with spaces" {
		t.Error("unsafe request id echoed")
	}
	r := httptest.NewRequest(http.MethodPost, "/healthz", nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", w.Code)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("access log leaks ?key=")
	}
	if !strings.Contains(logs.String(), `"request_id":"abc-123"`) {
		t.Error("access log lacks the request id")
	}
	// An id that holds an API key is not taken: it would be logged in every
	// line of the request (it was, and echoed).
	key := "gt_" + strings.Repeat("x7", 21) + "Q"
	logs.Reset()
	if w := get("/healthz", "X-Request-ID", key); strings.Contains(w.Header().Get("X-Request-ID"), key) || strings.Contains(logs.String(), key) {
		t.Errorf("a request id that is a key: echoed %q, logged %q", w.Header().Get("X-Request-ID"), logs.String())
	}
	// A key in the path (a URL template with "&key=" for "?key=") is not
	// logged either (it was).
	logs.Reset()
	get("/tiles/places/0/0/0.mvt&key=" + key)
	if strings.Contains(logs.String(), key) || !strings.Contains(logs.String(), "REDACTED") {
		t.Errorf("a key in the path: logged %q", logs.String())
	}
}

func TestPanicBecomes500(t *testing.T) {
	var logs bytes.Buffer
	h := withAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("kaboom")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
	if w.Code != 500 || w.Header().Get("Content-Type") != problem.ContentType || strings.Contains(w.Body.String(), "kaboom") {
		t.Fatalf("panic answered %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if !strings.Contains(logs.String(), "kaboom") {
		t.Error("panic not logged")
	}
}

// tolledPlaces serves layer places (max_age 90 s), priced by a toll on
// an in-memory store, with tiles that render at once.
func tolledPlaces(t *testing.T) http.Handler {
	t.Helper()
	cat, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857", MaxAge: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r := &blockingRenderer{release: make(chan struct{})}
	close(r.release)
	gate := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	return New(Options{Tiles: &tiles.Handler{Catalog: cat, Store: r, Gate: gate}, Logger: discard()})
}

// A tile fetched with a key carries that caller's budget headers and was
// charged to it: a shared cache must not store it and hand it to others
// uncharged. Anonymous tiles stay public, and say that a keyed request is
// a different request.
func TestKeyedResponsesArePrivate(t *testing.T) {
	h := tolledPlaces(t)
	for _, tc := range []struct {
		name string
		set  func(*http.Request)
		want string
	}{
		{"X-API-Key", func(r *http.Request) { r.Header.Set("X-API-Key", "k1") }, "private, max-age=90"},
		{"Bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer k1") }, "private, max-age=90"},
		{"?key=", func(r *http.Request) { r.URL.RawQuery = "key=k1" }, "private, max-age=90"},
		{"anonymous", func(*http.Request) {}, "public, max-age=90"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/tiles/places/14/8802/5373.mvt", nil)
			tc.set(req)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK || w.Header().Get("X-Request-Cost") == "" {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if got := w.Header().Get("Cache-Control"); got != tc.want {
				t.Errorf("Cache-Control %q, want %q", got, tc.want)
			}
			if tc.name == "anonymous" {
				vary := strings.Join(w.Header().Values("Vary"), ",")
				if !strings.Contains(vary, "X-API-Key") || !strings.Contains(vary, "Authorization") {
					t.Errorf("an anonymous public tile has Vary %q: a shared cache could answer a keyed request with it", vary)
				}
			}
		})
	}
}

// OPTIONS asks which methods a resource takes (RFC 9110 §9.3.7): every
// route answers it, CORS or not, with 204 and Allow — OPTIONS included,
// as in a 405's Allow. An unknown path stays a 404, and without CORS a
// preflight gets no Access-Control-* header (the browser then refuses the
// cross-origin request, as it should).
func TestOptionsAnswersAllow(t *testing.T) {
	t.Parallel()
	do := serve
	plain := New(Options{Logger: quietLogger()})
	withCORS := New(Options{Logger: quietLogger(), CORS: CORS{Origins: []string{"https://maps.example.com"}}})
	for _, tc := range []struct {
		name   string
		h      http.Handler
		method string
		path   string
		hdr    []string
		status int
		allow  string
		cors   bool
	}{
		{"OPTIONS without CORS", plain, http.MethodOptions, "/healthz", nil, http.StatusNoContent, "GET, HEAD, OPTIONS", false},
		{"a preflight without CORS", plain, http.MethodOptions, "/healthz",
			[]string{"Origin", "https://maps.example.com", "Access-Control-Request-Method", "GET"}, http.StatusNoContent, "GET, HEAD, OPTIONS", false},
		{"a plain OPTIONS with CORS", withCORS, http.MethodOptions, "/readyz",
			[]string{"Origin", "https://maps.example.com"}, http.StatusNoContent, "GET, HEAD, OPTIONS", true},
		{"OPTIONS of an unknown path", plain, http.MethodOptions, "/nope", nil, http.StatusNotFound, "", false},
		{"a 405 names OPTIONS too", plain, http.MethodPost, "/healthz", nil, http.StatusMethodNotAllowed, "GET, HEAD, OPTIONS", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(tc.h, tc.method, tc.path, tc.hdr...)
			if w.Code != tc.status || w.Header().Get("Allow") != tc.allow {
				t.Fatalf("%d Allow %q, want %d %q", w.Code, w.Header().Get("Allow"), tc.status, tc.allow)
			}
			if w.Code == http.StatusNoContent && w.Body.Len() != 0 {
				t.Errorf("204 with a body: %q", w.Body)
			}
			if !tc.cors && w.Header().Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("CORS off, but Access-Control-Allow-Origin %q", w.Header().Get("Access-Control-Allow-Origin"))
			}
		})
	}
}

// A path that is not in canonical form (a double slash from a base URL
// with a trailing slash, a dot segment) is redirected to its clean form,
// with its query — the API key of a map client that cannot set headers,
// dry_run — unchanged. A GET or HEAD is sent a 301; any other method a 308,
// so that a client following it repeats the method and its body (after a
// 301 a client may, and browsers do, send a POST's retry as a GET).
func TestCleanPathRedirectKeepsQueryAndMethod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, base, method, target string
		status                     int
		location                   string
	}{
		{"GET with a key", "", http.MethodGet, "//tiles/places/1/0/0.mvt?key=gt_abc&dry_run=1", http.StatusMovedPermanently, "/tiles/places/1/0/0.mvt?key=gt_abc&dry_run=1"},
		{"HEAD", "", http.MethodHead, "/tiles/./places/1/0/0.mvt", http.StatusMovedPermanently, "/tiles/places/1/0/0.mvt"},
		{"below a base path", "/maps", http.MethodGet, "/maps//tiles/places.json?key=k%26y", http.StatusMovedPermanently, "/maps/tiles/places.json?key=k%26y"},
		{"POST keeps its method", "", http.MethodPost, "//geofence/check?layer=districts", http.StatusPermanentRedirect, "/geofence/check?layer=districts"},
		{"PUT keeps its method", "", http.MethodPut, "/geofence//fences/7", http.StatusPermanentRedirect, "/geofence/fences/7"},
		{"DELETE keeps its method", "", http.MethodDelete, "/geofence/fences/../fences/7", http.StatusPermanentRedirect, "/geofence/fences/7"},
		// The base path as typed, without its slash: its root, the preview.
		{"the base path itself", "/maps", http.MethodGet, "/maps?key=k", http.StatusMovedPermanently, "/maps/?key=k"},
		{"the base path's dot segment", "/maps", http.MethodGet, "/maps/x/..", http.StatusMovedPermanently, "/maps/"},
		// A query's bytes a URI may not hold are escaped in Location (it
		// was sent with raw UTF-8, no URI reference); its escapes stay.
		{"a query in UTF-8", "", http.MethodGet, "//tiles/places.json?z=caf\xc3\xa9&k=a%20b|c", http.StatusMovedPermanently, "/tiles/places.json?z=caf%C3%A9&k=a%20b%7Cc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{Logger: quietLogger(), BasePath: tc.base})
			// As a server reads it: the request target is the path and query.
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(`{"points":[]}`))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status || w.Header().Get("Location") != tc.location {
				t.Fatalf("%d Location %q, want %d %q", w.Code, w.Header().Get("Location"), tc.status, tc.location)
			}
		})
	}
}

// "GET *" (the asterisk form, a request of the server as a whole that only
// OPTIONS makes) names no resource: a 400 problem. It was redirected to
// /%2A.
func TestAsteriskTargetIsMalformed(t *testing.T) {
	t.Parallel()
	h := New(Options{Logger: quietLogger()})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL.Path, r.RequestURI = "*", "*"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || w.Header().Get("Location") != "" || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET *: %d Location %q %q, want a 400 problem", w.Code, w.Header().Get("Location"), w.Body)
	}
	// The absolute form with no path means "/" (RFC 9112 §3.2.2): it is
	// redirected there, query kept.
	abs := httptest.NewRequest(http.MethodGet, "http://maps.example.com?key=k", nil)
	abs.RequestURI = "http://maps.example.com?key=k"
	w = httptest.NewRecorder()
	h.ServeHTTP(w, abs)
	if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/?key=k" {
		t.Errorf("GET http://maps.example.com?key=k: %d Location %q, want 301 /?key=k", w.Code, w.Header().Get("Location"))
	}
}

// escapeQuery leaves a query a URI may hold as sent and escapes the rest:
// a raw # would end the query there for the client following the
// redirect, a % that begins no escape would be read as one.
func TestEscapeQuery(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"key=k&dry_run=1":    "key=k&dry_run=1",
		"key=k%26y&a=%C3%a9": "key=k%26y&a=%C3%a9",
		"z=caf\xc3\xa9":      "z=caf%C3%A9",
		"key=k#frag":         "key=k%23frag",
		"q=100%":             "q=100%25",
		"q=%zz&r=%4":         "q=%25zz&r=%254",
		"a=[1]&b={2}|c":      "a=%5B1%5D&b=%7B2%7D%7Cc",
		"s=a b\t\"q\"":       "s=a%20b%09%22q%22",
		"ok=/?:@!$'()*+,;=":  "ok=/?:@!$'()*+,;=",
	} {
		if got := escapeQuery(raw); got != want {
			t.Errorf("escapeQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}

// An encoded slash is not a slash, an encoded comma not a comma (RFC 3986
// §2.2): a path with a reserved character percent-encoded is not found,
// never redirected nor served as the path with that character there —
// places%2Cdistricts was served as the composite places,districts, one
// tile under two addresses. Any other encoding but the canonical one is
// redirected to it, query kept: an encoded dot segment is a dot segment,
// an encoded letter, digit or dot the letter, digit or dot (they were
// served as they were, each address a cache entry of its own).
func TestEncodedSlashIsNotFound(t *testing.T) {
	t.Parallel()
	// The preview's assets route takes any path below /web/: it would
	// serve whatever the router is handed.
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, mux.Vars(r)["path"]) })
	h := New(Options{Logger: quietLogger(), Web: web})
	for _, target := range []string{"/%2Fhealthz", "/x/..%2fhealthz", "/x/..%2F..%2Fhealthz?key=k",
		"/web/places%2Cdistricts/5/17/10.mvt", "/web/places%2cdistricts", "/web/0.mvt%3Bx", "/web/a%2Fb"} {
		w := serve(h, http.MethodGet, target)
		if w.Code != http.StatusNotFound || w.Header().Get("Location") != "" || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d Location %q Content-Type %q %q, want a 404 problem", target, w.Code, w.Header().Get("Location"), w.Header().Get("Content-Type"), w.Body)
		}
	}
	for target, want := range map[string]string{
		"/x/%2E%2E/healthz":             "/healthz",
		"/web/pl%61ces/0/0/0.mvt":       "/web/places/0/0/0.mvt",
		"/web/places/%30/0/0.mvt?key=k": "/web/places/0/0/0.mvt?key=k",
		"/web/places/0/0/0%2Emvt":       "/web/places/0/0/0.mvt",
		"/web/places/0%2emvt?dry_run=1": "/web/places/0.mvt?dry_run=1",
		"/web/caf%c3%a9":                "/web/caf%C3%A9",
	} {
		if w := serve(h, http.MethodGet, target); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != want {
			t.Errorf("GET %s: %d Location %q, want 301 %s", target, w.Code, w.Header().Get("Location"), want)
		}
	}
	for _, target := range []string{"/web/places,districts/5/17/10.mvt", "/web/caf%C3%A9"} {
		if w := serve(h, http.MethodGet, target); w.Code != http.StatusOK {
			t.Errorf("GET %s (canonical): %d %q, want 200", target, w.Code, w.Body)
		}
	}
}

// serve sends h a request of method for path with the header pairs hdr
// (name, value, name, value…) and returns what h answered.
func serve(h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A panic after the answer's head was sent cannot become a 500: the
// access log says the answer was cut short, and the connection is cut
// (http.ErrAbortHandler), so that the client does not take what was
// written for the whole answer.
func TestPanicAfterTheHeadAbortsTheAnswer(t *testing.T) {
	var logs bytes.Buffer
	h := withAccessLog(slog.New(slog.NewJSONHandler(&logs, nil)), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("half"))
		panic("kaboom")
	}))
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("a panic after the head: %v, want http.ErrAbortHandler", v)
		}
		if !strings.Contains(logs.String(), "kaboom") || !strings.Contains(logs.String(), "request cut short by a panic") {
			t.Errorf("the log does not say the answer was cut short:\n%s", logs.String())
		}
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
}
