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

// TestSubdivideRepairedCount: the rows counted as repaired are the rows
// that were not valid, each once: valid polygons with a vertex on the
// midline the chunks are cut along count none; a MultiPolygon whose
// parts overlap and a bow tie count one each, a NULL id counts too.
func TestSubdivideRepairedCount(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "subrep_")
	f.exec(t, `CREATE TABLE {s}.shapes (id int, name text, geom geometry(Geometry, 3857))`)
	// Squares of 100 m with a notch from the bottom whose apex touches
	// the horizontal midline of their box, at (25, 50), densified to
	// ~2,400 vertices (over 64 × 16, a chunk's most): their bottom-left
	// quarter chunk's ring passes the apex twice (a ring that touches
	// itself, not valid) though the square is valid.
	f.exec(t, `INSERT INTO {s}.shapes
		SELECT k, 'notch', ST_Segmentize(ST_Translate(ST_GeomFromText(
			'POLYGON((0 0, 10 0, 25 50, 40 0, 100 0, 100 100, 0 100, 0 0))', 3857), 1000 * k, 0), 0.2)
		FROM generate_series(1, 3) AS k`)
	f.exec(t, `GRANT SELECT ON {s}.shapes TO geotoll_reader`)
	o := serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}
	layer := shapesLayer(name, f.schema)
	var invalid int
	if err := owner.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{f.schema, "shapes"}.Sanitize()+` WHERE NOT ST_IsValid(geom)`).Scan(&invalid); err != nil || invalid != 0 {
		t.Fatalf("fixture: %d invalid squares, %v", invalid, err)
	}
	if r := one(t, owner, catalog(t, layer).Layer(name), o); r.Status != serving.Built || r.Repaired != 0 {
		t.Errorf("valid notched squares: %+v, want built, 0 repaired", r)
	}
	f.exec(t, `INSERT INTO {s}.shapes VALUES
		(10, 'overlap', ST_Collect(ST_MakeEnvelope(0, 0, 100, 100, 3857), ST_MakeEnvelope(50, 50, 150, 150, 3857))),
		(NULL, 'bowtie', ST_GeomFromText('POLYGON((300000 0, 400000 100000, 400000 0, 300000 100000, 300000 0))', 3857))`)
	if r := one(t, owner, catalog(t, layer).Layer(name), o); r.Status != serving.Built || r.Repaired != 2 {
		t.Errorf("with an overlapping MultiPolygon and a bow tie of no id: %+v, want built, 2 repaired", r)
	}
}
