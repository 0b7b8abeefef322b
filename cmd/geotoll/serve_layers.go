package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/layercheck"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
)

// layerCheckTimeout bounds the start-up check of the layers.
const layerCheckTimeout = 10 * time.Second

// checkLayers checks every tile and geofence layer against the database,
// as the read role, before the server starts: a layer that does not match
// its table refuses the start, with a message naming the layer and what is
// wrong. A database that does not answer leaves the verdict to the
// readiness check it returns, which runs the same checks in the
// background (on the readiness connection) and reports a layer that stops
// matching later — a dropped table, a revoked grant — as degraded: the
// layer's requests answer 503 with the reason, the other layers serve on.
func (m *Main) checkLayers(ctx context.Context, tc *tiles.Catalog, gc *geofence.Catalog) (server.Check, error) {
	checker := layercheck.New(append(tc.Checks(), gc.Checks()...)...)
	cctx, cancel := context.WithTimeout(ctx, layerCheckTimeout)
	err := checker.Check(cctx, m.Background)
	cancel()
	switch {
	case layercheck.IsMismatch(err):
		return nil, fmt.Errorf("configured layers do not match the database:\n%w", err)
	case err != nil && !signalled(ctx):
		m.Logger.Warn("layers not checked: the database does not answer; /readyz reports them once it does", "err", err)
	}
	return func(ctx context.Context) error {
		var verdict error
		err := m.dbCheck.Do(ctx, func(conn *pgx.Conn) error {
			if verdict = checker.Check(ctx, conn); layercheck.IsMismatch(verdict) {
				return nil // a verdict, not a connection that failed
			}
			return verdict
		})
		switch {
		case err != nil:
			return &server.DegradedError{Detail: "layers not checked: " + err.Error()}
		case verdict != nil:
			return &server.DegradedError{Detail: strings.ReplaceAll(verdict.Error(), "\n", "; ")}
		}
		return &server.ReadyNote{Detail: fmt.Sprintf("%d layers match the database", checker.Len())}
	}, nil
}

// refreshContainment re-reads what contains and check read on each
// geofence layer: its geometry type and its pieces in the serving registry
// (geofence.Catalog.LoadContainment), and reports whether it read it. A
// database that does not answer
// leaves the last storage read (at start-up: contains and check on a layer
// answer 503 until a refresh works).
func (m *Main) refreshContainment(ctx context.Context) (read bool) {
	if m.fenceLayers == nil {
		return true
	}
	warnings, err := m.fenceLayers.LoadContainment(ctx, m.Background)
	if signalled(ctx) {
		return false
	}
	if err != nil {
		m.Logger.Warn("geofence layers' storage not read; contains and check on a layer keep what was read before", "err", err)
	}
	m.fenceWarnings.report(ctx, m.Logger, "geofence layer storage", warnings, err == nil)
	return err == nil
}
