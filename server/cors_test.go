package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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
	r := httptest.NewRequest(method, "/healthz", nil)
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
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
	if w := corsRequest(h, http.MethodGet, ""); w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Error("CORS headers without an Origin")
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
	// A plain OPTIONS (not a preflight) goes to the router: 405.
	if w := corsRequest(h, http.MethodOptions, "https://maps.example.com"); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("plain OPTIONS: %d", w.Code)
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
