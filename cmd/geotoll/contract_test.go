package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/parameters"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	lowv3 "github.com/pb33f/libopenapi/datamodel/low/v3"
	"github.com/pb33f/libopenapi/orderedmap"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/server"
)

// contract checks every response a test server sends against the OpenAPI
// document the server publishes (/openapi.json): its status, headers and
// body (problem documents included), for every method — HEAD, OPTIONS and
// CORS preflights too. A response that does not match fails the test that
// caused it. Every header it carries must be one the document lists for
// it, but for a few any response may carry (see genericHeader), and its
// value one the header's schema takes, read as sent (see valueErrors);
// the budget headers come together, on priced answers only (see
// budgetApart). The router's 405 for a method no route takes at a path
// must name in Allow the operations the document gives that path, and
// match the document's MethodNotAllowed response (see checkNotAllowed).
// The router's own 404 for a path no route takes is in no operation (see
// routerNotFound): it must match the document's NotFound response. The
// redirect of a path not in canonical form is checked against the
// operation of its clean path, or the document's Redirect response when
// no operation takes that path (see checkRedirect).
type contract struct {
	fail func(format string, args ...any) // the test's Errorf
	v    *sharedValidator
}

// sharedValidator is a validator of the document of one base path, which
// contracts reuse one after another (see validators), with the document's
// model, the options valueErrors reads header values with, and the path
// items of the router's own answers, which belong to no operation of the
// document (see routerItem): its 405 (MethodNotAllowed, see
// checkNotAllowed), its 404 (NotFound) and its redirects (Redirect).
type sharedValidator struct {
	mu                             sync.Mutex // the validator is not known to be safe for concurrent use
	v                              validator.Validator
	doc                            *v3.Document
	opts                           *config.ValidationOptions
	notAllowed, notFound, redirect *v3.PathItem
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
		v = buildShared(t, base)
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

// buildShared is a new validator of the document the server publishes
// under base, which it checks is valid OpenAPI 3.1.
func buildShared(t testing.TB, base string) *sharedValidator {
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
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	return &sharedValidator{v: v, doc: &model.Model, opts: config.NewValidationOptions(config.WithFormatAssertions()),
		notAllowed: routerItem(t, &model.Model, "MethodNotAllowed", "405"),
		notFound:   routerItem(t, &model.Model, "NotFound", "404"),
		redirect:   routerItem(t, &model.Model, "Redirect", "301", "308")}
}

// routerItem is a path item whose every method answers codes with the
// document's components.responses.name: the operation of an answer the
// router gives itself, at a path or for a method no operation takes.
func routerItem(t testing.TB, doc *v3.Document, name string, codes ...string) *v3.PathItem {
	t.Helper()
	resp := doc.Components.Responses.GetOrZero(name)
	if resp == nil {
		t.Fatalf("openapi.json has no components.responses.%s", name)
	}
	byCode := orderedmap.New[string, *v3.Response]()
	for _, code := range codes {
		byCode.Set(code, resp)
	}
	op := &v3.Operation{Responses: &v3.Responses{Codes: byCode}}
	return &v3.PathItem{Get: op, Head: op, Post: op, Put: op, Patch: op, Delete: op, Options: op, Trace: op}
}

// recording passes a response on and keeps a copy of it: of its body what
// the client gets — nothing, for a HEAD (net/http drops what its handler
// writes).
type recording struct {
	http.ResponseWriter
	status int
	head   bool
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
	if !r.head {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recording) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// wrap checks the responses of next.
func (c *contract) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recording{ResponseWriter: w, head: r.Method == http.MethodHead}
		next.ServeHTTP(rec, r)
		c.check(r, rec)
	})
}

func (c *contract) check(r *http.Request, rec *recording) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	switch clean := canonicalPath(r.URL.Path); {
	case clean != r.URL.Path:
		c.checkRedirect(r, rec, status, clean)
	case routerNotFound(status, rec):
		c.checkRouter(r, rec, status, c.v.notFound)
	case status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "":
		c.checkNotAllowed(r, rec)
	default:
		errs := c.validate(r, status, rec, nil)
		if errs == nil {
			errs = c.headerErrors(r, status, rec, nil)
		}
		if err := keyVaryMissing(rec.Header()); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, budgetApart(status, rec)...)
		if errs != nil {
			c.mismatch(r, rec, status, errs)
		}
	}
}

