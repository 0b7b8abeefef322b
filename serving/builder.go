package serving

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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
	// indexes it needs, named by job.Index, and returns its row count).
	// The runner grants it to the read role, analyzes it and records it.
	Build(ctx context.Context, job *Job, t Target) (rows int64, err error)
}

// refuser is a Builder that builds nothing from some tables: refuse
// returns why it builds nothing from job.Layer's table as job.Tx sees it
// (a Result's Reason), or "" when it builds. The runner asks it in the
// build's transaction before building, and retires the builder's storage
// of the layer when it refuses.
type refuser interface {
	refuse(ctx context.Context, job *Job) (reason string, err error)
}

// Builders returns the builders `geotoll prepare` runs, in order.
func Builders() []Builder { return []Builder{Overview{}, Subdivide{}} }

// Target is one relation a builder keeps for a layer: what the registry
// records about it, before it is built.
type Target struct {
	// Relation is its stable name (see RelationName): the key that
	// tells one build's relation from another's in the registry. Each
	// build creates a new table, named Relation and the build's
	// generation (see Job.Next).
	Relation string
	// ZoomMin..ZoomMax are the tile zooms it serves (-1, -1: none).
	ZoomMin, ZoomMax int
	GeometryColumn   string
	SRID             int
	Kind             tiles.Kind
	// Columns are the relation's columns that hold the layer's columns
	// (tiles.Storage.Columns): the pieces' by their own names, an
	// overview's under names of its own, with Params.SourceColumns naming
	// the layer's column each holds.
	Columns []string
	Params  tiles.StorageParams
}

// Job is one build of one layer's targets of one builder, in one
// transaction.
type Job struct {
	Tx    pgx.Tx
	Layer *tiles.Layer
	Kind  tiles.Kind
	// Next maps each target's relation to the table it is being built
	// into ("<relation>_v<generation>"), for the targets of this job:
	// built already if they come before the one being built.
	Next map[string]pgx.Identifier
	// Repaired counts the source rows the job's builds repaired (made
	// valid): reported in Result.Repaired.
	Repaired int64
	// whole maps an overview stored in pieces to the temporary table of
	// the whole features it was cut from, which the zoom above is
	// simplified from (see Overview).
	whole map[string]pgx.Identifier
}

// RelationName is the stable name of a layer's relation with the given
// suffix ("ov_z3"): "<layer>_<suffix>", the layer's name cut to 36 bytes
// and followed by a hash of it when longer, so that every name (and the
// generation and index names added to it) fits PostgreSQL's 63 bytes and
// two layers never share one.
func RelationName(layer, suffix string) string {
	base := layer
	if len(base) > 36 {
		base = fmt.Sprintf("%s_%08x", base[:27], fnv32(layer))
	}
	return base + "_" + suffix
}

// Index is the name of index suffix ("gist") of the table job builds for
// t: "<table>_<suffix>".
func (job *Job) Index(t Target, suffix string) pgx.Identifier {
	return pgx.Identifier{job.Next[t.Relation][1] + "_" + suffix}
}

// generation names the tables of one build: "_v" and the build
// transaction's id in base 36 (a database restored into a new cluster may
// meet an id again: that build fails on the existing name and the next
// one, of a later id, succeeds).
func generation(txid int64) string { return "_v" + strconv.FormatInt(txid, 36) }

// StableName is the stable name (RelationName) of a relation a build
// created: its generation, a last "_v" followed by base-36 digits, cut. A
// name without one is returned as it is.
func StableName(relation string) string {
	i := strings.LastIndex(relation, "_v")
	if i <= 0 || i+2 == len(relation) {
		return relation
	}
	for _, c := range relation[i+2:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return relation
		}
	}
	return relation[:i]
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
