package geofence

import (
	"strings"
	"testing"

	"github.com/geotoll/geotoll/internal/layercheck"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// A layer the last layer check found not to match its table (a grant
// revoked) is a 503 naming it wherever a request names it, ?layer= of
// within, bbox, contains and check alike: contains and check read its
// pieces, geotoll's own tables, which outlive the table's grant. Once it
// matches again, it resolves.
func TestResolveRefusesAMisfitLayer(t *testing.T) {
	t.Parallel()
	s := testenv.Schema(t, "gv_", func(s string) []string {
		return []string{
			"CREATE TABLE " + s + ".zones (id int PRIMARY KEY, name text, geom geometry(Polygon, 4326))",
			"GRANT USAGE ON SCHEMA " + s + " TO geotoll_reader",
			"GRANT SELECT ON " + s + ".zones TO geotoll_reader",
		}
	})
	cat, err := NewCatalog([]Layer{{Name: "zones", Table: s + ".zones", GeometryColumn: "geom", Properties: []string{"name"}}})
	if err != nil {
		t.Fatal(err)
	}
	checker, owner, reader := layercheck.New(cat.Checks()...), testenv.Pool(t), testenv.ReadPool(t)
	if err := checker.Check(t.Context(), reader); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, err := cat.Resolve("zones"); err != nil {
		t.Fatalf("a layer that matches: %v", err)
	}
	if _, err := owner.Exec(t.Context(), "REVOKE SELECT ON "+s+".zones FROM geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(t.Context(), reader); !layercheck.IsMismatch(err) {
		t.Fatalf("check after the revoke: %v, want a mismatch", err)
	}
	_, err = cat.Resolve("zones")
	if p := problem.From(err); p.Code != problem.Unavailable || p.RetryAfter == 0 ||
		!strings.HasPrefix(p.Detail, `layer "zones" does not match the database: role`) {
		t.Errorf("a revoked layer: %v (code %s, Retry-After %d)", err, p.Code, p.RetryAfter)
	}
	if _, err := owner.Exec(t.Context(), "GRANT SELECT ON "+s+".zones TO geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(t.Context(), reader); err != nil {
		t.Fatalf("check after the grant: %v", err)
	}
	if _, err := cat.Resolve("zones"); err != nil {
		t.Errorf("granted again: %v", err)
	}
}