// checkRouter checks an answer the router gives itself, which belongs to
// no operation of the document, against item (see routerItem): its body
// and headers, their values included.
func (c *contract) checkRouter(r *http.Request, rec *recording, status int, item *v3.PathItem) {
	errs := c.validate(r, status, rec, item)
	if errs == nil {
		errs = c.headerErrors(r, status, rec, item.Get.Responses.Codes.GetOrZero(strconv.Itoa(status)))
	}
	if errs != nil {
		c.mismatch(r, rec, status, errs)
	}
}

// validate checks the answer rec of status to r against the document — the
// operation of r's method at r's path, or that of item when it is not nil
// — and returns what does not match it (nil when it does).
func (c *contract) validate(r *http.Request, status int, rec *recording, item *v3.PathItem) []*errors.ValidationError {
	req := r.Clone(context.WithoutCancel(r.Context()))
	req.Body = http.NoBody
	resp := &http.Response{StatusCode: status, Header: rec.Header().Clone(), Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), Request: req}
	c.v.mu.Lock()
	var ok bool
	var errs []*errors.ValidationError
	if item == nil {
		ok, errs = c.v.v.ValidateHttpResponse(req, resp)
	} else {
		ok, errs = c.v.v.GetResponseBodyValidator().ValidateResponseBodyWithPathItem(req, resp, item, "")
	}
	c.v.mu.Unlock()
	if ok {
		return nil
	}
	if len(errs) == 0 {
		errs = []*errors.ValidationError{{Message: "invalid", Reason: "no reason given"}}
	}
	return errs
}

// genericHeader reports whether any response may carry the header name
// without the document listing it: what the HTTP server or any HTTP
// response carries (Date, Content-Length, Content-Type — the document's
// content says which —, Connection). CORS's Access-Control-* headers are
// not: the document lists them where they may be sent.
func genericHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Date", "Content-Length", "Content-Type", "Connection":
		return true
	}
	return false
}

// corsVary are the members of Vary that CORS adds, as generic as its
// headers: Origin (listed origins), and a preflight's request headers.
var corsVary = map[string]bool{"origin": true, "access-control-request-method": true, "access-control-request-headers": true}

// onlyCORSVary reports whether the values of a Vary name CORS's members
// only (corsVary).
func onlyCORSVary(values []string) bool {
	for _, v := range values {
		for m := range strings.SplitSeq(v, ",") {
			if !corsVary[strings.ToLower(strings.TrimSpace(m))] {
				return false
			}
		}
	}
	return true
}

// headerErrors returns what of the headers of rec, the answer of status
// to r, the document does not describe for it — the response of r's
// operation, or resp when it is not nil: a header it does not list and
// that is not generic (genericHeader; a Vary of CORS's members only counts
// as none), or a value the schema of a header it lists does not take (see
// valueErrors).
func (c *contract) headerErrors(r *http.Request, status int, rec *recording, resp *v3.Response) []*errors.ValidationError {
	if resp == nil {
		resp = c.documented(r, status)
	}
	if resp == nil { // the validator found one: its path matching and documented's differ
		return []*errors.ValidationError{{Message: "No documented response", Reason: "the response the validator matched was not found again to list its headers"}}
	}
	var errs []*errors.ValidationError
	for name, values := range rec.Header() {
		var listed *v3.Header
		if resp.Headers != nil {
			for k, h := range resp.Headers.FromOldest() {
				if strings.EqualFold(k, name) {
					listed = h
				}
			}
		}
		switch {
		case listed != nil:
			errs = append(errs, c.valueErrors(name, values, listed)...)
		case genericHeader(name) || http.CanonicalHeaderKey(name) == "Vary" && onlyCORSVary(values):
		default:
			errs = append(errs, &errors.ValidationError{Message: "Undocumented header",
				Reason: fmt.Sprintf("header %s (%q) is not among the headers the document lists for this response", name, values)})
		}
	}
	return errs
}

