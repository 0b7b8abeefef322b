package server

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"
)

// openAPI is the description of the whole HTTP API (OpenAPI 3.1). The
// end-to-end tests check every response they get against it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPIDocument is the embedded description, with no servers.
func OpenAPIDocument() []byte { return append([]byte(nil), openAPI...) }

// OpenAPI serves GET /openapi.json: the description, its server the base
// path.
func OpenAPI(base string) http.Handler {
	var doc map[string]any
	body := openAPI
	if err := json.Unmarshal(openAPI, &doc); err == nil {
		doc["servers"] = []map[string]string{{"url": trimBase(base) + "/"}}
		if b, err := json.Marshal(doc); err == nil {
			body = b
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
}
