package toll

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/dryrun"
	"github.com/geotoll/geotoll/throttle"
	"github.com/geotoll/geotoll/tiles"
)

// A price preview and /budget describe one caller's budget at one moment:
// no cache may keep them (a shared cache would hand one caller's budget to
// another, a private one a stale budget to the same caller), and neither
// may it keep the refusals answered instead.
func TestDryRunIsNotStored(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	serve := func(h func(http.ResponseWriter, *http.Request), target, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "192.0.2.7:5555"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h(w, r)
		return w
	}
	tile := func(w http.ResponseWriter, r *http.Request) { toll.AdmitTile(w, r, tileDemand(2, "places")) }
	for _, tc := range []struct {
		name   string
		h      func(http.ResponseWriter, *http.Request)
		target string
		key    string
		status int
	}{
		{"dry run, anonymous", tile, "/tiles/places/2/0/0.mvt?dry_run=1", "", http.StatusOK},
		{"dry run, keyed", tile, "/tiles/places/2/0/0.mvt?dry_run=true", "k1", http.StatusOK},
		{"budget, anonymous", toll.ServeBudget, "/budget", "", http.StatusOK},
		{"budget, keyed", toll.ServeBudget, "/budget", "k1", http.StatusOK},
		{"budget, unknown key", toll.ServeBudget, "/budget", "gt_wrong", http.StatusUnauthorized},
		{"dry run, unknown key", tile, "/tiles/places/2/0/0.mvt?dry_run=1", "gt_wrong", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(tc.h, tc.target, tc.key)
			if w.Code != tc.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.status)
			}
			if cc := w.Header().Get("Cache-Control"); !strings.Contains(cc, "no-store") {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
		})
	}
	// The bucket's refusal of a real request.
	for range 2 {
		serve(tile, "/tiles/places/2/0/0.mvt", "k1")
	}
	w := serve(tile, "/tiles/places/2/0/0.mvt", "k1")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third z2 tile: %d, want 429", w.Code)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("429: Cache-Control %q, want no-store", cc)
	}
}

// TestDryRunOnlyAsSpelled: ?dry_run is 1 or true (a preview), 0 or false
// (the request itself). Any other spelling — a bare ?dry_run, "yes", the
// parameter twice, or a query string that does not parse, where dry_run
// cannot be told — is a 400 that charges nothing: a caller who asked for
// a price must never have the request run and charged instead.
func TestDryRunOnlyAsSpelled(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		status      int  // what the caller is answered (0: admitted)
		spent       bool // the bucket paid the z2 tile's 60
	}{
		{"preview", "dry_run=1", http.StatusOK, false},
		{"preview, true", "dry_run=true", http.StatusOK, false},
		{"no parameter", "", 0, true},
		{"off", "dry_run=0", 0, true},
		{"off, false", "dry_run=false", 0, true},
		{"other parameters", "v=3&dry_run=1", http.StatusOK, false},
		{"bare", "dry_run", http.StatusBadRequest, false},
		{"empty", "dry_run=", http.StatusBadRequest, false},
		{"yes", "dry_run=yes", http.StatusBadRequest, false},
		{"upper case", "dry_run=TRUE", http.StatusBadRequest, false},
		{"twice, preview first", "dry_run=1&dry_run=0", http.StatusBadRequest, false},
		{"twice, preview last", "dry_run=0&dry_run=1", http.StatusBadRequest, false},
		{"semicolon", "dry_run=1;v=3", http.StatusBadRequest, false},
		{"bad escape", "v=%zz&dry_run=1", http.StatusBadRequest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1_700_000_000, 0)}
			toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
			r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt", nil)
			r.URL.RawQuery = tc.query
			r.Header.Set("X-API-Key", "k1")
			w := httptest.NewRecorder()
			admitted := toll.AdmitTile(w, r, tileDemand(2, "places"))
			switch {
			case tc.status == 0 && !admitted:
				t.Fatalf("?%s: refused with %d %s, want admitted", tc.query, w.Code, w.Body)
			case tc.status != 0 && admitted:
				t.Fatalf("?%s: admitted (the query would run), want %d", tc.query, tc.status)
			case tc.status != 0 && w.Code != tc.status:
				t.Fatalf("?%s: %d %s, want %d", tc.query, w.Code, w.Body, tc.status)
			}
			if tc.status == http.StatusBadRequest {
				var p map[string]any
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("?%s: %q %s, want a problem document", tc.query, w.Header().Get("Content-Type"), w.Body)
				}
				if p["type"] != "urn:geotoll:problem:invalid" {
					t.Errorf("?%s: type %v, want urn:geotoll:problem:invalid", tc.query, p["type"])
				}
			}
			bw := httptest.NewRecorder()
			br := httptest.NewRequest(http.MethodGet, "/budget", nil)
			br.Header.Set("X-API-Key", "k1")
			toll.ServeBudget(bw, br)
			var b map[string]any
			if err := json.Unmarshal(bw.Body.Bytes(), &b); err != nil {
				t.Fatalf("budget: %d %s", bw.Code, bw.Body)
			}
			want := 100.0
			if tc.spent {
				want = 40
			}
			if b["remaining"] != want {
				t.Errorf("?%s: %v tokens remain, want %v", tc.query, b["remaining"], want)
			}
		})
	}
}

