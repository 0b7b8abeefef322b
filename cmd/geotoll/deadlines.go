package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/tiles"
)

// validateDeadlines checks that the deadlines nest: every statement_timeout
// (tile layers, discovered layers, geofence and its layers, fence
// writes when enabled) is shorter
// than http.request_timeout, which is shorter than http.write_timeout. A
// statement cut by its timeout is then answered (503 + Retry-After, with a
// problem body) before the request's deadline, and the request's deadline
// comes before the server stops writing: no client ever gets an empty
// reply. Each error names both fields.
func (c Config) validateDeadlines() []error {
	var errs []error
	h := c.HTTP
	if c.Database.CancelWait <= 0 {
		errs = append(errs, fmt.Errorf("database.cancel_wait %s must be positive", c.Database.CancelWait))
	}
	if h.RequestTimeout <= 0 {
		return append(errs, fmt.Errorf("http.request_timeout %s must be positive", h.RequestTimeout))
	}
	if h.RequestTimeout >= h.WriteTimeout {
		errs = append(errs, fmt.Errorf("http.request_timeout %s must be less than http.write_timeout %s: "+
			"a request answered at its deadline must still be written", h.RequestTimeout, h.WriteTimeout))
	}
	check := func(field string, d time.Duration) {
		switch {
		case d >= h.WriteTimeout:
			errs = append(errs, fmt.Errorf("%s %s must be less than http.write_timeout %s: "+
				"a query cut by its timeout must be answered before the server stops writing", field, d, h.WriteTimeout))
		case d >= h.RequestTimeout:
			errs = append(errs, fmt.Errorf("%s %s must be less than http.request_timeout %s: "+
				"a query cut by its timeout must be answered by the request's deadline", field, d, h.RequestTimeout))
		}
	}
	orDefault := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	for i, l := range c.Layers {
		check(fmt.Sprintf("layers[%d].statement_timeout (layer %q)", i, l.Name), orDefault(l.StatementTimeout, tiles.DefaultStatementTimeout))
	}
	if len(c.Tiles.Discover.Schemas) > 0 {
		check("tiles.discover.statement_timeout", orDefault(c.Tiles.Discover.StatementTimeout, tiles.DefaultStatementTimeout))
	}
	check("geofence.statement_timeout", orDefault(c.Geofence.StatementTimeout, geofence.DefaultStatementTimeout))
	if c.Geofence.WriterDatabaseURL != "" { // fence writes are enabled
		check("geofence.fence_write_timeout", orDefault(c.Geofence.FenceWriteTimeout, geofence.DefaultFenceWriteTimeout))
	}
	for i, l := range c.Geofence.Layers {
		check(fmt.Sprintf("geofence.layers[%d].statement_timeout (layer %q)", i, l.Name), orDefault(l.StatementTimeout, geofence.DefaultStatementTimeout))
	}
	return errs
}

// withRequestDeadline gives every request its own deadline (the context's):
// the database calls below answer by it (see package pgcall).
func withRequestDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