// valueErrors checks the value of the header name, as sent, against the
// schema the document gives it (its type, enum, const, pattern, format…):
// its field lines as one list (RFC 9110 §5.3: a header that takes one
// value sent twice is two), read as the schema's type says and in no other
// way — the text itself for a string, an integer only when the text is
// one. The validator also tries other readings, JSON among them, so that a
// quoted "no-store" passes a const no-store, and "99" sent twice a pattern
// of digits.
func (c *contract) valueErrors(name string, values []string, h *v3.Header) []*errors.ValidationError {
	c.v.mu.Lock()
	defer c.v.mu.Unlock()
	var schema *base.Schema
	if h.Schema != nil {
		schema = h.Schema.Schema()
	}
	if schema == nil {
		return nil
	}
	value := strings.Join(values, ", ")
	types := schema.Type
	if len(types) == 0 {
		types = []string{helpers.String}
	}
	var first []*errors.ValidationError
	for _, typ := range types {
		errs := []*errors.ValidationError{{Message: "Header of the wrong type",
			Reason: fmt.Sprintf("header %s (%q) does not read as the type its schema gives it, %s", name, value, typ)}}
		if reading, ok := readHeader(value, typ, schema); ok {
			errs = parameters.ValidateSingleParameterSchema(schema, reading, "header", "response header", name,
				helpers.ResponseBodyValidation, lowv3.HeadersLabel, c.v.opts, "", "")
		}
		if len(errs) == 0 {
			return nil
		}
		if first == nil {
			first = errs
		}
	}
	return first
}

// readHeader reads a header's value as the JSON Schema type typ of schema,
// strictly; ok is false when it is none: an integer or a number must be
// one in decimal, a boolean true or false, an array the simple style's
// comma-separated items, each read as the first type of the items' schema
// (a string when it gives none).
func readHeader(value, typ string, schema *base.Schema) (reading any, ok bool) {
	switch typ {
	case helpers.String:
		return value, true
	case helpers.Integer:
		n, err := strconv.ParseInt(value, 10, 64)
		return n, err == nil
	case helpers.Number:
		f, err := helpers.ParseNumber(value)
		return f, err == nil
	case helpers.Boolean:
		return value == "true", value == "true" || value == "false"
	case helpers.Array:
		if schema == nil { // an array of arrays: no header is one
			return nil, false
		}
		itemType, items := helpers.String, []any{}
		if schema.Items != nil && schema.Items.IsA() && schema.Items.A.Schema() != nil && len(schema.Items.A.Schema().Type) > 0 {
			itemType = schema.Items.A.Schema().Type[0]
		}
		for item := range strings.SplitSeq(value, ",") {
			read, ok := readHeader(strings.TrimSpace(item), itemType, nil)
			if !ok {
				return nil, false
			}
			items = append(items, read)
		}
		return items, true
	}
	return nil, false
}

// budgetNames are the budget headers, every one of which an answer the
// toll priced carries.
var budgetNames = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Request-Cost"}

// budgetApart checks the rules of the budget headers that the document
// states (in its description, its budget headers' and its responses') but
// a response's list of headers cannot: an answer the toll priced carries
// every budget header, any other none of them; X-Request-Cost-Estimate and
// X-RateLimit-Shadow come only beside them; and a 422 carries them only
// as the refusal of a price above the tier's, whose problem names its
// cost and max_request_cost — a parameter out of range is refused before any
// price. Which other answers are never priced (400, 403, 404…), the
// document says by listing no budget header for them.
func budgetApart(status int, rec *recording) []*errors.ValidationError {
	h := rec.Header()
	var sent, missing []string
	for _, name := range budgetNames {
		if h.Get(name) != "" {
			sent = append(sent, name)
		} else {
			missing = append(missing, name)
		}
	}
	var errs []*errors.ValidationError
	if len(sent) > 0 && len(missing) > 0 {
		errs = append(errs, &errors.ValidationError{Message: "Part of the budget headers",
			Reason: fmt.Sprintf("budget headers %q without %q: a priced answer carries them all, any other none", sent, missing)})
	}
	for _, name := range []string{"X-Request-Cost-Estimate", "X-RateLimit-Shadow"} {
		if h.Get(name) != "" && len(sent) == 0 {
			errs = append(errs, &errors.ValidationError{Message: "A budget header alone",
				Reason: fmt.Sprintf("%s (%q) without the budget headers: it comes only on a priced answer", name, h.Get(name))})
		}
	}
	var price struct {
		Cost    *float64 `json:"cost"`
		MaxCost *float64 `json:"max_request_cost"`
	}
	if status == http.StatusUnprocessableEntity && len(sent) > 0 && rec.body.Len() > 0 &&
		(json.Unmarshal(rec.body.Bytes(), &price) != nil || price.Cost == nil || price.MaxCost == nil) {
		errs = append(errs, &errors.ValidationError{Message: "Budget headers on a 422 not priced",
			Reason: "a 422 carries the budget headers only as the refusal of a price above the tier's, whose problem names cost and max_request_cost"})
	}
	return errs
}

