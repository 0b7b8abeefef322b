package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/geotoll/geotoll/geofence"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// layerSchema creates a schema the read role may use, with a copy of a few
// demo places (geom in 4326, geom_3857) in table `pts`, which the read role
// may SELECT, and the same in `secret`, which it may not. It is dropped
// when the test ends.
func layerSchema(t *testing.T) string {
	t.Helper()
	return testenv.Schema(t, "sl_", func(s string) []string {
		return []string{
			"GRANT USAGE ON SCHEMA " + s + " TO geotoll_reader",
			"CREATE TABLE " + s + ".pts AS SELECT id, name, geom, geom_3857 FROM geotoll.places WHERE id <= 2000",
			"CREATE TABLE " + s + ".secret AS TABLE " + s + ".pts",
			"GRANT SELECT ON " + s + ".pts TO geotoll_reader",
		}
	})
}

// openMain opens a Main as startMain does and returns the error of Open.
func openMain(t *testing.T, edit func(*Config)) error {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = testenv.ReadDatabaseURL(t)
	cfg.Throttle.Prefix = testenv.Prefix(t)
	edit(&cfg)
	m := &Main{Config: cfg, Logger: quietLog(), ModelShelf: testShelf}
	err := m.Open(t.Context())
	m.Close()
	return err
}

// A configured layer that does not match its table refuses the start, with
// a message that names the layer and says what is wrong.
func TestStartRefusesLayersThatDoNotMatch(t *testing.T) {
	t.Parallel()
	s := layerSchema(t)
	tile := func(table, geom string, srid int) func(*Config) {
		return func(c *Config) {
			c.Layers = append(c.Layers, LayerConfig{Layer: tiles.Layer{Name: "broken", Table: s + "." + table,
				GeometryColumn: geom, SRID: srid, Properties: []string{"name"}}})
		}
	}
	fence := func(table, geom string, props ...string) func(*Config) {
		return func(c *Config) {
			c.Geofence.Layers = append(c.Geofence.Layers, geofence.Layer{Name: "broken", Table: s + "." + table,
				GeometryColumn: geom, Properties: props})
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		layer string
		want  string
	}{
		{"missing table", tile("nope", "geom_3857", 3857), `tile layer "broken"`, `table "` + s + `"."nope" does not exist`},
		{"wrong geometry column", tile("pts", "the_geom", 3857), `tile layer "broken"`, `geometry_column "the_geom": no such column`},
		{"wrong property", func(c *Config) {
			tile("pts", "geom_3857", 3857)(c)
			c.Layers[len(c.Layers)-1].Properties = []string{"name", "kind"}
		}, `tile layer "broken"`, `properties: column "kind": no such column`},
		{"wrong SRID", tile("pts", "geom", 3857), `tile layer "broken"`, `geometry_column "geom" has SRID 4326, not 3857`},
		{"wrong order_by", func(c *Config) {
			tile("pts", "geom_3857", 3857)(c)
			c.Layers[len(c.Layers)-1].OrderBy = []string{"rank desc"}
		}, `tile layer "broken"`, `order_by: column "rank": no such column`},
		{"no SELECT right", tile("secret", "geom_3857", 3857), `tile layer "broken"`, `role "geotoll_reader" may not SELECT from "` + s + `"."secret"`},
		{"geofence: missing table", fence("nope", "geom"), `geofence layer "broken"`, "does not exist"},
		{"geofence: wrong column", fence("pts", "geom", "rank"), `geofence layer "broken"`, `properties: column "rank": no such column`},
		{"geofence: wrong SRID", fence("pts", "geom_3857"), `geofence layer "broken"`, `geometry_column "geom_3857" has SRID 3857, not 4326`},
		{"geofence: no SELECT right", fence("secret", "geom"), `geofence layer "broken"`, "may not SELECT from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := openMain(t, tc.edit)
			if err == nil {
				t.Fatal("started with a layer that does not match its table")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.layer+": ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("start-up error %q, want it to name %s and say %q", msg, tc.layer, tc.want)
			}
		})
	}
	// The same layers over a table that fits start.
	if err := openMain(t, func(c *Config) {
		tile("pts", "geom_3857", 3857)(c)
		c.Layers[len(c.Layers)-1].OrderBy = []string{"name"}
		fence("pts", "geom", "name", "geom_3857")(c) // a geometry property is answered as GeoJSON
	}); err != nil {
		t.Fatalf("layers that fit: %v", err)
	}
}

