package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/tiles"
)

// Every operation of the document describes the redirect cleanPath sends
// at a path not in canonical form: a 301 for a GET (and HEAD), a 308 for
// any other method (OPTIONS too), each a Redirect with its Location.
func TestOpenAPIDescribesRedirects(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]struct {
				Headers map[string]struct {
					Ref string `json:"$ref"`
				} `json:"headers"`
				Content map[string]any `json:"content"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPIDocument(""), &doc); err != nil {
		t.Fatal(err)
	}
	redirect, ok := doc.Components.Responses["Redirect"]
	if !ok || redirect.Headers["Location"].Ref != "#/components/headers/Location" || redirect.Content != nil {
		t.Fatalf("components.responses.Redirect: %+v, want a Location header and no body", redirect)
	}
	want := map[string]string{"get": "301", "head": "301", "post": "308", "put": "308", "patch": "308", "delete": "308", "options": "308"}
	operations := 0
	for p, item := range doc.Paths {
		for method, raw := range item {
			code, isMethod := want[method]
			if !isMethod {
				continue
			}
			operations++
			var op struct {
				Responses map[string]struct {
					Ref string `json:"$ref"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, p, err)
			}
			if op.Responses[code].Ref != "#/components/responses/Redirect" {
				t.Errorf("%s %s does not answer %s with the Redirect response", method, p, code)
			}
		}
	}
	if operations == 0 {
		t.Fatal("no operations in openapi.json")
	}
}

// /openapi.json is no-cache, so a client revalidates it before each reuse:
// it carries a strong ETag, a GET naming it is a 304 without a body, and
// another base path (another document) has another.
func TestOpenAPIRevalidates(t *testing.T) {
	t.Parallel()
	h := OpenAPI("")
	first := serve(h, http.MethodGet, "/openapi.json")
	tag := first.Header().Get("ETag")
	if first.Code != http.StatusOK || !strings.HasPrefix(tag, `"`) || first.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("GET: %d, ETag %q, Cache-Control %q; want 200 with a strong ETag, no-cache", first.Code, tag, first.Header().Get("Cache-Control"))
	}
	again := serve(h, http.MethodGet, "/openapi.json", "If-None-Match", `"old", `+tag)
	if again.Code != http.StatusNotModified || again.Body.Len() != 0 || again.Header().Get("ETag") != tag {
		t.Errorf("GET naming the ETag: %d, %d bytes, ETag %q; want a bodiless 304 with it", again.Code, again.Body.Len(), again.Header().Get("ETag"))
	}
	if bad := serve(h, http.MethodGet, "/openapi.json", "If-None-Match", tag+" x"); bad.Code != http.StatusBadRequest {
		t.Errorf("an If-None-Match that does not parse: %d, want 400", bad.Code)
	}
	if other := serve(OpenAPI("/maps"), http.MethodGet, "/openapi.json").Header().Get("ETag"); other == tag || other == "" {
		t.Errorf("the document below /maps has ETag %q, the root's %q: want another", other, tag)
	}
}

// Every route's name — the route label of the metrics and the spans — is
// a path of /openapi.json, as the metrics' help says: the fence route and
// the preview's files were named by their mux patterns
// ("/geofence/fences/{id:[0-9]+}", "/web/{path:.*}"), which the document
// does not name.
func TestRouteNamesAreTheDocumentsPaths(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	o := Options{Tiles: &tiles.Handler{}, Geofence: &geofence.Handler{}, Web: http.NotFoundHandler(),
		OpenAPI: http.NotFoundHandler(), Budget: http.NotFoundHandler()}
	names := 0
	err := newRouter("/maps", o.routes()).Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		names++
		if _, ok := doc.Paths[route.GetName()]; !ok {
			t.Errorf("route %q is not a path of openapi.json", route.GetName())
		}
		return nil
	})
	if err != nil || names < 20 {
		t.Fatalf("walked %d routes (%v): the walk is broken", names, err)
	}
}
