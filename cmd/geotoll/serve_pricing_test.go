package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/internal/density"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/tiles"
	"github.com/geotoll/geotoll/toll"
)

// A model whose refreshes keep failing stays in use, and /readyz says so:
// degraded (still 200), naming it, how old it is and why its builds fail —
// not "N price models" as if all were current. Models still building say
// they are priced by size, beside it.
func TestPricingReadySaysStaleModels(t *testing.T) {
	t.Parallel()
	fresh := density.Status{Summary: density.Summary{Relation: `"geotoll"."places"."geom"`}, Ready: true, Age: time.Minute}
	failing := density.Status{Summary: density.Summary{Relation: `"geotoll"."big"."geom"`}, Ready: true, Age: 5 * time.Hour,
		Failures: 31, LastError: "density: begin: context deadline exceeded", Stale: true}
	stuck := density.Status{Summary: density.Summary{Relation: `"geotoll"."stuck"."geom"`}, Ready: true, Age: time.Hour, Stale: true}
	unbuilt := density.Status{Summary: density.Summary{Relation: `"geotoll"."new"."geom"`}}
	for _, tc := range []struct {
		name     string
		all      []density.Status
		degraded bool
		want     []string
	}{
		{"all current", []density.Status{fresh, fresh}, false, []string{"2 price models"}},
		{"refreshes failing", []density.Status{fresh, failing}, true, []string{"1 of 2 price models not refreshed",
			`"geotoll"."big"."geom" (model 5h0m0s old; 31 failed builds since: density: begin: context deadline exceeded)`,
			"priced by the last model built"}},
		{"no build ends", []density.Status{stuck}, true, []string{`"geotoll"."stuck"."geom" (model 1h0m0s old; no build has ended since)`}},
		{"building and stale", []density.Status{unbuilt, failing, fresh}, true, []string{
			`1 of 3 price models not built yet ("geotoll"."new"."geom"): their requests are priced by their size; 1 of 3 price models not refreshed ("geotoll"."big"."geom"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pricingReady(tc.all)
			var degraded *server.DegradedError
			var note *server.ReadyNote
			if tc.degraded && !errors.As(err, &degraded) || !tc.degraded && !errors.As(err, &note) {
				t.Fatalf("readiness %T %v, want degraded %v (never a failure: the replica stays in load balancing)", err, err, tc.degraded)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("readiness %q, want it to say %q", err, w)
				}
			}
		})
	}
}

// geotoll_price_model_failed_builds counts a relation's failed builds since
// its last success, for GeotollPriceModelStale to fire on.
func TestPriceModelFailedBuildsExported(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Throttle.Pricing = PricingDensity
	m := &Main{Config: cfg, Registry: prometheus.NewRegistry(), Background: testenv.ReadPool(t)}
	cat, err := tiles.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.openPricing(&toll.Toll{}, cat); err != nil {
		t.Fatal(err)
	}
	r, err := m.pricing.models.Track(density.Relation{Table: pgx.Identifier{"geotoll", "no_such_table"}, GeometryColumn: "geom", SRID: 4326, Kind: density.Point})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := r.Refresh(ctx); err == nil {
			t.Fatal("a build of a missing table succeeded")
		}
	}
	want := `
# HELP geotoll_price_model_failed_builds ` + modelFailuresHelp + `
# TYPE geotoll_price_model_failed_builds gauge
geotoll_price_model_failed_builds{relation="\"geotoll\".\"no_such_table\".\"geom\""} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "geotoll_price_model_failed_builds"); err != nil {
		t.Error(err)
	}
}

// A fence write rebuilds the price models of the fence table within
// density.NudgeGap, not at their next interval (10 minutes): contains,
// check and the fence tiles inside a fence just written are priced by
// what they read now.
func TestFenceWriteRebuildsItsPriceModels(t *testing.T) {
	t.Parallel()
	m := startMain(t, nil)
	waitPriced(t, m)
	builds := func() map[string]time.Time {
		out := map[string]time.Time{}
		for _, st := range m.pricing.models.Status() {
			if strings.HasPrefix(st.Relation, `"geotoll"."geofences"`) {
				out[st.Relation] = st.LastAttempt
			}
		}
		return out
	}
	before := builds()
	if len(before) == 0 {
		t.Fatalf("no price model of the fence table: %+v", m.pricing.models.Status())
	}
	m.fencesWritten()
	deadline := time.Now().Add(density.NudgeGap + 20*time.Second)
	for rel, at := range before {
		for !builds()[rel].After(at) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no build since %v, %v after the write", rel, at, density.NudgeGap+20*time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