// keyVaryMissing checks the rule every answer a cache may keep follows (a
// Cache-Control without no-store): it varies on Authorization and
// X-API-Key, so that no cache answers a request with another key, or
// none, from it. The document can list Vary but not say what it holds.
func keyVaryMissing(h http.Header) *errors.ValidationError {
	cc := h.Get("Cache-Control")
	if cc == "" || strings.Contains(cc, "no-store") {
		return nil
	}
	members := map[string]bool{}
	for _, v := range h.Values("Vary") {
		for m := range strings.SplitSeq(v, ",") {
			members[strings.ToLower(strings.TrimSpace(m))] = true
		}
	}
	if members["authorization"] && members["x-api-key"] {
		return nil
	}
	return &errors.ValidationError{Message: "Vary without the key",
		Reason: fmt.Sprintf("a response a cache may keep (Cache-Control %q) must vary on Authorization and X-API-Key, not %q", cc, h.Values("Vary"))}
}

// documented is the response the document gives for status to r: of r's
// operation, by its code, its range (4XX) or its default.
func (c *contract) documented(r *http.Request, status int) *v3.Response {
	c.v.mu.Lock()
	defer c.v.mu.Unlock()
	item, _, _ := paths.FindPath(r, c.v.doc, nil)
	op := operation(item, r.Method)
	if op == nil || op.Responses == nil {
		return nil
	}
	if resp := op.Responses.Codes.GetOrZero(strconv.Itoa(status)); resp != nil {
		return resp
	}
	if resp := op.Responses.Codes.GetOrZero(fmt.Sprintf("%dXX", status/100)); resp != nil {
		return resp
	}
	return op.Responses.Default
}

// operation is item's operation of method, none (nil) when the document
// gives it none — a HEAD is no GET here.
func operation(item *v3.PathItem, method string) *v3.Operation {
	if item == nil {
		return nil
	}
	return map[string]*v3.Operation{
		http.MethodGet: item.Get, http.MethodHead: item.Head, http.MethodPost: item.Post, http.MethodPut: item.Put,
		http.MethodPatch: item.Patch, http.MethodDelete: item.Delete, http.MethodOptions: item.Options, http.MethodTrace: item.Trace,
	}[method]
}

// checkNotAllowed checks the router's 405 for a method no route takes at
// r's path against the document: the path is one of its paths, which has
// no operation of r's method, Allow names the methods of the operations it
// has, in the router's order, and the answer matches the document's
// MethodNotAllowed response (headers included: see checkRouter).
func (c *contract) checkNotAllowed(r *http.Request, rec *recording) {
	c.v.mu.Lock()
	item, _, _ := paths.FindPath(r, c.v.doc, nil)
	c.v.mu.Unlock()
	if item == nil {
		c.fail("%s %s → 405: the document has no such path (a 405 names the operations the path has)", r.Method, r.URL)
		return
	}
	if operation(item, r.Method) != nil {
		c.fail("%s %s → 405, but the document has that operation", r.Method, r.URL)
		return
	}
	var want []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		if operation(item, m) != nil {
			want = append(want, m)
		}
	}
	if allow := rec.Header().Get("Allow"); allow != strings.Join(want, ", ") {
		c.fail("%s %s → 405 Allow %q, but the document's operations at that path are %q", r.Method, r.URL, allow, strings.Join(want, ", "))
		return
	}
	c.checkRouter(r, rec, http.StatusMethodNotAllowed, c.v.notAllowed)
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
// document: its redirect is checked against the document's Redirect
// response (see checkRouter).
func (c *contract) checkRedirect(r *http.Request, rec *recording, status int, clean string) {
	want := http.StatusPermanentRedirect
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
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
	errs := c.validate(cleaned, status, rec, nil)
	for _, e := range errs {
		if e.ValidationType != helpers.PathValidation {
			c.mismatch(r, rec, status, errs)
			return
		}
	}
	if errs != nil {
		c.checkRouter(r, rec, status, c.v.redirect)
		return
	}
	if errs = c.headerErrors(cleaned, status, rec, nil); errs != nil {
		c.mismatch(r, rec, status, errs)
	}
}

