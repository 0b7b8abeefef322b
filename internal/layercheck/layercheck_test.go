package layercheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/layercheck"
	"github.com/geotoll/geotoll/internal/testenv"
)

// fixture creates, as the schema owner, a schema of tables that fit or
// break layers in every way the check knows, readable by the read role
// as each case needs, and beside it a schema the read role may not use;
// both are dropped when the test ends. It returns their names.
func fixture(t *testing.T) (s, closed string) {
	t.Helper()
	closed = testenv.Schema(t, "lc_closed_", func(closed string) []string {
		return []string{
			"CREATE TABLE " + closed + ".t (id int, geom geometry(Point, 3857))",
			"GRANT SELECT ON " + closed + ".t TO geotoll_reader",
		}
	})
	s = testenv.Schema(t, "lc_", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".good (id bigint PRIMARY KEY, name text, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".wgs (id int, geom geometry(Point, 4326))",
			"CREATE TABLE " + s + ".loose (id int, geom geometry)",
			"INSERT INTO " + s + ".loose VALUES (1, ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326))",
			"CREATE TABLE " + s + ".textgeom (id int, geom text)",
			"CREATE TABLE " + s + ".textid (id text, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".hidden (id int, geom geometry(Point, 3857))",
			"CREATE TABLE " + s + ".partial (id int, secret text, geom geometry(Point, 3857))",
			"GRANT USAGE ON SCHEMA " + s + " TO geotoll_reader",
			"GRANT SELECT ON " + s + ".good, " + s + ".wgs, " + s + ".loose, " + s + ".textgeom, " + s + ".textid TO geotoll_reader",
			"GRANT SELECT (id, geom) ON " + s + ".partial TO geotoll_reader",
		}
	})
	return s, closed
}

// The check, as the read role, of layers that fit their tables and of
// layers broken in each way it knows: every broken layer is named with
// what is wrong, and a fitting one is not named at all.
func TestCheck(t *testing.T) {
	t.Parallel()
	s, closed := fixture(t)
	reader := testenv.ReadPool(t)
	spec := func(table, geom string, srid int, id string, props ...string) layercheck.Spec {
		return layercheck.Spec{Layer: "layer " + table, Table: pgx.Identifier{s, table}, Geometry: geom, SRID: srid, ID: id, Properties: props}
	}
	for _, tc := range []struct {
		name string
		spec layercheck.Spec
		want string // "" when the layer fits
	}{
		{"fits", spec("good", "geom", 3857, "id", "name"), ""},
		{"fits without an id", spec("good", "geom", 3857, ""), ""},
		{"missing table", spec("nope", "geom", 3857, "id"), `table "` + s + `"."nope" does not exist`},
		{"missing schema", layercheck.Spec{Layer: "layer x", Table: pgx.Identifier{s + "_gone", "t"}, Geometry: "geom"}, "does not exist"},
		{"unqualified, not on the search path", layercheck.Spec{Layer: "layer good", Table: pgx.Identifier{"good"}, Geometry: "geom"},
			`table "good" does not exist (or is not on the search path of role "geotoll_reader")`},
		{"wrong geometry column", spec("good", "geom_3857", 3857, "id"), `geometry_column "geom_3857": no such column in "` + s + `"."good"`},
		{"wrong id column", spec("good", "geom", 3857, "gid"), `id_column "gid": no such column`},
		{"wrong property", spec("good", "geom", 3857, "id", "name", "colour"), `properties: column "colour": no such column`},
		{"wrong SRID", spec("wgs", "geom", 3857, "id"), `geometry_column "geom" has SRID 4326, not 3857`},
		{"undeclared SRID, read from a row", spec("loose", "geom", 3857, "id"), `geometry_column "geom" has SRID 4326, not 3857`},
		{"undeclared SRID that fits", spec("loose", "geom", 4326, "id"), ""},
		{"not a geometry", spec("textgeom", "geom", 3857, "id"), `geometry_column "geom" is of type text, not geometry`},
		{"id not an integer", spec("textid", "geom", 3857, "id"), `id_column "id" is of type text; a feature id must be`},
		{"no SELECT right", spec("hidden", "geom", 3857, "id"),
			`role "geotoll_reader" may not SELECT from "` + s + `"."hidden" (GRANT SELECT ON "` + s + `"."hidden" TO "geotoll_reader")`},
		{"columns granted, not the one named", spec("partial", "geom", 3857, "id", "secret"), `properties: column "secret": role "geotoll_reader" may not SELECT it`},
		{"columns granted, the ones named", spec("partial", "geom", 3857, "id"), ""},
		{"no USAGE on the schema", layercheck.Spec{Layer: "layer t", Table: pgx.Identifier{closed, "t"}, Geometry: "geom", SRID: 3857},
			`role "geotoll_reader" may not use schema "` + closed + `" (GRANT USAGE ON SCHEMA`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := layercheck.New(tc.spec).Check(t.Context(), reader)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("a fitting layer: %v", err)
				}
				return
			}
			if !layercheck.IsMismatch(err) {
				t.Fatalf("error %v, want a mismatch", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tc.spec.Layer+": ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q, want it to name %q and say %q", msg, tc.spec.Layer, tc.want)
			}
		})
	}
}

// Several broken layers are all reported, each on its own line, and the
// fitting ones are not.
func TestCheckReportsEveryBrokenLayer(t *testing.T) {
	t.Parallel()
	s, _ := fixture(t)
	c := layercheck.New(
		layercheck.Spec{Layer: "a", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 3857, ID: "id"},
		layercheck.Spec{Layer: "b", Table: pgx.Identifier{s, "nope"}, Geometry: "geom"},
		layercheck.Spec{Layer: "c", Table: pgx.Identifier{s, "good"}, Geometry: "geom", SRID: 4326, ID: "gid"},
	)
	err := c.Check(t.Context(), testenv.ReadPool(t))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "b: ") || !strings.HasPrefix(lines[1], "c: ") ||
		!strings.Contains(lines[1], "; ") {
		t.Fatalf("report %q: want b, then c with both of its faults", err)
	}
	if c.Len() != 3 {
		t.Errorf("Len %d", c.Len())
	}
}

// A database that cannot be asked is an error, not a verdict.
func TestCheckUnasked(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := layercheck.New(layercheck.Spec{Layer: "a", Table: pgx.Identifier{"t"}, Geometry: "g"}).Check(ctx, testenv.ReadPool(t))
	if err == nil || layercheck.IsMismatch(err) {
		t.Fatalf("a cancelled check: %v, want an error that is not a mismatch", err)
	}
}
