package calibrate

import (
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// checkFenceDemand fails t unless d is the demand serve's handler prices
// for the same request on the fences: a check tests the fences' pieces, so
// its estimate is capped at two pieces' vertices per fence found; contains
// renders whole fences, so its estimate is not.
func checkFenceDemand(t *testing.T, d geofence.Demand, lim geofence.Limits) {
	t.Helper()
	if d.Layer != "" {
		t.Errorf("%s on layer %q, want the fences", d.Kind, d.Layer)
	}
	switch d.Kind {
	case geofence.KindCheck:
		if d.PieceVertices != geofence.FencePieceVertices || d.Points != len(d.At) || d.Points < 1 {
			t.Errorf("check of %d points (%d positions) with PieceVertices %d, want %d as serve prices it",
				d.Points, len(d.At), d.PieceVertices, geofence.FencePieceVertices)
		}
	case geofence.KindContains:
		if d.PieceVertices != 0 || d.Points != 1 || len(d.At) != 1 || d.Limit != lim.DefaultLimit {
			t.Errorf("contains %+v, want one point, limit %d and whole fences (PieceVertices 0) as serve prices it", d, lim.DefaultLimit)
		}
	default:
		t.Errorf("a fence sample of kind %s", d.Kind)
	}
}

func TestFenceSampleIsWhatServePrices(t *testing.T) {
	lim := geofence.DefaultLimits()
	sample := FenceSample(7, 12, lim, []orb.Point{{13.4, 52.5}})
	kinds := map[geofence.Kind]int{}
	for _, d := range sample {
		checkFenceDemand(t, d, lim)
		kinds[d.Kind]++
	}
	if kinds[geofence.KindContains] != 12 || kinds[geofence.KindCheck] != 12 {
		t.Errorf("sample of %v, want 12 of each kind", kinds)
	}
}

// recordingEstimator answers every request with the same estimate and
// keeps the geofence demands it was asked about.
type recordingEstimator struct {
	mu      sync.Mutex
	demands []geofence.Demand
}

func (e *recordingEstimator) Tile(*tiles.Layer, maptile.Tile) (density.Estimate, bool) {
	return density.Estimate{Features: 1, Vertices: 10}, true
}

func (e *recordingEstimator) Geofence(d geofence.Demand) (density.Estimate, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.demands = append(e.demands, d)
	return density.Estimate{Features: 1, Vertices: 10}, true
}

// Run asks the density models about the fences' requests as serve does:
// the estimates it fits the fences' work model to are the ones serve
// prices contains and check with.
func TestRunEstimatesFencesAsServePrices(t *testing.T) {
	est := &recordingEstimator{}
	lim := geofence.DefaultLimits()
	lim.MaxBatch = 20 // small batches: the test times real queries
	rep, err := Run(t.Context(), Options{
		Geofence: geofence.NewStore(testenv.ReadPool(t)), Estimator: est, Limits: lim,
		FenceAnchors: []orb.Point{{13.4, 52.5}}, Queries: 4, Runs: 1,
		Charged: func(estimate float64, _ time.Duration, _, _ float64) float64 { return estimate },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(est.demands) != 8 || len(rep.Samples) != 8 {
		t.Fatalf("%d demands estimated, %d samples, want 8 of each", len(est.demands), len(rep.Samples))
	}
	for _, d := range est.demands {
		checkFenceDemand(t, d, lim)
	}
	for _, s := range rep.Samples {
		if s.Group != "fences" {
			t.Errorf("sample %q in group %q, want fences", s.Request, s.Group)
		}
	}
}

// Merge keeps the models the newer file has none of and takes the newer's
// for the rest.
func TestFileMerge(t *testing.T) {
	m := func(q float64) throttle.WorkModel { return throttle.WorkModel{QueryMS: q} }
	fences, newFences := m(1), m(2)
	old := File{Tiles: map[string]throttle.WorkModel{"a": m(1), "b": m(1)}, Geofence: map[string]throttle.WorkModel{"g": m(1)}, Fences: &fences}
	got := old.Merge(File{Tiles: map[string]throttle.WorkModel{"b": m(2), "c": m(2)}})
	if got.Tiles["a"] != m(1) || got.Tiles["b"] != m(2) || got.Tiles["c"] != m(2) || got.Geofence["g"] != m(1) || *got.Fences != fences {
		t.Errorf("merged %+v", got)
	}
	if got := old.Merge(File{Fences: &newFences}); *got.Fences != newFences || got.Tiles["a"] != m(1) {
		t.Errorf("merged fences: %+v", got)
	}
	if got := (File{}).Merge(File{}); got.Tiles != nil || got.Geofence != nil || got.Fences != nil || got.Containment != nil {
		t.Errorf("two empty files: %+v", got)
	}
	withLayer := File{Containment: map[string]throttle.WorkModel{"g": m(1), "h": m(1)}}
	if got := withLayer.Merge(File{Containment: map[string]throttle.WorkModel{"h": m(2)}}); got.Containment["g"] != m(1) || got.Containment["h"] != m(2) {
		t.Errorf("merged containment: %+v", got.Containment)
	}
}

// Contains and check on a layer are timed on that layer's containment and
// estimated as serve's handler prices them there: the layer named, each
// kind testing what serve reads for it (PieceVertices of its pieces, 0 on
// its table), in a group of their own.
func TestRunTimesContainmentOnItsLayer(t *testing.T) {
	cat, err := geofence.NewCatalog([]geofence.Layer{{Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom", IDColumn: "id"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.LoadContainment(t.Context(), testenv.ReadPool(t)); err != nil {
		t.Fatal(err)
	}
	ct, err := cat.Containment("districts")
	if err != nil {
		t.Fatal(err)
	}
	est := &recordingEstimator{}
	lim := geofence.DefaultLimits()
	lim.MaxBatch = 20
	rep, err := Run(t.Context(), Options{
		Geofence: geofence.NewStore(testenv.ReadPool(t)), Estimator: est, Limits: lim, Containment: []*geofence.Containment{ct},
		Anchors: map[string][]orb.Point{"geofence/districts": {{13.4, 52.5}}}, Queries: 6, Runs: 1,
		Charged: func(estimate float64, _ time.Duration, _, _ float64) float64 { return estimate },
	})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]int{}
	for _, s := range rep.Samples {
		groups[s.Group]++
	}
	if groups["fences"] != 12 || groups["containment/districts"] != 12 || len(groups) != 2 {
		t.Fatalf("samples by group %v, want 12 of fences and 12 of containment/districts", groups)
	}
	kinds := map[geofence.Kind]int{}
	for _, d := range est.demands {
		if d.Layer == "" {
			continue
		}
		kinds[d.Kind]++
		if d.Layer != "districts" || d.PieceVertices != ct.PieceVertices || d.Points != len(d.At) {
			t.Errorf("%s demand %+v, want layer districts and PieceVertices %d as serve prices it", d.Kind, d, ct.PieceVertices)
		}
	}
	if kinds[geofence.KindContains] != 6 || kinds[geofence.KindCheck] != 6 {
		t.Errorf("demands on the layer %v, want 6 of each kind", kinds)
	}
	fitted := false
	for _, g := range rep.Groups {
		if g.Name != "containment/districts" {
			continue
		}
		if g.Err != nil {
			t.Fatalf("group %s not fitted: %v", g.Name, g.Err)
		}
		fitted = true
		if got := rep.File().Containment["districts"]; got != g.Work {
			t.Errorf("group %s fitted %+v, the file's containment model of districts is %+v", g.Name, g.Work, got)
		}
	}
	if !fitted {
		t.Errorf("no group containment/districts among %+v", rep.Groups)
	}
}
