package serving_test

import (
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// A layer whose generalisation settings changed since `geotoll prepare`
// built its overviews (here cluster_px 8 → 2: 256 cells per tile instead
// of 64) must not be served from them: they hold the clusters of the old
// grid, where its configuration asks for finer ones. Until the next
// prepare, which rebuilds them (the registry's params differ), its low
// zooms read the table, clustered by the query on the configured grid;
// after it, the new overviews.
func TestStorageOfOtherSettingsIsNotRead(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "resettled_")
	base := tiles.Layer{Name: name, Table: f.schema + ".pts", GeometryColumn: "geom", GeometryKind: tiles.KindPoint,
		Properties: []string{"name", "rank"}, OrderBy: []string{"rank"}}
	if r := one(t, owner, catalog(t, base).Layer(name), serving.Options{}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	finer := base
	finer.Generalize.ClusterPixels = 2
	cat := catalog(t, finer)
	reader := testenv.ReadPool(t)
	res, err := cat.Refresh(t.Context(), reader)
	if err != nil {
		t.Fatal(err)
	}
	l := cat.Layer(name)
	if src := l.Source(3); src.Builder != "" || src.Generalization.CellsPerTile != 256 {
		t.Errorf("layer %s with cluster_px 2: z3 reads %s (builder %q) with %d cells per tile, built with cluster_px 8; want its table, 256 cells",
			name, src.Relation.Sanitize(), src.Builder, src.Generalization.CellsPerTile)
	}
	if len(res.Warnings) == 0 {
		t.Error("no warning of the overviews left out")
	}
	if r := one(t, owner, l, serving.Options{}); r.Status != serving.Built {
		t.Errorf("prepare with cluster_px 2: %s (%v), want built", r.Status, r.Err)
	}
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	if src := l.Source(3); src.Builder != tiles.BuilderOverview || src.Generalization.CellsPerTile != 256 {
		t.Errorf("after prepare, z3 reads %s (builder %q) with %d cells per tile; want its new overview, 256 cells",
			src.Relation.Sanitize(), src.Builder, src.Generalization.CellsPerTile)
	}
}
