package tiles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
)

// countingDescriber describes every layer with bounds that move east by a
// degree at every call.
type countingDescriber struct{ calls atomic.Int32 }

func (d *countingDescriber) Describe(context.Context, *Layer) (LayerInfo, error) {
	n := float64(d.calls.Add(1))
	return LayerInfo{Bounds: [4]float64{n, 0, n + 1, 1}, Fields: map[string]string{}}, nil
}

// A layer's description is read again once it is describeMaxAge old, so
// that bounds the planner's statistics moved (data loaded, then analyzed)
// reach TileJSON without a restart.
func TestTileJSONDescriptionExpires(t *testing.T) {
	t.Parallel()
	cat, err := NewCatalog([]Layer{{Name: "places", Table: "geotoll.places", GeometryColumn: "geom_3857"}})
	if err != nil {
		t.Fatal(err)
	}
	d := &countingDescriber{}
	h := &Handler{Catalog: cat, Describer: d}
	r := mux.NewRouter()
	r.Handle("/tiles/{"+VarLayer+"}.json", h.TileJSON())
	etag := func() string {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tiles/places.json", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		return w.Header().Get("ETag")
	}
	first := etag()
	if second := etag(); second != first || d.calls.Load() != 1 {
		t.Fatalf("a fresh description was read again (%d calls), or changed", d.calls.Load())
	}
	l := cat.Layer("places")
	h.infoMu.Lock()
	info := h.info[l]
	info.readAt = info.readAt.Add(-describeMaxAge - time.Second)
	h.info[l] = info
	h.infoMu.Unlock()
	if third := etag(); third == first || d.calls.Load() != 2 {
		t.Errorf("a description older than %v was not read again (%d calls)", describeMaxAge, d.calls.Load())
	}
}
