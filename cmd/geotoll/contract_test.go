package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/geotoll/geotoll/server"
)

// contract checks every response a test server sends against the OpenAPI
// document the server publishes (/openapi.json): its status, headers and
// body (problem documents included). A response that does not match fails
// the test that caused it. HEAD and CORS preflights are not described by
// the document and are not checked; nor is the router's own 404 or 405
// for a request no route takes (see byRouter), though it must still be a
// problem document. The redirect of a path not in canonical form is
// checked against the operation of its clean path (see checkRedirect).
type contract struct {
	fail func(format string, args ...any) // the test's Errorf
	v    *sharedValidator
}

// sharedValidator is a validator of the document of one base path, which
// contracts reuse one after another (see validators).
type sharedValidator struct {
	mu sync.Mutex // the validator is not known to be safe for concurrent use
	v  validator.Validator
}

// validators keeps, by base path, the validators no live contract holds:
// building one (parsing the document and checking it is valid OpenAPI)
// takes about 0.4 s of CPU under the race detector, and nearly every test
// starts a server that needs one. A contract holds its validator until its
// test ends, so the tests running at once never share one.
var validators struct {
	mu   sync.Mutex
	free map[string][]*sharedValidator
}

func newContract(t testing.TB, base string) *contract {
	t.Helper()
	validators.mu.Lock()
	var v *sharedValidator
	if free := validators.free[base]; len(free) > 0 {
		v, validators.free[base] = free[len(free)-1], free[:len(free)-1]
	}
	validators.mu.Unlock()
	if v == nil {
		v = &sharedValidator{v: buildValidator(t, base)}
	}
	t.Cleanup(func() {
		validators.mu.Lock()
		defer validators.mu.Unlock()
		if validators.free == nil {
			validators.free = map[string][]*sharedValidator{}
		}
		validators.free[base] = append(validators.free[base], v)
	})
	return &contract{fail: t.Errorf, v: v}
}

// buildValidator is a new validator of the document the server publishes
// under base, which it checks is valid OpenAPI 3.1.
func buildValidator(t testing.TB, base string) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(server.OpenAPIDocument(base))
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("openapi.json is not valid OpenAPI 3.1: %s", describe(verrs))
	}
	return v
}

// recording passes a response on and keeps a copy of it.
type recording struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recording) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recording) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recording) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// wrap checks the responses of next.
func (c *contract) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recording{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		c.check(r, rec)
	})
}

func (c *contract) check(r *http.Request, rec *recording) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if clean := canonicalPath(r.URL.Path); clean != r.URL.Path {
		c.checkRedirect(r, rec, status, clean)
		return
	}
	if byRouter(status, rec) {
		return
	}
	if errs := c.validate(r, status, rec); errs != nil {
		c.mismatch(r, rec, status, errs)
	}
}

// validate checks the answer rec of status to r against the document, and
// returns what does not match it (nil when it does).
func (c *contract) validate(r *http.Request, status int, rec *recording) []*errors.ValidationError {
	req := r.Clone(context.WithoutCancel(r.Context()))
	req.Body = http.NoBody
	resp := &http.Response{StatusCode: status, Header: rec.Header().Clone(), Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), Request: req}
	c.v.mu.Lock()
	ok, errs := c.v.v.ValidateHttpResponse(req, resp)
	c.v.mu.Unlock()
	if ok {
		return nil
	}
	if len(errs) == 0 {
		errs = []*errors.ValidationError{{Message: "invalid", Reason: "no reason given"}}
	}
	return errs
}

// mismatch fails the test with errs, what of the answer rec to r does not
// match the document.
func (c *contract) mismatch(r *http.Request, rec *recording, status int, errs []*errors.ValidationError) {
	body := rec.body.String()
	if len(body) > 300 {
		body = body[:300] + "…"
	}
	c.fail("%s %s → %d does not match openapi.json: %s\nheaders %v\nbody %s", r.Method, r.URL, status, describe(errs), rec.Header(), body)
}

// canonicalPath is p in canonical form, as the server redirects to it:
// no empty or dot segments, a trailing slash kept.
func canonicalPath(p string) string {
	clean := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// checkRedirect checks the answer to a request whose path is not in
// canonical form, which no templated path of the document matches as
// sent: it must be a 301 (GET) or 308 (any other method) without a body,
// its Location the clean path with the query as sent, and match the
// operation of the clean path. A clean path that no operation takes (the
// router would answer 404 or 405) belongs to no operation of the
// document, as byRouter's answers: its redirect is checked for its status,
// Location and empty body only.
func (c *contract) checkRedirect(r *http.Request, rec *recording, status int, clean string) {
	want := http.StatusPermanentRedirect
	if r.Method == http.MethodGet {
		want = http.StatusMovedPermanently
	}
	location := (&url.URL{Path: clean, RawQuery: r.URL.RawQuery}).String()
	if status != want || rec.Header().Get("Location") != location || rec.body.Len() != 0 {
		c.fail("%s %s → %d Location %q (%d bytes of body): a path not in canonical form must be a %d to %q without a body",
			r.Method, r.URL, status, rec.Header().Get("Location"), rec.body.Len(), want, location)
		return
	}
	cleaned := r.Clone(context.WithoutCancel(r.Context()))
	cleaned.URL.Path, cleaned.URL.RawPath = clean, ""
	errs := c.validate(cleaned, status, rec)
	for _, e := range errs {
		if e.ValidationType != helpers.PathValidation {
			c.mismatch(r, rec, status, errs)
			return
		}
	}
}

// byRouter reports whether rec is the router's own answer to a request no
// route takes — a 404 for an unknown path (outside the base path, or a
// route this listener does not serve, such as /metrics beside
// metrics_listen) or a 405 with Allow — which belongs to no operation of
// the document. Such an answer must still be a problem document of its
// status.
func byRouter(status int, rec *recording) bool {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		return false
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if rec.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(rec.body.Bytes(), &p) != nil ||
		p.Status != status || p.Type == "" || p.Title == "" {
		return false
	}
	if status == http.StatusNotFound {
		return p.Detail == "no such route"
	}
	return rec.Header().Get("Allow") != ""
}

func describe(errs []*errors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n  " + e.Message + ": " + e.Reason)
		for _, f := range e.SchemaValidationErrors {
			b.WriteString("\n    " + f.Reason)
		}
	}
	return b.String()
}

