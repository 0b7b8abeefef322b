package server

import (
	_ "embed"
	"encoding/json"
	"net/http"

	"github.com/geotoll/geotoll/internal/etag"
)

// openAPI is the description of the whole HTTP API (OpenAPI 3.1). The
// end-to-end tests check every response they get against it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPIDocument is the description as served below base: its server is
// the base path without a trailing slash ("/maps"), or "/" at the root.
// OpenAPI appends a path to the server URL as it is, so "/maps/" would
// make "/maps//tiles".
func OpenAPIDocument(base string) []byte {
	var doc map[string]any
	if err := json.Unmarshal(openAPI, &doc); err != nil { // embedded and tested: unreachable
		return append([]byte(nil), openAPI...)
	}
	server := trimBase(base)
	if server == "" {
		server = "/"
	}
	doc["servers"] = []map[string]string{{"url": server}}
	b, err := json.Marshal(doc)
	if err != nil {
		return append([]byte(nil), openAPI...)
	}
	return b
}

// OpenAPI serves GET /openapi.json: the description, its server the base
// path, under Cache-Control: no-cache and a strong ETag (a hash of its
// bytes), so that a client revalidates it with If-None-Match and gets a 304
// until the binary or the base path changes.
func OpenAPI(base string) http.Handler {
	body := OpenAPIDocument(base)
	tag := etag.Of(body)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		etag.Serve(w, r, body, tag, "the OpenAPI document")
	})
}
