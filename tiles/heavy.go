package tiles

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"text/template"

	"github.com/jackc/pgx/v5"
)

var heavyTemplate = template.Must(template.New("layer_heavy.sql").Parse(mustQueryText("layer_heavy.sql")))

// HeavyFix is the command that builds a heavy layer's pieces.
const HeavyFix = "geotoll prepare"

// HeavyFixSubdivideOff is what gives a heavy layer whose subdivide is off
// its pieces.
const HeavyFixSubdivideOff = "turn on layers[].subdivide (drop subdivide.off), then geotoll prepare"

// CheckHeavy reads through q (the read role) how many vertices the
// largest rows of a line or polygon layer have (sql/layer_heavy.sql), for
// Heavy; other kinds, and a layer that reads pieces, are not read. serve
// calls it at start-up (or, when the database did not answer then, once
// it has read the layers' storage).
func (l *Layer) CheckHeavy(ctx context.Context, q Querier) error {
	if p := l.plan(); (p.kind != KindLine && p.kind != KindPolygon) || p.readsPieces() {
		return nil
	}
	var buf bytes.Buffer
	data := struct{ Table, Geom string }{Table: l.tableIdent().Sanitize(), Geom: column(l.GeometryColumn)}
	if err := heavyTemplate.Execute(&buf, data); err != nil {
		return fmt.Errorf("layer %q: render layer_heavy.sql: %w", l.Name, err)
	}
	rows, err := q.Query(ctx, buf.String())
	if err != nil {
		return fmt.Errorf("layer %q: largest rows: %w", l.Name, err)
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("layer %q: largest rows: %w", l.Name, err)
	}
	l.state.maxVertices.Store(n)
	return nil
}

// Heavy reports a line or polygon layer whose largest rows, as CheckHeavy
// last read them, exceed its Subdivide.MaxVertices while its zooms above
// the overview band read no pieces (none built, or subdivide off), or
// nil. Heavy.Fix says what would give it pieces, or is empty when nothing
// can (a layer without ids).
func (l *Layer) Heavy() *Heavy {
	p := l.plan()
	n := l.state.maxVertices.Load()
	if (p.kind != KindLine && p.kind != KindPolygon) || n <= int64(l.Subdivide.MaxVertices) || p.readsPieces() {
		return nil
	}
	return &Heavy{MaxVertices: n, Limit: l.Subdivide.MaxVertices, Fix: l.heavyFix()}
}

// heavyFix returns what gives the layer's zooms above the overview band
// pieces: `geotoll prepare` when it builds them, turning subdivide on
// when it is off, nothing for a layer without ids. (The overview band
// never covers all of a layer's zooms: it ends below data_maxzoom.)
func (l *Layer) heavyFix() string {
	switch {
	case l.WithoutID:
		return ""
	case l.Subdivide.Off:
		return HeavyFixSubdivideOff
	}
	return HeavyFix
}

// readsPieces reports whether the plan reads a layer's pieces.
func (p *plan) readsPieces() bool {
	return slices.ContainsFunc(p.storage, func(s Storage) bool { return s.Builder == BuilderSubdivide })
}