// TestOpenAPIDocumentValid: the published document is valid OpenAPI 3.1
// and names every route of the server.
func TestOpenAPIDocumentValid(t *testing.T) {
	buildValidator(t, "")
	doc := string(server.OpenAPIDocument(""))
	for _, p := range []string{server.PathHealth, server.PathReady, server.PathMetrics, server.PathOpenAPI, server.PathBudget,
		server.PathCatalog, "/tiles/{layer}.json", "/tiles/{layer}/{z}/{x}/{y}", server.PathWithin, server.PathBBox,
		server.PathContains, server.PathCheck, server.PathFences, "/geofence/fences/{id}", "/geofences", "/geofences/{id}", "/", "/web/{path}"} {
		if !strings.Contains(doc, `"`+p+`":`) {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
}

// TestContractCatchesMismatches: the contract fails a test on a response
// the document does not describe (a wrong body, an undocumented status, a
// missing header, a non-problem error) and passes the ones it does.
func TestContractCatchesMismatches(t *testing.T) {
	budget := `{"tier":"free","capacity":1000,"rate":10,"remaining":990,"reset_after":1,"shadow":false,"max_cost":500,"authenticated":true}`
	problem := func(status int, detail string) string {
		return fmt.Sprintf(`{"type":"urn:geotoll:problem:x","title":"x","status":%d,"detail":%q}`, status, detail)
	}
	for _, tc := range []struct {
		name, method, path string
		status             int
		contentType, body  string
		header             map[string]string
		ok                 bool
	}{
		{"budget as documented", "GET", "/budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc"}, true},
		{"budget lacking a field", "GET", "/budget", 200, "application/json", `{"tier":"free"}`, map[string]string{"X-Request-ID": "abc"}, false},
		{"budget with a field of the wrong type", "GET", "/budget", 200, "application/json", strings.Replace(budget, `"rate":10`, `"rate":"10"`, 1), map[string]string{"X-Request-ID": "abc"}, false},
		{"undocumented status", "GET", "/budget", 418, "application/problem+json", problem(418, "teapot"), map[string]string{"X-Request-ID": "abc"}, false},
		{"429 without its budget headers", "GET", "/budget", 429, "application/problem+json", problem(429, "spent"), map[string]string{"X-Request-ID": "abc", "Retry-After": "1"}, false},
		{"an error that is not a problem", "GET", "/budget", 503, "text/plain", "down", map[string]string{"X-Request-ID": "abc"}, false},
		{"the router's 404", "GET", "/no/such/route", 404, "application/problem+json", problem(404, "no such route"), nil, true},
		{"the router's 404 not a problem", "GET", "/no/such/route", 404, "text/plain", "404 page not found", nil, false},
		{"the router's 405 with Allow", "POST", "/tiles", 405, "application/problem+json", problem(405, "method POST is not allowed here"), map[string]string{"Allow": "GET, HEAD"}, true},
		{"a GET's redirect to the clean path", "GET", "//tiles/places.json?key=k", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/tiles/places.json?key=k"}, true},
		{"a POST's redirect past a dot segment", "POST", "/geofence/./check?layer=d", 308, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/geofence/check?layer=d"}, true},
		{"a DELETE's redirect to a templated path", "DELETE", "/geofence/fences/../fences/7", 308, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/geofence/fences/7"}, true},
		{"a redirect to a path no operation takes", "GET", "//no/such/route", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/no/such/route"}, true},
		{"a redirect without its request id", "GET", "//tiles/places.json", 301, "", "", map[string]string{"Location": "/tiles/places.json"}, false},
		{"a redirect to the wrong place", "GET", "//tiles/places.json?key=k", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/tiles/places.json"}, false},
		{"a POST's redirect as a 301", "POST", "//geofence/check", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/geofence/check"}, false},
		{"a GET's redirect as a 302", "GET", "//tiles", 302, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/tiles"}, false},
		{"a redirect with a body", "GET", "//tiles", 301, "text/plain", "moved", map[string]string{"X-Request-ID": "abc", "Location": "/tiles"}, false},
		{"a route's answer at a path not in canonical form", "GET", "//budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t, "")
			var failures []string
			c.fail = func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
			h := c.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
			if tc.ok && len(failures) > 0 {
				t.Errorf("a documented response failed the contract: %v", failures)
			}
			if !tc.ok && len(failures) == 0 {
				t.Error("an undocumented response passed the contract")
			}
		})
	}
}
