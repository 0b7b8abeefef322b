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

// CheckHeavy reads through q (the read role) how many vertices the
// largest rows of a line or polygon layer have (sql/layer_heavy.sql), for
// Heavy; other kinds are not read. serve calls it at start-up.
func (l *Layer) CheckHeavy(ctx context.Context, q Querier) error {
	if k := l.Kind(); k != KindLine && k != KindPolygon {
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
// last read them, exceed its Subdivide.MaxVertices while it reads no
// pieces (none built, or subdivide off), or nil.
func (l *Layer) Heavy() *Heavy {
	p := l.plan()
	n := l.state.maxVertices.Load()
	if (p.kind != KindLine && p.kind != KindPolygon) || n <= int64(l.Subdivide.MaxVertices) ||
		slices.ContainsFunc(p.storage, func(s Storage) bool { return s.Builder == BuilderSubdivide }) {
		return nil
	}
	return &Heavy{MaxVertices: n, Limit: l.Subdivide.MaxVertices, Fix: HeavyFix}
}
