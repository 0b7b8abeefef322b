package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/geotoll/geotoll/problem"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		detail     string
		param      string
		retryAfter string
	}{
		{"malformed", problem.Malformed("z", "z must be a number"), 400, "z must be a number", "z", ""},
		{"out of range", problem.Range("radius", "too big"), 422, "too big", "radius", ""},
		{"not found", problem.Missing("layer", "unknown layer"), 404, "unknown layer", "layer", ""},
		{"wrapped keeps code", fmt.Errorf("ctx: %w", problem.Range("x", "bad x")), 422, "bad x", "x", ""},
		{"timeout", &problem.Error{Code: problem.Timeout, Detail: "slow", RetryAfter: 2}, 503, "slow", "", "2"},
		{"internal hides cause", errors.New("pq: password=hunter2"), 500, "internal error", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			problem.Write(w, httptest.NewRequest(http.MethodGet, "/p", nil), tc.err)
			if w.Code != tc.status || w.Header().Get("Content-Type") != problem.ContentType {
				t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
			}
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			var doc map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if doc["status"] != float64(tc.status) || doc["detail"] != tc.detail || doc["instance"] != "/p" ||
				!strings.HasPrefix(doc["type"].(string), problem.TypeBase) {
				t.Errorf("doc %v", doc)
			}
			if p, _ := doc["param"].(string); p != tc.param {
				t.Errorf("param %q, want %q", p, tc.param)
			}
			if strings.Contains(w.Body.String(), "hunter2") {
				t.Error("internal cause leaked")
			}
		})
	}
}

func TestUnknownCodeIs500(t *testing.T) {
	if got := problem.Status("made-up"); got != 500 {
		t.Fatalf("Status(made-up) = %d", got)
	}
}

// TestInstanceIsTheRequestsURIReference: instance is a URI reference
// (RFC 9457 §3.1.5) naming the request's own path. The decoded path is
// not one: "/tiles/a%3Fb/1/1/1.mvt" decoded reads as the path /tiles/a with
// a query, "%23" as a fragment, a space or a byte that is not UTF-8 as no
// URI at all.
func TestInstanceIsTheRequestsURIReference(t *testing.T) {
	for _, target := range []string{
		"/p",
		"/tiles/a%3Fb/1/1/1.mvt",
		"/tiles/a%23b/1/1/1.mvt",
		"/tiles/a%20b/1/1/1.mvt",
		"/tiles/%FF%FE/1/1/1.mvt",
		"/tiles/%E2%98%83/1/1/1.mvt",
		"/geofence/fences/1%2F2",
	} {
		t.Run(target, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			w := httptest.NewRecorder()
			problem.Write(w, r, problem.Missing("layer", "unknown layer"))
			var doc struct{ Instance string }
			if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(doc.Instance)
			if err != nil || u.RawQuery != "" || u.Fragment != "" || u.Path != r.URL.Path || strings.ContainsAny(doc.Instance, " \uFFFD") {
				t.Fatalf("instance %q (parsed: %v, path %q, query %q, fragment %q): want a URI reference to the path %q",
					doc.Instance, err, u.Path, u.RawQuery, u.Fragment, r.URL.Path)
			}
		})
	}
}
