package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// logged is a captured log record: its level, message and "err".
type logged struct {
	level    slog.Level
	msg, err string
}

// capture is a slog.Handler that keeps every record.
type capture struct {
	mu   sync.Mutex
	recs []logged
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	l := logged{level: r.Level, msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			l.err = a.Value.String()
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, l)
	return nil
}

func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// take returns the records of msg logged since the last take, and forgets
// them.
func (c *capture) take(msg string) []logged {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out, rest []logged
	for _, r := range c.recs {
		if r.msg == msg {
			out = append(out, r)
		} else {
			rest = append(rest, r)
		}
	}
	c.recs = rest
	return out
}

// A storage warning of the periodic refresh (tiles.storage_refresh, 30 s)
// is logged once, when a refresh first finds it, not at every refresh
// that finds it again; and once more, at info, when a refresh no longer
// finds it. Here the tile layer "places" configured onto another table
// than its storage was built from (its overviews are not read), and a
// geofence layer whose pieces lack a property it serves.
func TestStorageWarningsLoggedOnce(t *testing.T) {
	t.Parallel()
	prepareDemo(t) // the demo's storage, which the warnings are about
	logs := &capture{}
	m := &Main{Background: testenv.ReadPool(t), Logger: slog.New(logs)}
	moved, err := tiles.NewCatalog([]tiles.Layer{{Name: "places", Table: "geotoll.districts", GeometryColumn: "geom_3857",
		SRID: 3857, IDColumn: "id", GeometryKind: tiles.KindPolygon}})
	if err != nil {
		t.Fatal(err)
	}
	fences := func(props ...string) *geofence.Catalog {
		c, err := geofence.NewCatalog([]geofence.Layer{{Name: "districts", Table: "geotoll.districts", GeometryColumn: "geom",
			IDColumn: "id", Properties: props}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	m.fenceLayers = fences("name", "not_in_the_pieces")

	const tileWarning, fenceWarning = "tile layer storage", "geofence layer storage"
	warned := map[string]map[string]bool{tileWarning: {}, fenceWarning: {}}
	for i := range 3 {
		m.refreshStorage(t.Context(), moved, nil)
		m.refreshContainment(t.Context())
		for msg, seen := range warned {
			recs := logs.take(msg)
			if i == 0 && len(recs) == 0 {
				t.Fatalf("the first refresh logged no %q warning", msg)
			}
			for _, r := range recs {
				if seen[r.err] {
					t.Errorf("refresh %d logged %q again: %s", i+1, msg, r.err)
				}
				seen[r.err] = true
			}
		}
	}

	// Configured as built: the warnings clear, each logged once as such.
	var places tiles.Layer
	for _, lc := range DefaultConfig().Layers {
		if lc.Name == "places" {
			places = lc.Layer
		}
	}
	asBuilt, err := tiles.NewCatalog([]tiles.Layer{places})
	if err != nil {
		t.Fatal(err)
	}
	m.fenceLayers = fences("name", "city", "population")
	for range 2 {
		m.refreshStorage(t.Context(), asBuilt, nil)
		m.refreshContainment(t.Context())
	}
	for msg, seen := range warned {
		if recs := logs.take(msg); len(recs) != 0 {
			t.Errorf("configured as built, %q still logged: %+v", msg, recs)
		}
		cleared := map[string]int{}
		for _, r := range logs.take(msg + " warning cleared") {
			cleared[r.err]++
			if r.level != slog.LevelInfo {
				t.Errorf("%q cleared at level %s, want INFO", msg, r.level)
			}
		}
		for w := range seen {
			if cleared[w] != 1 {
				t.Errorf("%q warning logged as cleared %d times, want once: %s", msg, cleared[w], w)
			}
		}
	}
}

// A check that failed part-way (the registry not read) may have missed
// warnings that still stand: it clears none; the next complete check does.
func TestWarningLogIncompleteCheckClearsNothing(t *testing.T) {
	t.Parallel()
	logs := &capture{}
	logger := slog.New(logs)
	var w warningLog
	w.report(t.Context(), logger, "storage", []string{"a", "b"}, true)
	w.report(t.Context(), logger, "storage", []string{"c"}, false)
	if got := logs.take("storage warning cleared"); len(got) != 0 {
		t.Errorf("an incomplete check cleared %+v", got)
	}
	w.report(t.Context(), logger, "storage", []string{"b", "c"}, true)
	w.report(t.Context(), logger, "storage", []string{"b", "c"}, true)
	var warned, cleared []string
	for _, r := range logs.take("storage") {
		warned = append(warned, r.err)
	}
	for _, r := range logs.take("storage warning cleared") {
		cleared = append(cleared, r.err)
	}
	if !slices.Equal(warned, []string{"a", "b", "c"}) || !slices.Equal(cleared, []string{"a"}) {
		t.Errorf("warned %q, cleared %q; want a, b, c warned once each and a cleared", warned, cleared)
	}
}

// A layer whose table is gone (renamed, dropped) while storage built from
// it is registered is warned of as such: the warning named the table as it
// was built from and as the layer names it — the same name twice.
func TestStorageWarningOfAMissingTableSaysSo(t *testing.T) {
	t.Parallel()
	prepareDemo(t)
	logs := &capture{}
	m := &Main{Background: testenv.ReadPool(t), Logger: slog.New(logs)}
	var places tiles.Layer
	for _, lc := range DefaultConfig().Layers {
		if lc.Name == "places" {
			places = lc.Layer
		}
	}
	places.Table = "geotoll.places_renamed_away"
	cat, err := tiles.NewCatalog([]tiles.Layer{places})
	if err != nil {
		t.Fatal(err)
	}
	m.refreshStorage(t.Context(), cat, nil)
	recs := logs.take("tile layer storage")
	found := false
	for _, r := range recs {
		if strings.Contains(r.err, `the layer's table "geotoll"."places_renamed_away" does not exist now`) {
			found = true
		}
	}
	if !found {
		t.Errorf("warnings %+v: want one saying the layer's table does not exist", recs)
	}
}