// FuzzIsDryRun: any query string is read without panic; a preview is
// asked only by a query that parses and holds dry_run once, as 1 or true.
func FuzzIsDryRun(f *testing.F) {
	for _, s := range []string{"", "dry_run=1", "dry_run=true", "dry_run=0", "dry_run", "dry_run=1&dry_run=1", "dry_run=1;x", "x=%zz&dry_run=1", "dry%5Frun=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.URL.RawQuery = rawQuery
		dry, err := dryrun.Parse(r)
		if err == nil {
			vs := r.URL.Query()["dry_run"]
			if dry != (len(vs) == 1 && (vs[0] == "1" || vs[0] == "true")) {
				t.Fatalf("?%s: dry run %v for dry_run %q", rawQuery, dry, vs)
			}
			return
		}
		if dry {
			t.Fatalf("?%s: a dry run beside the error %v", rawQuery, err)
		}
	})
}

// A price preview answers as the request would be answered: a shadow
// tier's or shadow layer's request is admitted with its bucket dry, so its
// preview says would_allow, with no wait; a limited one's says neither.
func TestDryRunInShadow(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	toll.LayerWeights = map[string]throttle.Weights{"ghost": {Base: 50, AreaWeight: 0, MaxCost: 50}} // more than the 40 left
	toll.ShadowLayers = map[string]bool{"ghost": true}
	preview := func(d tiles.Demand) map[string]any {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/2/0/0.mvt?dry_run=1", nil)
		r.RemoteAddr = "192.0.2.7:5555"
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		toll.AdmitTile(w, r, d)
		var body map[string]any
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil {
			t.Fatalf("preview: %d %s", w.Code, w.Body)
		}
		return body
	}
	for range 3 { // k1's bucket: dry
		admit(t, toll, "k1", tileDemand(2, "places"))
	}
	if b := preview(tileDemand(2, "places")); b["would_allow"] != false || b["retry_after"] == 0.0 {
		t.Errorf("a limited layer, the bucket dry: %v", b)
	}
	if b := preview(tileDemand(2, "ghost")); b["would_allow"] != true || b["retry_after"] != 0.0 {
		t.Errorf("a shadow layer, the bucket dry: %v", b)
	}
	if _, ok := admit(t, toll, "k1", tileDemand(2, "ghost")); !ok {
		t.Error("the shadow layer's request itself was refused")
	}
	tier := toll.Tiers["free"] // k1's
	tier.Shadow = true
	toll.Tiers["free"] = tier
	if b := preview(tileDemand(2, "places")); b["would_allow"] != true || b["retry_after"] != 0.0 {
		t.Errorf("a shadow tier, the bucket dry: %v", b)
	}
}