// A layer whose table is dropped while the server runs answers 503 with
// the reason, never 500; /readyz names it (and stays 200: the other layers
// serve on), and the other layers are unaffected.
func TestDroppedLayerTable(t *testing.T) {
	t.Parallel()
	s := layerSchema(t)
	m := startMain(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.Layers = append(c.Layers, LayerConfig{Layer: tiles.Layer{Name: "vanishing", Table: s + ".pts",
			GeometryColumn: "geom_3857", SRID: 3857, Properties: []string{"name"}}})
		c.Geofence.Layers = append(c.Geofence.Layers, geofence.Layer{Name: "vanishing", Table: s + ".pts",
			GeometryColumn: "geom", Properties: []string{"name"}})
	})
	base := "http://" + m.Addr()
	tile := base + "/tiles/vanishing/10/550/335.mvt"
	within := base + "/geofence/within?layer=vanishing&lng=13.4&lat=52.5&radius=1000"
	for _, u := range []string{tile, within} {
		if resp, body := get(t, u, ""); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%s before the drop: %d %s", u, resp.StatusCode, short(body))
		}
	}
	if _, err := testenv.Pool(t).Exec(t.Context(), "DROP TABLE "+s+".pts"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{tile, within} {
		resp, body := get(t, u, "")
		var doc struct{ Detail string }
		_ = json.Unmarshal(body, &doc)
		// The database's reason, or the layer check's once it has run.
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(doc.Detail, `layer "vanishing" does not match the database: relation "`+s+`.pts" does not exist`) &&
				!strings.Contains(doc.Detail, `layer "vanishing" does not match the database: table "`+s+`"."pts" does not exist`) {
			t.Errorf("%s after the drop: %d (Retry-After %q) %s", u, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if resp, body := get(t, base+"/tiles/places/10/550/335.mvt", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("another layer after the drop: %d %s", resp.StatusCode, short(body))
	}
	var ready struct {
		Ready  bool
		Checks map[string]string
	}
	deadline := time.Now().Add(10 * time.Second) // the background checks run every second
	for {
		resp, body := get(t, base+"/readyz", "")
		if err := json.Unmarshal(body, &ready); err != nil {
			t.Fatalf("/readyz %s: %v", body, err)
		}
		// A check that began before the drop may have found the table for
		// the tile layer and missed it for the geofence layer (its
		// statements read the catalog one after another); the next one
		// finds both.
		if strings.Contains(ready.Checks["layers"], `tile layer "vanishing"`) &&
			strings.Contains(ready.Checks["layers"], `geofence layer "vanishing"`) {
			if resp.StatusCode != http.StatusOK || !ready.Ready ||
				!strings.HasPrefix(ready.Checks["layers"], `degraded: tile layer "vanishing": table "`+s+`"."pts" does not exist`) ||
				!strings.Contains(ready.Checks["layers"], `; geofence layer "vanishing": table`) {
				t.Errorf("/readyz: %d %s", resp.StatusCode, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz does not report the dropped table for both layers after 10 s: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A layer that is a view over a minute's sleep neither delays the start
// nor is ever read by the checks: start-up and every background recheck
// read the catalog only, so /readyz says the layers match, round after
// round, and no statement reading the view runs.
func TestRecheckNeverReadsASlowLayer(t *testing.T) {
	t.Parallel()
	s := testenv.Schema(t, "slow_", func(s string) []string {
		return []string{
			"GRANT USAGE ON SCHEMA " + s + " TO geotoll_reader",
			"CREATE VIEW " + s + ".sleepy AS SELECT 1::bigint AS id, 'x'::text AS name, " +
				"ST_SetSRID(ST_MakePoint(0, 0), 3857) AS geom FROM pg_sleep(60)",
			"GRANT SELECT ON " + s + ".sleepy TO geotoll_reader",
		}
	})
	owner := testenv.Pool(t)
	t.Cleanup(func() { // runs before the schema is dropped
		_, _ = owner.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND strpos(query, $1) > 0`, s)
	})
	m := startMain(t, func(c *Config) {
		c.HTTP.ReadyInterval = 200 * time.Millisecond
		c.Layers = append(c.Layers, LayerConfig{Layer: tiles.Layer{Name: "sleepy", Table: s + ".sleepy",
			GeometryColumn: "geom", SRID: 3857, Properties: []string{"name"}}})
	})
	rounds := make(map[string]bool)
	deadline := time.Now().Add(20 * time.Second)
	for len(rounds) < 5 {
		resp, body := get(t, "http://"+m.Addr()+"/readyz", "")
		var ready struct {
			CheckedAt string `json:"checked_at"`
			Checks    map[string]string
		}
		if err := json.Unmarshal(body, &ready); err != nil {
			t.Fatalf("/readyz %s: %v", body, err)
		}
		if layers, ok := ready.Checks["layers"]; ok && !strings.HasSuffix(layers, "layers match the database") {
			t.Fatalf("/readyz: %d %s", resp.StatusCode, body)
		}
		if n := runningFor(t, owner, s, "geotoll", "geotoll-background"); n > 0 { // requests and checks, not builds
			t.Fatalf("%d statements of the slow view's schema run after %d rounds of checks", n, len(rounds))
		}
		if ready.CheckedAt != "" {
			rounds[ready.CheckedAt] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds of readiness checks in 20 s: %s", len(rounds), body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A layer whose table's grant is revoked while the server runs answers 503
// at every zoom, its overviews too: they are geotoll's own tables, which
// the read role may still read, and served the table's rows until the
// next prepare retired them. Granted again, the layer serves again. The
// answer gives the layer check's reason.
func TestRevokedGrantStopsTheLayersStorage(t *testing.T) {
	t.Parallel()
	s := layerSchema(t)
	owner := testenv.Pool(t)
	name := "revoked_" + strings.TrimPrefix(testenv.Prefix(t), "geotoll-test-")
	testenv.ForgetStorage(t, owner, name)
	layer := LayerConfig{Layer: tiles.Layer{Name: name, Table: s + ".pts", GeometryColumn: "geom_3857", SRID: 3857,
		GeometryKind: tiles.KindPoint, Properties: []string{"name"}, Overviews: tiles.Overviews{MaxZoom: 2}}}
	cat, err := tiles.NewCatalog([]tiles.Layer{layer.Layer})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range serving.Prepare(t.Context(), owner, []*tiles.Layer{cat.Layer(name)}, serving.Options{Builders: []serving.Builder{serving.Overview{}}}) {
		if r.Layer == name && r.Status != serving.Built {
			t.Fatalf("prepare: %+v", r)
		}
	}
	m := startMain(t, func(c *Config) {
		c.Tiles.Cache.MaxBytes = 0
		c.HTTP.ReadyInterval = 200 * time.Millisecond
		c.Layers = append(c.Layers, layer)
	})
	base := "http://" + m.Addr()
	overview := base + "/tiles/" + name + "/0/0/0.mvt" // read from the overview
	status := func() (int, string, string) {
		resp, body := get(t, overview, "")
		var doc struct{ Detail string }
		_ = json.Unmarshal(body, &doc)
		return resp.StatusCode, resp.Header.Get("Retry-After"), doc.Detail
	}
	// until waits for the tile to answer want.
	until := func(want int, why string) (string, string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second) // the checks run every 200 ms
		for {
			code, retry, detail := status()
			if code == want {
				return retry, detail
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the overview tile still answers %d (%s) after 10 s", why, code, detail)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until(http.StatusOK, "before the revoke")
	if _, err := owner.Exec(t.Context(), "REVOKE SELECT ON "+s+".pts FROM geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	retry, detail := until(http.StatusServiceUnavailable, "revoked")
	if retry == "" || !strings.HasPrefix(detail, `layer "`+name+`" does not match the database: role`) ||
		!strings.Contains(detail, "may not SELECT") {
		t.Errorf("revoked: Retry-After %q, detail %q", retry, detail)
	}
	// Its TileJSON too: its bounds and fields are the table's (read from
	// its statistics, which a revoke leaves readable).
	if resp, body := get(t, base+"/tiles/"+name+".json", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("TileJSON of the revoked layer: %d %s", resp.StatusCode, short(body))
	}
	if _, err := owner.Exec(t.Context(), "GRANT SELECT ON "+s+".pts TO geotoll_reader"); err != nil {
		t.Fatal(err)
	}
	until(http.StatusOK, "granted again")
}
