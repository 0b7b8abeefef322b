package serving

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/tiles"
)

// Builder builds one kind of serving storage. The builders `geotoll
// prepare` runs are Builders(); each is asked, per layer, which relations
// it would build (Targets) and, when the layer's table or those targets
// changed, builds them (Build).
type Builder interface {
	// Name is the registry's builder column, e.g. tiles.BuilderOverview.
	Name() string
	// Targets returns the relations the builder keeps for layer l of
	// geometry kind, in build order (a target may read those before it);
	// none when l needs none. A target is rebuilt when anything in it
	// differs from the registry's row.
	Targets(l *tiles.Layer, kind tiles.Kind) []Target
	// Build fills table job.Next[t.Relation] for target t, inside job.Tx
	// (the table does not exist yet; Build creates it, with whatever
	// indexes it needs, and returns its row count). The runner grants it
	// to the read role, analyzes it and swaps it in.
	Build(ctx context.Context, job *Job, t Target) (rows int64, err error)
}

// Builders returns the builders `geotoll prepare` runs, in order.
func Builders() []Builder { return []Builder{Overview{}, Subdivide{}} }

// Target is one relation a builder keeps for a layer: what the registry
// records about it, before it is built.
type Target struct {
	// Relation is its table in tiles.ServingSchema: stable across builds
	// (see RelationName), so the swap keeps every reader's query text.
	Relation string
	// ZoomMin..ZoomMax are the tile zooms it serves (-1, -1: none).
	ZoomMin, ZoomMax int
	GeometryColumn   string
	SRID             int
	Kind             tiles.Kind
	Columns          []string
	Params           tiles.StorageParams
}

// Job is one build of one layer's targets of one builder, in one
// transaction.
type Job struct {
	Tx    pgx.Tx
	Layer *tiles.Layer
	Kind  tiles.Kind
	// Next maps each target's relation to the table it is being built
	// into, for the targets of this job: built already if they come
	// before the one being built.
	Next map[string]pgx.Identifier
	// Repaired counts the source rows the job's builds repaired (made
	// valid): reported in Result.Repaired.
	Repaired int64
}

// RelationName is the stable name of a layer's relation with the given
// suffix ("ov_z3"): "<layer>_<suffix>", the layer's name cut to 40 bytes
// and followed by a hash of it when longer, so that every name (and the
// "_next" and index names derived from it) fits PostgreSQL's 63 bytes and
// two layers never share one.
func RelationName(layer, suffix string) string {
	base := layer
	if len(base) > 40 {
		base = fmt.Sprintf("%s_%08x", base[:31], fnv32(layer))
	}
	return base + "_" + suffix
}

// fnv32 is FNV-1a: a short, stable hash of a layer name.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
