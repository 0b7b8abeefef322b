package serving_test

import (
	"math"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestSubdivideLinesKeepLength: a straight horizontal line of 5,001
// vertices (every segment on its box's edge) and a line whose flat
// segment lies on its box's bottom edge are cut into pieces as long, in
// all, as the rows (PostGIS measures both), none dropped.
func TestSubdivideLinesKeepLength(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "sublen_")
	f.exec(t, `CREATE TABLE {s}.flat (id int PRIMARY KEY, name text, geom geometry(Geometry, 3857))`)
	f.exec(t, `INSERT INTO {s}.flat
		SELECT 1, 'straight', ST_MakeLine(array_agg(ST_Point(i * 10, 500, 3857) ORDER BY i)) FROM generate_series(0, 5000) AS i
		UNION ALL
		SELECT 2, 'ledge', ST_MakeLine(array_agg(ST_Point(i * 10, CASE WHEN i BETWEEN 1000 AND 3000 THEN 0 ELSE abs(i - 2000) END, 3857) ORDER BY i))
		FROM generate_series(0, 5000) AS i`)
	f.exec(t, `GRANT SELECT ON {s}.flat TO geotoll_reader`)
	layer := shapesLayer(name, f.schema)
	layer.Table, layer.GeometryKind = "flat", tiles.KindLine
	r := one(t, owner, catalog(t, layer).Layer(name), serving.Options{Builders: []serving.Builder{serving.Subdivide{}}})
	if r.Status != serving.Built || r.Repaired != 0 {
		t.Fatalf("prepare: %+v, want built, 0 repaired", r)
	}
	pieces := pgx.Identifier{tiles.ServingSchema, serving.RelationName(name, "sub")}.Sanitize()
	rows, err := owner.Query(t.Context(), `
		SELECT t.id, count(p.id), coalesce(sum(ST_Length(p.geom)), 0), ST_Length(t.geom)
		FROM `+pgx.Identifier{f.schema, "flat"}.Sanitize()+` AS t LEFT JOIN `+pieces+` AS p ON p.id = t.id
		GROUP BY t.id, t.geom ORDER BY t.id`)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		ID, N          int
		Pieces, Source float64
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[got])
	if err != nil || len(all) != 2 {
		t.Fatalf("%v, %v", all, err)
	}
	for _, g := range all {
		if g.N == 0 || math.Abs(g.Pieces-g.Source) > 1e-9*g.Source {
			t.Errorf("id %d: %d pieces %.3f m long, the row %.3f m", g.ID, g.N, g.Pieces, g.Source)
		}
	}
}
