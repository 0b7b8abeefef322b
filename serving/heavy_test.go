package serving_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/serving"
	"github.com/geotoll/geotoll/tiles"
)

// TestHeavyLayerReported: a polygon layer whose largest row (4,097
// vertices) exceeds its subdivide max_vertices (64) is heavy until it
// reads pieces: in Layer.Heavy, the /tiles catalog (naming geotoll
// prepare) and geotoll_tile_layer_heavy; once prepare built its pieces
// and the catalog read them, it is not, and CheckHeavy no longer scans
// its table.
func TestHeavyLayerReported(t *testing.T) {
	t.Parallel()
	owner, f, name := setup(t, true, "heavy_")
	shapes(t, f)
	reader := testenv.ReadPool(t)
	cat := catalog(t, shapesLayer(name, f.schema))
	l := cat.Layer(name)
	if err := l.CheckHeavy(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := server.WatchTileStorage(reg, cat, time.Now); err != nil {
		t.Fatal(err)
	}
	h := (&tiles.Handler{Catalog: cat, Store: tiles.NewStore(reader)}).Index()
	metric := func() string {
		t.Helper()
		want := "# HELP geotoll_tile_layer_heavy x\n# TYPE geotoll_tile_layer_heavy gauge\n"
		for _, v := range []string{"0", "1"} {
			text := want + `geotoll_tile_layer_heavy{layer="` + name + `"} ` + v + "\n"
			if testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(text, " x\n", " "+heavyHelp+"\n", 1)), "geotoll_tile_layer_heavy") == nil {
				return v
			}
		}
		return "?"
	}
	catalogHeavy := func() *tiles.Heavy {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://h/tiles", nil))
		var doc struct {
			Layers []struct {
				Name  string       `json:"name"`
				Heavy *tiles.Heavy `json:"heavy"`
			} `json:"layers"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || w.Code != http.StatusOK {
			t.Fatalf("/tiles: %d %s", w.Code, w.Body)
		}
		return doc.Layers[0].Heavy
	}
	hv := l.Heavy()
	if hv == nil || hv.MaxVertices != 4097 || hv.Limit != 64 || hv.Fix != "geotoll prepare" {
		t.Fatalf("Heavy() = %+v, want 4097 vertices over 64, fixed by geotoll prepare", hv)
	}
	if c := catalogHeavy(); c == nil || *c != *hv {
		t.Errorf("/tiles reports heavy %+v, want %+v", c, hv)
	}
	if v := metric(); v != "1" {
		t.Errorf("geotoll_tile_layer_heavy = %s, want 1", v)
	}
	if r := one(t, owner, l, serving.Options{Builders: []serving.Builder{serving.Subdivide{}}}); r.Status != serving.Built {
		t.Fatalf("prepare: %+v", r)
	}
	if _, err := cat.Refresh(t.Context(), reader); err != nil {
		t.Fatal(err)
	}
	if l.Heavy() != nil || catalogHeavy() != nil || metric() != "0" {
		t.Errorf("after prepare: Heavy() %+v, /tiles %+v, metric %s; want none", l.Heavy(), catalogHeavy(), metric())
	}
	// Reading pieces, the layer's rows are not scanned again: a check
	// whose context is done still succeeds (a scan would fail).
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.CheckHeavy(done, reader); err != nil {
		t.Errorf("CheckHeavy of a layer reading pieces scanned its table: %v", err)
	}
}

const heavyHelp = "1 when a line or polygon layer's largest rows exceed its subdivide max_vertices and it reads no pieces (run geotoll prepare), else 0."
