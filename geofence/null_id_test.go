package geofence

import (
	"slices"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
)

// TestLayerRowsWithoutAnIDAreLeftOut: a geofence layer whose id column
// holds NULL in some rows (a table without a primary key) answers within,
// bbox, contains and check from its other rows, leaving those out: an
// answer names features by id. Each of them was a 500 before ("cannot scan
// NULL into *int64") whenever such a row matched.
func TestLayerRowsWithoutAnIDAreLeftOut(t *testing.T) {
	schema := testenv.Schema(t, "gfnullid", func(s string) []string {
		return []string{
			`CREATE TABLE ` + s + `.zones (id int, name text, geom geometry(Polygon, 4326) NOT NULL)`,
			`INSERT INTO ` + s + `.zones VALUES
				(1, 'one', ST_MakeEnvelope(10, 10, 12, 12, 4326)),
				(NULL, 'none', ST_MakeEnvelope(11, 10, 13, 12, 4326)),
				(2, 'two', ST_MakeEnvelope(14, 10, 15, 11, 4326))`,
			`GRANT USAGE ON SCHEMA ` + s + ` TO geotoll_reader`,
			`GRANT SELECT ON ALL TABLES IN SCHEMA ` + s + ` TO geotoll_reader`,
		}
	})
	cat := loadedCatalog(t, Layer{Name: "zones", Table: schema + ".zones", GeometryColumn: "geom", IDColumn: "id", Properties: []string{"name"}})
	store := NewStore(testenv.ReadPool(t))
	ctx := ctxT(t)
	ids := func(what string, fs []Feature, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var out []int64
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	fs, _, err := store.Within(ctx, WithinQuery{Layer: cat.Layer("zones"), Lng: 11.5, Lat: 11, Radius: 1000, Limit: 10})
	if got := ids("within", fs, err); !slices.Equal(got, []int64{1}) {
		t.Errorf("within: ids %v, want [1]", got)
	}
	fs, _, err = store.BBox(ctx, BBoxQuery{Layer: cat.Layer("zones"), Box: BBox{West: 9, South: 9, East: 16, North: 13}, Limit: 10})
	if got := ids("bbox", fs, err); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("bbox: ids %v, want [1 2]", got)
	}
	ct, err := cat.Containment("zones")
	if err != nil {
		t.Fatal(err)
	}
	fs, _, err = store.Contains(ctx, ContainsQuery{Layer: ct, Lng: 11.5, Lat: 11, Limit: 10})
	if got := ids("contains", fs, err); !slices.Equal(got, []int64{1}) {
		t.Errorf("contains: ids %v, want [1]", got)
	}
	checked, err := store.Check(ctx, CheckQuery{Layer: ct, Points: []Point{{ID: "a", Lng: 11.5, Lat: 11}, {ID: "b", Lng: 12.5, Lat: 11}, {ID: "c", Lng: 14.5, Lat: 10.5}}})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if want := [][]int64{{1}, {}, {2}}; !slices.EqualFunc(checked, want, slices.Equal[[]int64]) {
		t.Errorf("check: %v, want %v", checked, want)
	}
}
