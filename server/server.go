// Package server is geotoll's whole HTTP API as one http.Handler: the
// gorilla/mux routes, the middleware chain (request id, access log with
// panic recovery), health and readiness, problem+json errors for unknown
// routes and methods, metrics and CORS. The budget policy — who pays, how
// much, refusals — is package toll's; server installs its Finish
// middleware.
//
// server composes the tiles, geofence and toll packages; tiles and geofence
// never import each other or toll.
package server

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// Options are the parts New composes.
type Options struct {
	Logger *slog.Logger
	Tiles  *tiles.Handler
	// Geofence serves /geofence/… (the fence admin /geofence/fences, and
	// its older paths /geofences).
	Geofence *geofence.Handler
	// Budget answers GET /budget (the caller's own budget, never charged).
	Budget http.Handler
	// Web serves the preview page: GET / and GET /web/… (package web).
	Web http.Handler
	// OpenAPI answers GET /openapi.json, the API's description.
	OpenAPI http.Handler
	// Ready answers /readyz from checks run in the background; nil answers
	// 200 without checking anything.
	Ready *Readiness
	// Metrics, if set, counts every request and serves GET /metrics.
	Metrics *Metrics
	// CORS lets other origins call the API; its zero value sends no CORS
	// headers.
	CORS CORS
	// BasePath prefixes every route ("/maps", behind a proxy serving
	// geotoll under that path). The handlers that write URLs are given it
	// in their own options.
	BasePath string
	// OpsListener: the operators' listener (Ops) serves /metrics and the
	// readiness detail; this handler serves no /metrics, and its /readyz
	// says only whether the process is ready.
	OpsListener bool
}

// New returns the API handler: the routes of Options.routes, in one
// table.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	base := trimBase(o.BasePath)
	r := newRouter(base, o.routes())
	r.Use(nameRoute)
	// toll.Finish is innermost: the requests the toll admitted are ended
	// (settled, their slots freed) when their handler returns or panics.
	h := withAccessLog(o.Logger, o.CORS.wrap(withKeyedPrivate(toll.Finish(cleanPath(base, r))),
		func(req *http.Request) []string { return preflightMethods(r, base, req) }))
	if o.Metrics != nil {
		h = o.Metrics.wrap(h)
	}
	return withRequestID(h)
}

// Ops returns the handler of the operators' listener (metrics_listen):
// GET /metrics, /healthz and /readyz with each check's detail.
func Ops(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := newRouter("", o.opsRoutes())
	r.Use(nameRoute)
	return withRequestID(withAccessLog(o.Logger, cleanPath("", r)))
}

// ready is the readiness with detail.
func (o Options) ready() *Readiness {
	if o.Ready == nil {
		return NewReadiness(nil, 0, 0)
	}
	return o.Ready
}

// readyHandler is the public /readyz: with detail, unless an operators'
// listener serves that.
func (o Options) readyHandler() http.Handler {
	if o.OpsListener {
		return o.ready().Summary()
	}
	return o.ready()
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

func notFound(w http.ResponseWriter, r *http.Request) {
	problem.Write(w, r, problem.Missing("", "no such route"))
}

// preflightMethods are the methods a CORS preflight's path takes: those of
// its canonical form, where a path that is not (a double slash from a base
// URL ending in /) is redirected, and the browser's request follows.
func preflightMethods(router *mux.Router, base string, r *http.Request) []string {
	if clean := canonicalPath(base, r.URL.Path); clean != r.URL.Path {
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = clean, ""
	}
	return routeMethods(router, r)
}

// routeMethods lists the methods some route of router answers at r's path
// (none: no route there), and names r after the first such route for the
// metrics, which count it under the route whose path it asked.
func routeMethods(router *mux.Router, r *http.Request) []string {
	allowed, route := allowedMethods(router, r)
	if p, ok := r.Context().Value(routeKey{}).(*string); ok && route != "" {
		*p = route
	}
	return allowed
}

// notAllowed answers a method no route of router takes at r's path: 405
// with Allow naming those it takes — OPTIONS among them, for OPTIONS
// itself is answered at every route's path: 204 with that Allow (RFC 9110
// §9.3.7). A CORS preflight never gets here when CORS is on (CORS.wrap
// answers it, with the same methods); when it is off, the preflight gets
// the same 204, without an Access-Control-* header, and the browser
// refuses the cross-origin call.
func notAllowed(router *mux.Router, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", strings.Join(append(routeMethods(router, r), http.MethodOptions), ", "))
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	problem.Write(w, r, &problem.Error{Code: problem.NotAllowed, Detail: "method " + r.Method + " is not allowed here"})
}
