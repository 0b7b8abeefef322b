package pricing

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geotoll/geotoll/internal/density"
)

// Builds is how many models Models builds at once, at most. A build reads a
// whole relation: every relation's build at once (32 on the open data) held
// all 16 connections of the server's pool for 20 s, when builds and requests
// shared it, and requests waiting for one answered 503. geotoll serve now
// builds on a pool of its own (database.background_conns), which Builds
// leaves room in for the server's other work.
const Builds = 4

// BuildsOn is how many builds run at once on a pool of conns connections:
// Builds, but always at least one connection fewer than the pool holds, and
// at least one build. The pool is shared with work that must not wait a
// build's length for a connection — the API keys' reload, above all, whose
// ring goes stale (admin keys refused) when it cannot read — and with
// database.background_conns as low as 2, four builds would hold every
// connection. conns ≤ 0 (unknown) is taken as large.
func BuildsOn(conns int32) int {
	if conns <= 0 {
		return Builds
	}
	return max(1, min(Builds, int(conns)-1))
}

// sizedPool is a DB that says how many connections it holds, as a
// *pgxpool.Pool does.
type sizedPool interface {
	Config() *pgxpool.Config
}

// buildSlots is the build limit of a Models reading through db: BuildsOn
// the pool's size when db says it.
func buildSlots(db density.DB) *density.Slots {
	conns := int32(0)
	switch p := db.(type) {
	case *pgxpool.Pool:
		if p != nil { // whose Config would panic
			conns = p.Config().MaxConns
		}
	case sizedPool:
		conns = p.Config().MaxConns
	}
	return density.NewSlots(BuildsOn(conns))
}
