package geofence

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
)

// adminAPI is the geofence API over the real stores with limits of the
// test's choosing and writes through writer.
func adminAPI(t *testing.T, limits Limits, writer *Store) http.Handler {
	t.Helper()
	h, err := NewHandler(Options{Layers: demoLayers(), Limits: limits, AdminKeys: []string{testAdminKey},
		Reader: NewStore(testenv.ReadPool(t)), Writer: writer, Gate: passGate{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return testRouter(h)
}

// positions counts the positions of a fence's geometry as answered.
func positions(t *testing.T, geometry json.RawMessage) int {
	t.Helper()
	g, err := unmarshalGeometry(geometry)
	if err != nil {
		t.Fatalf("geometry %.100s: %v", geometry, err)
	}
	n := 0
	for _, p := range g.(orb.MultiPolygon) {
		for _, ring := range p {
			n += len(ring)
		}
	}
	return n
}

// listPage is one page of the fence list: its fences, their positions,
// and its next member.
type listPage struct {
	ids       []int64
	positions int
	next      string
}

func getPage(t *testing.T, api http.Handler, target string) listPage {
	t.Helper()
	w := serve(api, http.MethodGet, target, "", "X-API-Key", testAdminKey)
	fc := collectionOf(t, w)
	var members struct{ Next string }
	if err := json.Unmarshal(w.Body.Bytes(), &members); err != nil {
		t.Fatal(err)
	}
	p := listPage{next: members.Next}
	for _, f := range fc.Features {
		p.ids = append(p.ids, f.ID)
		p.positions += positions(t, f.Geometry)
	}
	return p
}

// A page of the fence list is bounded in positions, not only in fences:
// it ends before the fence that would take it past max_response_vertices
// and gives next, so that the client reads the rest page by page; a fence
// larger than the bound is still listed, alone on its page. Pages used to
// carry limit fences whatever their size (two fences of 250,000 positions
// made a 20 MB answer).
func TestFenceListIsBoundedInPositions(t *testing.T) {
	writer := NewStore(writerPool(t))
	limits := DefaultLimits()
	limits.MaxResponseVertices = 100
	api := adminAPI(t, limits, writer)
	s := randomSuffix()
	a := fence(t, writer, "list a "+s, circle(-40, -60, 60))
	b := fence(t, writer, "list b "+s, circle(-38, -60, 60))
	c := fence(t, writer, "list c "+s, circle(-36, -60, 150)) // larger than a page's bound
	d := fence(t, writer, "list d "+s, circle(-34, -60, 10))
	pageOf := map[int64]int{}
	var pages []listPage
	for target := FencesPath + "?after=" + strconv.FormatInt(a.ID-1, 10) + "&limit=10"; ; {
		p := getPage(t, api, target)
		if len(p.ids) == 0 {
			t.Fatalf("page %d (%s) is empty", len(pages), target)
		}
		if p.positions > limits.MaxResponseVertices && len(p.ids) > 1 {
			t.Errorf("page %d: %d fences with %d positions, over the bound %d", len(pages), len(p.ids), p.positions, limits.MaxResponseVertices)
		}
		for _, id := range p.ids {
			pageOf[id] = len(pages)
		}
		pages = append(pages, p)
		if _, ok := pageOf[d.ID]; ok {
			break
		}
		if p.next == "" {
			t.Fatalf("page %d %v ends before fence %d without next", len(pages)-1, p.ids, d.ID)
		}
		if len(pages) > 20 {
			t.Fatalf("no end after %d pages", len(pages))
		}
		target = p.next
	}
	if pageOf[a.ID] == pageOf[b.ID] {
		t.Errorf("fences a and b (120 positions) share page %d", pageOf[a.ID])
	}
	if p := pages[pageOf[c.ID]]; len(p.ids) != 1 || p.positions != 150 {
		t.Errorf("the fence of 150 positions is on a page of %v (%d positions), want alone", p.ids, p.positions)
	}
	if pageOf[a.ID] > pageOf[b.ID] || pageOf[b.ID] > pageOf[c.ID] || pageOf[c.ID] > pageOf[d.ID] {
		t.Errorf("pages of a, b, c, d: %d %d %d %d, want in id order", pageOf[a.ID], pageOf[b.ID], pageOf[c.ID], pageOf[d.ID])
	}
}

// A fence read with GET, edited and written back with PUT under its ETag
// is replaced: its properties' created_at, updated_at and revision, which
// the body parser used to refuse as unknown members, are read-only and
// ignored, whatever value a PUT gives them.
func TestFenceReadEditedAndPutBack(t *testing.T) {
	api := liveAPI(t, true)
	admin := []string{"X-API-Key", testAdminKey}
	loc, _ := createFence(t, api, "round trip "+randomSuffix(), -20, -57)
	got := serve(api, http.MethodGet, loc, "", admin...)
	if got.Code != http.StatusOK {
		t.Fatalf("GET: %d %s", got.Code, got.Body)
	}
	var read map[string]any
	if err := json.Unmarshal(got.Body.Bytes(), &read); err != nil {
		t.Fatal(err)
	}
	props := read["properties"].(map[string]any)
	createdAt, revision := props["created_at"], props["revision"]
	if createdAt == nil || props["updated_at"] == nil || revision == nil {
		t.Fatalf("GET properties %v, want created_at, updated_at and revision", props)
	}
	props["name"] = props["name"].(string) + " edited"
	edited, _ := json.Marshal(read)
	w := serve(api, http.MethodPut, loc, string(edited), append(admin, "If-Match", got.Header().Get("ETag"))...)
	if w.Code != http.StatusOK {
		t.Fatalf("PUT of the fence as read, edited: %d %s, want 200", w.Code, w.Body)
	}
	var put struct{ Properties map[string]any }
	if err := json.Unmarshal(w.Body.Bytes(), &put); err != nil {
		t.Fatal(err)
	}
	if put.Properties["name"] != props["name"] || put.Properties["created_at"] != createdAt || put.Properties["revision"] == revision {
		t.Errorf("PUT answered properties %v; want the new name, created_at %v and a revision other than %v", put.Properties, createdAt, revision)
	}
	if w.Header().Get("ETag") == got.Header().Get("ETag") {
		t.Errorf("PUT answered the ETag it was sent, %s", w.Header().Get("ETag"))
	}
	// Values other than the fence's own are ignored too.
	props["created_at"], props["updated_at"], props["revision"] = "1970-01-01T00:00:00Z", nil, 1
	forged, _ := json.Marshal(read)
	w = serve(api, http.MethodPut, loc, string(forged), append(admin, "If-Match", w.Header().Get("ETag"))...)
	if w.Code != http.StatusOK || revisionOf(t, w) == float64(1) || !strings.Contains(w.Body.String(), `"created_at":"`+createdAt.(string)+`"`) {
		t.Errorf("PUT with read-only properties of its own: %d %s", w.Code, w.Body)
	}
}

// A fence write cut by fence_write_timeout says so — the fence took too
// long to store; simplify it or raise the setting — instead of the read
// queries' advice of a smaller radius, box or batch. It keeps a
// Retry-After: a busy database makes a write slow too.
func TestFenceWriteTimeoutSaysWhatToDo(t *testing.T) {
	writer := NewStore(writerPool(t))
	writer.WriteTimeout = time.Millisecond
	w := serve(adminAPI(t, DefaultLimits(), writer), http.MethodPost, FencesPath, fenceBody(t, "slow "+randomSuffix(), coastline(-70, -40, 20_000)), "X-API-Key", testAdminKey)
	if loc := w.Header().Get("Location"); loc != "" { // stored after all: not this test's answer, and not to be kept
		serve(liveAPI(t, true), http.MethodDelete, loc, "", "X-API-Key", testAdminKey)
	}
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("write under a 1 ms timeout: %d %.300s, want 503", w.Code, w.Body)
	}
	doc := problemDoc(t, w)
	detail, _ := doc["detail"].(string)
	if doc["type"] != problem.Type(problem.Timeout) || strings.Contains(detail, "radius") ||
		!strings.Contains(detail, "fewer vertices") || !strings.Contains(detail, "geofence.fence_write_timeout") {
		t.Errorf("problem %v; want a timeout saying to simplify the fence or raise geofence.fence_write_timeout", doc)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}