// While Redis is out with fail_mode local, a dry run's retry_after waits
// for the replica's share of the bucket, which refills at rate / replicas,
// as the admission it previews does: 40 tokens short at the free tier's
// 20 a second split over 2 replicas is 4 s, not 2. The share's clock stands
// still between the spend and the dry run: on the wall clock, the refill
// of the moment between them (10 tokens a second) showed as more than 20.
func TestDryRunInLocalModeWaitsAtTheSharesRate(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(&throttle.Failover{Primary: downStore{}, Local: throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}),
		Mode: throttle.FailLocal, Replicas: 2, Logger: discard()})
	// Key k (id 4, free: 100 tokens, 20 a second) spends 30 of its
	// replica's share of 50.
	own := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "free", "k:4"), Limit: toll.Tiers["free"].Limit}
	if a, err := toll.Store.Admit(t.Context(), throttle.Request{Bucket: own, Cost: 30, TTL: time.Second}); err != nil || !a.Allowed {
		t.Fatalf("spend 30: %+v %v", a, err)
	} else {
		a.Ticket.Release()
	}
	r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt?dry_run=1", nil)
	r.Header.Set("X-API-Key", "k")
	w := httptest.NewRecorder()
	toll.AdmitTile(w, r, tileDemand(2, "places")) // 60 tokens
	var doc struct {
		Remaining  float64 `json:"remaining"`
		WouldAllow bool    `json:"would_allow"`
		RetryAfter int     `json:"retry_after"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || w.Code != http.StatusOK {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	if doc.WouldAllow || doc.Remaining > 20.01 || doc.RetryAfter != 4 {
		t.Errorf("dry run %+v: want 20 remaining, not allowed, retry after 4 s", doc)
	}
}

// While Redis is out with fail_mode local, a replica's share of a bucket
// holds at least the price of the request it admits: a dry run of a price
// above the share (60 tokens against a quarter of free's 100) read the
// share at most, and said the request would wait, for ever, while the
// request itself was admitted once the share had refilled to its price.
func TestDryRunInLocalModeOfAPriceAboveTheShare(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(&throttle.Failover{Primary: downStore{}, Local: throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}),
		Mode: throttle.FailLocal, Replicas: 4, Logger: discard()})
	ask := func(query string) (*httptest.ResponseRecorder, bool) {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt"+query, nil)
		r.Header.Set("X-API-Key", "k")
		w := httptest.NewRecorder()
		return w, toll.AdmitTile(w, r, tileDemand(2, "places")) // 60 tokens
	}
	dryRun := func(when string) (allowed bool, retry int) {
		t.Helper()
		var doc struct {
			WouldAllow bool `json:"would_allow"`
			RetryAfter int  `json:"retry_after"`
		}
		w, _ := ask("?dry_run=1")
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s: %v", when, w.Code, w.Body, err)
		}
		return doc.WouldAllow, doc.RetryAfter
	}
	dryRun("Redis found down")
	// The share holds 25 and refills at 5 a second: 7 s to the price.
	if allowed, retry := dryRun("at once"); allowed || retry != 7 {
		t.Errorf("at once: would_allow %t, retry_after %d; want false, 7", allowed, retry)
	}
	c.t = c.t.Add(8 * time.Second)
	if allowed, retry := dryRun("8 s later"); !allowed || retry != 0 {
		t.Errorf("8 s later: would_allow %t, retry_after %d; want true, 0", allowed, retry)
	}
	if w, ok := ask(""); !ok {
		t.Errorf("the request itself, 8 s later: %d %s, want admitted", w.Code, w.Body)
	}
}

// A composite dearer than the tier's bucket is a 422 whose
// max_request_cost is /budget's: both said max_cost, /budget the most a
// layer is priced (60), the 422 the most a request may cost (the
// capacity, 100), one name for two limits.
func TestBudgetSaysWhatATooDearCompositeIsRefusedFor(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	serve := func(h func(http.ResponseWriter, *http.Request), target string) map[string]any {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = "192.0.2.7:5555"
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		h(w, r)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %d %s", target, w.Code, w.Body)
		}
		return body
	}
	budget := serve(toll.ServeBudget, "/budget")
	refused := serve(func(w http.ResponseWriter, r *http.Request) {
		toll.AdmitTile(w, r, tileDemand(0, "places", "districts"))
	}, "/tiles/places,districts/0/0/0.mvt")
	if refused["status"] != float64(http.StatusUnprocessableEntity) || refused["cost"].(float64) <= 100 {
		t.Fatalf("the composite at z0: %v, want a 422 of a price above the capacity", refused)
	}
	if budget["max_request_cost"] != float64(100) || refused["max_request_cost"] != budget["max_request_cost"] {
		t.Errorf("/budget max_request_cost %v, the 422's %v; want both the capacity, 100 (/budget max_cost %v)",
			budget["max_request_cost"], refused["max_request_cost"], budget["max_cost"])
	}
	if _, ok := refused["max_cost"]; ok {
		t.Errorf("the 422 still names its limit max_cost: %v", refused)
	}
}

// A bucket deeper in debt than its tier's floor now lets it be (the
// tier's max_cost lowered since the debt was run up) is lifted to that
// floor by the next admission, as of its last write; /budget, a preview
// and the budget headers read it so — they read it as stored: -80 and a
// wait of 5 s where the request was refused for 1 s, and 2 s later a
// refusal of a request the bucket admitted — and so does a preview of
// an anonymous IPv6 caller's /48 aggregate.
func TestBudgetReadsADebtBelowTheFloorAsTheAdmissionWill(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store := throttle.NewMemoryStore(throttle.MemoryOptions{Now: clock})
	toll := testToll(store)
	free := toll.Tiers["free"] // rate 20, capacity 100
	own := throttle.Bucket{Key: Caller{Tier: "free", Identity: "k:1"}.bucketKey(toll.Prefix), Limit: free.Limit}
	a, err := store.Admit(t.Context(), throttle.Request{Bucket: own, Cost: 100, Debt: 100, TTL: time.Minute})
	if err != nil || !a.Allowed {
		t.Fatalf("admit: %+v %v", a, err)
	}
	a.Ticket.Settle(180) // 100 - 180: -80
	free.MaxCost = 1     // the tier's floor is now -1
	toll.Tiers["free"] = free

	serve := func(target, remote, key string, h func(http.ResponseWriter, *http.Request)) (map[string]any, http.Header) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = remote
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h(w, r)
		body := map[string]any{"status": float64(w.Code)}
		if w.Code != http.StatusOK || strings.Contains(w.Header().Get("Content-Type"), "json") {
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("%s: %d %s", target, w.Code, w.Body)
			}
		}
		return body, w.Header()
	}
	tile := func(w http.ResponseWriter, r *http.Request) { toll.AdmitTile(w, r, tileDemand(14, "places")) }
	const at = "192.0.2.7:5555"
	budget, _ := serve("/budget", at, "k1", toll.ServeBudget)
	if r := budget["remaining"].(float64); r != -1 {
		t.Errorf("/budget remaining %v, want -1 (the floor), not -80", r)
	}
	preview, _ := serve("/tiles/places/14/8802/5373.mvt?dry_run=1", at, "k1", tile)
	if got := preview["retry_after"].(float64); preview["would_allow"] != false || got != 1 {
		t.Errorf("preview: would_allow %v, retry_after %v; want false, 1 (as the refusal says)", preview["would_allow"], got)
	}
	refused, h := serve("/tiles/places/14/8802/5373.mvt", at, "k1", tile)
	if refused["status"] != float64(http.StatusTooManyRequests) || h.Get("Retry-After") != "1" {
		t.Fatalf("the request: %v, Retry-After %q; want a 429 of 1 s", refused, h.Get("Retry-After"))
	}

	mu.Lock()
	now = now.Add(2 * time.Second) // -1 + 2 × 20: 39
	mu.Unlock()
	budget, _ = serve("/budget", at, "k1", toll.ServeBudget)
	if r := budget["remaining"].(float64); r != 39 {
		t.Errorf("2 s later: /budget remaining %v, want 39 (the floor, refilled since the bucket's last write)", r)
	}
	preview, _ = serve("/tiles/places/14/8802/5373.mvt?dry_run=1", at, "k1", tile)
	if preview["would_allow"] != true {
		t.Errorf("2 s later: preview %v, want would_allow", preview)
	}
	if admitted, _ := serve("/tiles/places/14/8802/5373.mvt", at, "k1", tile); admitted["status"] != float64(http.StatusOK) {
		t.Errorf("2 s later: the request %v, want it admitted", admitted)
	}

	// An anonymous IPv6 caller's /48 aggregate, run to -80 under a floor
	// of 80, previewed from another /64 of it once the floor is 1.
	toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 1, Capacity: 100}}
	anon := toll.Tiers[AnonymousTier]
	agg := &throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:2001:db8:1::/48"), Limit: toll.IPv6Aggregate.Limit}
	one := throttle.Bucket{Key: Caller{Tier: AnonymousTier, Identity: "ip:2001:db8:1:1::/64", Network: "ip:2001:db8:1::/48"}.bucketKey(toll.Prefix), Limit: anon.Limit}
	a, err = store.Admit(t.Context(), throttle.Request{Bucket: one, Aggregate: agg, Cost: 60, Debt: 80, TTL: time.Minute})
	if err != nil || !a.Allowed {
		t.Fatalf("admit: %+v %v", a, err)
	}
	a.Ticket.Settle(300) // the aggregate: 100 - 300, at most 80 deep
	anon.MaxCost = 1
	toll.Tiers[AnonymousTier] = anon
	const other = "[2001:db8:1:2::1]:443"
	preview, _ = serve("/tiles/places/14/8802/5373.mvt?dry_run=1", other, "", tile)
	refused, h = serve("/tiles/places/14/8802/5373.mvt", other, "", tile)
	if refused["status"] != float64(http.StatusTooManyRequests) {
		t.Fatalf("the /48's request: %v, want a 429", refused)
	}
	if got := strconv.FormatFloat(preview["retry_after"].(float64), 'f', -1, 64); preview["would_allow"] != false || got != h.Get("Retry-After") {
		t.Errorf("the /48's preview: would_allow %v, retry_after %s; the refusal's Retry-After %s", preview["would_allow"], got, h.Get("Retry-After"))
	}
}

// X-Request-Cost says what the bucket is charged, to the micro-token, as
// a preview's body and a refusal's do: rounded to a thousandth, a price
// of 0.0104 read 0.01 (the headers a caller summed fell 4 % short of what
// its bucket lost).
func TestRequestCostHeaderToTheMicroToken(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	for z := range maptile.Zoom(15) {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/x.mvt?dry_run=1", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		toll.AdmitTile(w, r, tileDemand(z, "places"))
		var body struct{ Cost float64 }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("z%d: %d %s", z, w.Code, w.Body)
		}
		if got := w.Header().Get("X-Request-Cost"); got != strconv.FormatFloat(body.Cost, 'f', -1, 64) {
			t.Errorf("z%d: X-Request-Cost %s, the preview's cost %v", z, got, body.Cost)
		}
	}
}

// TestDryRunAnswersAsTheGlobalBudgetWould: a preview says would_allow
// false, with the global budget's wait, when the global budget cannot pay
// the request, which is then refused with its 503 — though the caller's
// own bucket could pay it. It said true before: the preview read the
// caller's buckets only.
func TestDryRunAnswersAsTheGlobalBudgetWould(t *testing.T) {
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.Tiers["free"] = Tier{Name: "free", Limit: throttle.Limit{Rate: 20, Capacity: 1000}}
	// 70 tokens for everyone, refilled at 2 a second; a z2 tile costs 60.
	global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 2, Capacity: 70}}
	toll.Global = &throttle.Global{Store: store, Bucket: global, Chunk: 1}
	t.Cleanup(toll.Global.Close)
	do := func(target string) *httptest.ResponseRecorder { return keyedZ2(toll, target) }
	if ok, _ := preview(t, toll); !ok {
		t.Fatal("the first preview says the global budget's 70 cannot pay 60")
	}
	if w := do("/tiles/places/2/0/0.mvt"); w.Code != http.StatusOK {
		t.Fatalf("the first tile: %d %s", w.Code, w.Body)
	}
	ok, retry := preview(t, toll)
	// The global budget holds about 10 (and the lease's remainder): the
	// next 60 wait about 25 s.
	if ok || retry < 20 {
		t.Errorf("the second preview says would_allow %v, retry_after %d; want false, about 25 s (the global budget's wait)", ok, retry)
	}
	if w := do("/tiles/places/2/0/0.mvt"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("the second tile: %d, want the global budget's 503", w.Code)
	}
}

// TestDryRunReadsTheGlobalShareWhileRedisIsOut: with Redis out and
// fail_mode local, the global budget is this replica's share of it (a
// quarter here, refilled at a quarter of the rate): a preview waits as a
// lease from that share would, as the request's own 503 says.
func TestDryRunReadsTheGlobalShareWhileRedisIsOut(t *testing.T) {
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{}))
	toll.Tiers["free"] = Tier{Name: "free", Limit: throttle.Limit{Rate: 20, Capacity: 1000}}
	global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 100, Capacity: 1000}}
	toll.Global = &throttle.Global{Store: &throttle.Failover{Primary: downStore{}, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}),
		Mode: throttle.FailLocal, Replicas: 4, ProbeInterval: time.Hour, Logger: discard()}, Bucket: global, Chunk: 1}
	t.Cleanup(toll.Global.Close)
	do := func(target string) *httptest.ResponseRecorder { return keyedZ2(toll, target) }
	// The share holds 250 and refills 25 a second: four z2 tiles (60
	// each) leave about 10.
	for i := range 4 {
		if w := do("/tiles/places/2/0/0.mvt"); w.Code != http.StatusOK {
			t.Fatalf("tile %d: %d %s", i, w.Code, w.Body)
		}
	}
	ok, retry := preview(t, toll)
	// 50 lacking at 25 a second: 2 s (at the whole bucket's 100, 1).
	if ok || retry < 2 {
		t.Errorf("preview: would_allow %v, retry_after %d; want false, 2 s (the share refills 25 a second)", ok, retry)
	}
	if w := do("/tiles/places/2/0/0.mvt"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != strconv.Itoa(retry) {
		t.Errorf("the tile: %d, Retry-After %q; want 503 and the preview's %d", w.Code, w.Header().Get("Retry-After"), retry)
	}
}

// keyedZ2 asks toll for a z2 tile of places at target, with key k1.
func keyedZ2(toll *Toll, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	toll.AdmitTile(w, r, tileDemand(2, "places"))
	return w
}

// preview asks toll for a dry run of that tile and returns its
// would_allow and retry_after.
func preview(t *testing.T, toll *Toll) (allowed bool, retry int) {
	t.Helper()
	w := keyedZ2(toll, "/tiles/places/2/0/0.mvt?dry_run=1")
	var body struct {
		WouldAllow bool `json:"would_allow"`
		RetryAfter int  `json:"retry_after"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusOK {
		t.Fatalf("preview: %d %s", w.Code, w.Body)
	}
	return body.WouldAllow, body.RetryAfter
}
