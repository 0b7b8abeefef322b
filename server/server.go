// Package server is geotoll's whole HTTP API as one http.Handler: the
// gorilla/mux routes, the middleware chain (request id, access log with
// panic recovery), health and readiness, problem+json errors for unknown
// routes and methods, and Toll — the gate that prices each request and
// spends the price from the caller's token bucket before the handler
// touches the database.
//
// server composes the tiles and throttle packages, which never import each
// other.
package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/tiles"
)

// Check reports whether one dependency is ready.
type Check func(ctx context.Context) error

// Options are the parts New composes.
type Options struct {
	Logger *slog.Logger
	Tiles  *tiles.Handler
	// Checks are run by /readyz, each bounded by ReadyTimeout (default 2 s).
	Checks       map[string]Check
	ReadyTimeout time.Duration
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
	r.Handle("/readyz", readyz(o.Checks, o.ReadyTimeout)).Methods(http.MethodGet, http.MethodHead)
	if o.Tiles != nil {
		path := "/tiles/{" + tiles.VarLayer + "}/{" + tiles.VarZ + "}/{" + tiles.VarX + "}/{" + tiles.VarY + "}"
		r.Handle(path, o.Tiles).Methods(http.MethodGet, http.MethodHead)
	}
	return withRequestID(withAccessLog(o.Logger, r))
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz runs every check concurrently and answers 200 only if all pass.
func readyz(checks map[string]Check, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		var (
			mu     sync.Mutex
			wg     sync.WaitGroup
			status = http.StatusOK
			detail = make(map[string]string, len(checks))
		)
		names := make([]string, 0, len(checks))
		for name := range checks {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			wg.Go(func() {
				err := checks[name](ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					status = http.StatusServiceUnavailable
					detail[name] = "down: " + err.Error()
					return
				}
				detail[name] = "ok"
			})
		}
		wg.Wait()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": status == http.StatusOK, "checks": detail})
	})
}
