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
	// Geofence serves /geofence/… and the fence admin /geofences[/{id}].
	Geofence *geofence.Handler
	// Budget answers GET /budget (the caller's own budget, never charged).
	Budget http.Handler
	// Web serves the preview page: GET / and GET /web/… (package web).
	Web http.Handler
	// Ready answers /readyz from checks run in the background; nil answers
	// 200 without checking anything.
	Ready *Readiness
	// Metrics, if set, counts every request and serves GET /metrics.
	Metrics *Metrics
	// CORS lets other origins call the API; its zero value sends no CORS
	// headers.
	CORS CORS
}

// New returns the API handler.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, r, problem.Missing("", "no such route"))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, r, &problem.Error{Code: problem.NotAllowed, Detail: "method " + r.Method + " is not allowed here"})
	})
	r.HandleFunc("/healthz", healthz).Methods(http.MethodGet, http.MethodHead)
	ready := o.Ready
	if ready == nil {
		ready = NewReadiness(nil, 0, 0)
	}
	r.Handle("/readyz", ready).Methods(http.MethodGet, http.MethodHead)
	if o.Tiles != nil {
		// /tiles/{layer}.json has one segment after /tiles/, the tile route
		// four: neither can shadow the other, whatever the order.
		r.Handle("/tiles", o.Tiles.Index()).Methods(http.MethodGet, http.MethodHead)
		r.Handle("/tiles/{"+tiles.VarLayer+"}.json", o.Tiles.TileJSON()).Methods(http.MethodGet, http.MethodHead)
		path := "/tiles/{" + tiles.VarLayer + "}/{" + tiles.VarZ + "}/{" + tiles.VarX + "}/{" + tiles.VarY + "}"
		r.Handle(path, o.Tiles).Methods(http.MethodGet, http.MethodHead)
	}
	if o.Metrics != nil {
		r.Handle("/metrics", o.Metrics.Handler()).Methods(http.MethodGet, http.MethodHead)
		r.Use(nameRoute)
	}
	if o.Budget != nil {
		r.Handle("/budget", o.Budget).Methods(http.MethodGet, http.MethodHead)
	}
	if o.Geofence != nil {
		o.Geofence.Register(r)
	}
	if o.Web != nil {
		r.Handle("/", o.Web).Methods(http.MethodGet, http.MethodHead)
		r.Handle("/web/{path:.*}", o.Web).Methods(http.MethodGet, http.MethodHead)
	}
	// toll.Finish is innermost: the requests the toll admitted are ended
	// (settled, their slots freed) when their handler returns or panics.
	h := withAccessLog(o.Logger, o.CORS.wrap(withKeyedPrivate(toll.Finish(r))))
	if o.Metrics != nil {
		h = o.Metrics.wrap(h)
	}
	return withRequestID(h)
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}