// routerNotFound reports whether rec is the router's own 404 for a path
// no route takes — outside the base path, or a route this listener does
// not serve, such as /metrics beside metrics_listen —, which belongs to no
// operation of the document: a problem document of its status whose
// detail says so. Such an answer must match the document's NotFound
// response (see checkRouter).
func routerNotFound(status int, rec *recording) bool {
	if status != http.StatusNotFound {
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
	return p.Detail == "no such route"
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
	buildShared(t, "")
	doc := string(server.OpenAPIDocument(""))
	for _, p := range []string{server.PathHealth, server.PathReady, server.PathMetrics, server.PathOpenAPI, server.PathBudget,
		server.PathCatalog, "/tiles/{layer}.json", "/tiles/{layer}/{z}/{x}/{y}", server.PathWithin, server.PathBBox,
		server.PathContains, server.PathCheck, server.PathFences, "/geofence/fences/{id}", "/geofences", "/geofences/{id}", "/", "/web/{path}"} {
		if !strings.Contains(doc, `"`+p+`":`) {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
}

// tileHeaders are the headers of a cached, reduced, gzip-coded tile sent
// to a shadow-mode key, with those of edit set over them ("" removes one).
func tileHeaders(edit map[string]string) map[string]string {
	h := budgetHeaders(map[string]string{
		"Cache-Control":           "private, max-age=60",
		"Vary":                    "Accept-Encoding, Authorization, X-API-Key",
		"ETag":                    `"AAAAAAAAAAAAAAAA-gz4"`,
		"X-Cache":                 "HIT",
		"X-Tile-Reduced":          "places;level=2",
		"Content-Encoding":        "gzip",
		"X-Request-Cost-Estimate": "0.01",
		"X-RateLimit-Shadow":      "would-refuse",
	})
	maps.Copy(h, edit)
	return h
}

// budgetHeaders are the headers of a problem priced for a caller in tier
// free — its request id and budget headers —, with those of edit set over
// them ("" removes one).
func budgetHeaders(edit map[string]string) map[string]string {
	h := map[string]string{
		"X-Request-ID":          "abc",
		"RateLimit-Policy":      `"free";q=100;qu="tokens";w=5, "free-concurrency";q=16;qu="concurrent-requests"`,
		"RateLimit":             `"free";r=99;t=1`,
		"X-RateLimit-Limit":     "100",
		"X-RateLimit-Remaining": "99",
		"X-RateLimit-Reset":     "1",
		"X-Request-Cost":        "0.01",
	}
	maps.Copy(h, edit)
	return h
}

// TestContractCatchesMismatches: the contract fails a test on a response
// the document does not describe (a wrong body, an undocumented status, a
// missing header, a header it does not list — an Access-Control-* one
// included —, a header value its schema does not take as sent, budget
// headers in part or on an answer never priced, a non-problem error, a 405
// whose Allow is not the path's operations, a router's 404 or redirect
// unlike the document's NotFound or Redirect) and passes the ones it does.
// A header value with a newline is sent as a field line each.
func TestContractCatchesMismatches(t *testing.T) {
	budget := `{"tier":"free","capacity":1000,"rate":10,"remaining":990,"reset_after":1,"shadow":false,"max_cost":500,"max_request_cost":1000,"authenticated":true}`
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
		{"budget as documented", "GET", "/budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, true},
		{"budget lacking a field", "GET", "/budget", 200, "application/json", `{"tier":"free"}`, map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, false},
		{"budget with a field of the wrong type", "GET", "/budget", 200, "application/json", strings.Replace(budget, `"rate":10`, `"rate":"10"`, 1), map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, false},
		{"undocumented status", "GET", "/budget", 418, "application/problem+json", problem(418, "teapot"), map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, false},
		{"429 without its budget headers", "GET", "/budget", 429, "application/problem+json", problem(429, "spent"), map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "Retry-After": "1"}, false},
		{"an error that is not a problem", "GET", "/budget", 503, "text/plain", "down", map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, false},
		{"the router's 404", "GET", "/no/such/route", 404, "application/problem+json", problem(404, "no such route"), map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, true},
		{"the router's 404 with an undocumented header", "GET", "/no/such/route", 404, "application/problem+json", problem(404, "no such route"),
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "X-Cache": "HIT"}, false},
		{"the router's 404 without its request id", "GET", "/no/such/route", 404, "application/problem+json", problem(404, "no such route"), map[string]string{"Cache-Control": "no-store"}, false},
		{"the router's 404 with budget headers", "GET", "/no/such/route", 404, "application/problem+json", problem(404, "no such route"), budgetHeaders(map[string]string{"Cache-Control": "no-store"}), false},
		{"the router's 404 not a problem", "GET", "/no/such/route", 404, "text/plain", "404 page not found", nil, false},
		{"the router's 405 with Allow", "POST", "/tiles", 405, "application/problem+json", problem(405, "method POST is not allowed here"), map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store"}, true},
		{"a 405 whose Allow is not the document's operations", "POST", "/tiles", 405, "application/problem+json", problem(405, "no"), map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD", "Cache-Control": "no-store"}, false},
		{"a HEAD refused where the document has no HEAD", "HEAD", "/geofence/check", 405, "application/problem+json", problem(405, "no"), map[string]string{"X-Request-ID": "abc", "Allow": "POST, OPTIONS", "Cache-Control": "no-store"}, true},
		{"a 405 for an operation the document has", "GET", "/tiles", 405, "application/problem+json", problem(405, "no"), map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store"}, false},
		{"a 405 at a path the document lacks", "POST", "/no/such/route", 405, "application/problem+json", problem(405, "no"), map[string]string{"X-Request-ID": "abc", "Allow": "GET, OPTIONS", "Cache-Control": "no-store"}, false},
		{"a 405 without its request id", "POST", "/tiles", 405, "application/problem+json", problem(405, "no"), map[string]string{"Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store"}, false},
		{"a 405 that is not a problem", "POST", "/tiles", 405, "text/plain", "no", map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store"}, false},
		{"a 405 with an undocumented header", "POST", "/tiles", 405, "application/problem+json", problem(405, "no"), map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD, OPTIONS", "Cache-Control": "no-store", "X-Cache": "HIT"}, false},
		{"an undocumented header", "GET", "/budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "X-Debug": "1"}, false},
		{"a Vary the document does not list", "GET", "/budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc", "Vary": "Accept-Encoding"}, false},
		{"CORS headers as documented, and Vary: Origin", "GET", "/budget", 200, "application/json", budget,
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "Access-Control-Allow-Origin": "https://maps.example", "Access-Control-Allow-Credentials": "true",
				"Access-Control-Expose-Headers": "Allow, ETag, X-Request-ID", "Vary": "Origin", "Connection": "close"}, true},
		{"an Access-Control- header the document does not list", "GET", "/budget", 200, "application/json", budget,
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "Access-Control-Allow-Origin": "*", "Access-Control-Allow-Private-Network": "true"}, false},
		{"a preflight's Access-Control-Max-Age on a GET", "GET", "/budget", 200, "application/json", budget,
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "Access-Control-Allow-Origin": "*", "Access-Control-Max-Age": "600"}, false},
		{"an Access-Control-Allow-Origin that is no origin", "GET", "/budget", 200, "application/json", budget,
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "Access-Control-Allow-Origin": "maps.example/"}, false},
		{"a header value valid only read as JSON", "GET", "/budget", 200, "application/json", budget, map[string]string{"X-Request-ID": "abc", "Cache-Control": `"no-store"`}, false},
		{"an integer header that is a quoted string", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile",
			tileHeaders(map[string]string{"X-RateLimit-Limit": `"100"`}), false},
		{"an enum header that is a quoted member", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile",
			tileHeaders(map[string]string{"X-Cache": `"HIT"`}), false},
		{"a one-value header sent twice", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile",
			tileHeaders(map[string]string{"X-RateLimit-Remaining": "99\n98"}), false},
		{"a list header sent in two lines", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile",
			tileHeaders(map[string]string{"Vary": "Accept-Encoding\nAuthorization, X-API-Key"}), true},
		{"a 400 for a malformed tile address with budget headers", "GET", "/tiles/places/14/8802/x.mvt", 400, "application/problem+json", problem(400, "bad y"),
			budgetHeaders(map[string]string{"Cache-Control": "no-store"}), false},
		{"a 403 with budget headers", "GET", "/geofence/fences", 403, "application/problem+json", problem(403, "no admin"), budgetHeaders(map[string]string{"Cache-Control": "no-store"}), false},
		{"a 401 with its budget headers", "GET", "/tiles/places/14/8802/5373.mvt", 401, "application/problem+json", problem(401, "unknown key"),
			budgetHeaders(map[string]string{"Cache-Control": "no-store", "WWW-Authenticate": `Bearer realm="geotoll"`}), true},
		{"a 503 with part of the budget headers", "GET", "/tiles/places/14/8802/5373.mvt", 503, "application/problem+json", problem(503, "down"),
			budgetHeaders(map[string]string{"Cache-Control": "no-store", "RateLimit": "", "X-RateLimit-Remaining": ""}), false},
		{"a tile's X-Request-Cost-Estimate without the budget headers", "GET", "/tiles/places/14/8802/5373.mvt", 503, "application/problem+json", problem(503, "down"),
			map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store", "X-Request-Cost-Estimate": "0.01"}, false},
		{"a 422 above the tier's max cost, with the budget headers", "GET", "/tiles/places/14/8802/5373.mvt", 422, "application/problem+json",
			`{"type":"urn:geotoll:problem:out-of-range","title":"x","status":422,"detail":"dear","cost":600,"max_request_cost":500}`, budgetHeaders(map[string]string{"Cache-Control": "no-store"}), true},
		{"a 422 for a zoom out of range, with budget headers", "GET", "/tiles/places/30/8802/5373.mvt", 422, "application/problem+json",
			`{"type":"urn:geotoll:problem:out-of-range","title":"x","status":422,"detail":"zoom","param":"z"}`, budgetHeaders(map[string]string{"Cache-Control": "no-store"}), false},
		{"a tile with every header it may carry", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile", tileHeaders(nil), true},
		{"a tile without its Cache-Control", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile", tileHeaders(map[string]string{"Cache-Control": ""}), false},
		{"a tile's 304 without its ETag", "GET", "/tiles/places/14/8802/5373.mvt", 304, "", "", tileHeaders(map[string]string{"ETag": "", "Content-Encoding": ""}), false},
		{"a tile's 304 with a Content-Encoding", "GET", "/tiles/places/14/8802/5373.mvt", 304, "", "", tileHeaders(nil), false},
		{"a tile's HEAD", "HEAD", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "", tileHeaders(nil), true},
		{"a cacheable tile that does not vary on the key", "GET", "/tiles/places/14/8802/5373.mvt", 200, "application/vnd.mapbox-vector-tile", "tile",
			tileHeaders(map[string]string{"Vary": "Accept-Encoding"}), false},
		{"a 404 to a HEAD, without a body", "HEAD", "/tiles/nope/1/1/1.mvt", 404, "application/problem+json", "", map[string]string{"X-Request-ID": "abc", "Cache-Control": "no-store"}, true},
		{"OPTIONS with Allow", "OPTIONS", "/tiles/places.json", 204, "", "", map[string]string{"X-Request-ID": "abc", "Allow": "GET, HEAD, OPTIONS"}, true},
		{"a CORS preflight", "OPTIONS", "/geofence/check", 204, "", "", map[string]string{"X-Request-ID": "abc", "Access-Control-Allow-Origin": "*",
			"Access-Control-Allow-Methods": "POST", "Allow": "POST, OPTIONS", "Vary": "Access-Control-Request-Method, Access-Control-Request-Headers"}, true},
		{"a GET's redirect to the clean path", "GET", "//tiles/places.json?key=k", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/tiles/places.json?key=k"}, true},
		{"a POST's redirect past a dot segment", "POST", "/geofence/./check?layer=d", 308, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/geofence/check?layer=d"}, true},
		{"a DELETE's redirect to a templated path", "DELETE", "/geofence/fences/../fences/7", 308, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/geofence/fences/7"}, true},
		{"a redirect to a path no operation takes", "GET", "//no/such/route", 301, "", "", map[string]string{"X-Request-ID": "abc", "Location": "/no/such/route"}, true},
		{"a redirect to a path no operation takes, with an undocumented header", "GET", "//no/such/route", 301, "", "",
			map[string]string{"X-Request-ID": "abc", "Location": "/no/such/route", "X-Cache": "HIT"}, false},
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
					for line := range strings.SplitSeq(v, "\n") { // a field line each
						if line != "" {
							w.Header().Add(k, line)
						}
					}
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

// TestReadHeaderReadsAsTheSchemaSays: a header value is read as its
// schema's type strictly — no other spelling of a number, no JSON.
func TestReadHeaderReadsAsTheSchemaSays(t *testing.T) {
	ints := &base.Schema{Type: []string{helpers.Array}, Items: &base.DynamicValue[*base.SchemaProxy, bool]{
		A: base.CreateSchemaProxy(&base.Schema{Type: []string{helpers.Integer}})}}
	for _, tc := range []struct {
		value, typ string
		schema     *base.Schema
		want       any // nil: not of that type
	}{
		{`"no-store"`, helpers.String, nil, `"no-store"`},
		{"10", helpers.Integer, nil, int64(10)},
		{"1e1", helpers.Integer, nil, nil},
		{"10.0", helpers.Integer, nil, nil},
		{`"10"`, helpers.Integer, nil, nil},
		{"10, 11", helpers.Integer, nil, nil},
		{"0.25", helpers.Number, nil, 0.25},
		{"0x1p-2", helpers.Number, nil, nil},
		{"true", helpers.Boolean, nil, true},
		{"1", helpers.Boolean, nil, nil},
		{"1, 2", helpers.Array, ints, []any{int64(1), int64(2)}},
		{"1, two", helpers.Array, ints, nil},
	} {
		got, ok := readHeader(tc.value, tc.typ, tc.schema)
		if ok != (tc.want != nil) || ok && fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("readHeader(%q, %s) = %v, %v; want %v", tc.value, tc.typ, got, ok, tc.want)
		}
	}
}

// TestEndToEndEveryPathAnswersAsDocumented sends every method to every
// path of the document — anonymous, with a key, with an admin key, gzip
// accepted or not — and a CORS preflight, and lets the contract check each
// answer: its status, headers (none the document does not list) and body
// against the operation, and a 405's Allow against the operations the
// document gives the path. A path's parameters are a layer the server has,
// a fence that need not exist and assets the preview serves.
func TestEndToEndEveryPathAnswersAsDocumented(t *testing.T) {
	t.Parallel()
	key := createKey(t, "free")
	const admin = "e2e-contract-admin-0123456789"
	base, _ := startServer(t, func(c *Config) { c.Geofence.AdminKeys = []string{admin} })
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(server.OpenAPIDocument(""), &doc); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{layer}", "places", "{z}", "14", "{x}", "8802", "{y}", "5373.mvt", "{id}", "1",
		"{path}", "app.js", "{file}", "maplibre-gl.js")
	urls := []string{base + "/tiles/places/14/8802/5373.mvt?dry_run=1", base + "/tiles/places.json?key=" + key, base + "/?key=" + key}
	for p := range doc.Paths {
		urls = append(urls, base+fill.Replace(p))
	}
	callers := [][]string{nil, {"X-API-Key", key}, {"Authorization", "Bearer " + key}, {"X-API-Key", admin}, {"Accept-Encoding", "gzip"}}
	for _, url := range urls {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			for _, hdr := range callers {
				send(t, m, url, "", hdr...)
			}
		}
		send(t, http.MethodOptions, url, "", "Origin", "https://maps.example.com", "Access-Control-Request-Method", "GET",
			"Access-Control-Request-Headers", "x-api-key, traceparent")
		// A second GET with the first one's ETag: a 304 where there is one.
		resp, _ := send(t, http.MethodGet, url, "", "X-API-Key", key)
		if etag := resp.Header.Get("ETag"); etag != "" {
			send(t, http.MethodGet, url, "", "X-API-Key", key, "If-None-Match", etag)
			send(t, http.MethodHead, url, "", "If-None-Match", etag)
		}
	}
}

// The document's CheckRequest refuses these bodies the server refuses and
// takes these it takes (geofence.ParseCheck, with the default batch
// limit): it took bodies with members of no meaning, no points, empty
// ids and out-of-range coordinates, all answered 400 or 422. What JSON
// Schema cannot say is in its descriptions instead: an id's 64 are bytes
// of UTF-8 (maxLength counts characters), and a number is at most 32
// characters as written.
func TestCheckRequestSchemaIsWhatTheServerTakes(t *testing.T) {
	v := buildShared(t, "")
	long := strings.Repeat("x", geofence.MaxPointIDLen)
	for _, body := range []string{
		`{"points":[{"id":"a","lng":13.4,"lat":52.5}]}`,
		`{"points":[{"id":"a","lng":13.4,"lat":52.5},{"id":"a","lng":-180,"lat":90}],"layer":"districts"}`,
		`{"points":[{"id":"` + long + `","lng":180,"lat":-90}]}`,
		`{"points":[{"id":"a","lng":13.4,"lat":52.5}],"extra":1}`,
		`{"points":[{"id":"a","lng":13.4,"lat":52.5,"alt":3}]}`,
		`{"points":[]}`,
		`{"points":[{"id":"","lng":13.4,"lat":52.5}]}`,
		`{"points":[{"id":"` + long + `x","lng":13.4,"lat":52.5}]}`,
		`{"points":[{"id":"a","lng":181,"lat":52.5}]}`,
		`{"points":[{"id":"a","lng":13.4,"lat":-90.5}]}`,
		`{"points":[{"id":"a","lng":13.4}]}`,
		`{"layer":"districts"}`,
	} {
		_, err := geofence.ParseCheck(strings.NewReader(body), geofence.DefaultLimits().MaxBatch)
		r := httptest.NewRequest(http.MethodPost, "/geofence/check", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		ok, errs := v.v.ValidateHttpRequest(r)
		if ok != (err == nil) {
			t.Errorf("%s: the document takes it %v (%s), the server %v (%v)", body, ok, describe(errs), err == nil, err)
		}
	}
}
