package toll

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/problem"
	"github.com/geotoll/geotoll/throttle"
)

func TestSettledAndStatementBudget(t *testing.T) {
	toll := &Toll{}
	for _, tc := range []struct {
		db         time.Duration
		base, most float64
		want       float64
	}{
		{0, 1, 60, 1},                            // no database work: the base price
		{250 * time.Microsecond, 1, 60, 1},       // less than the base
		{7500 * time.Microsecond, 1, 60, 7.5},    // 1 token a millisecond
		{time.Minute, 1, 60, 60},                 // never more than the most one request may cost
		{3 * time.Millisecond, 0.5, 100, 3},      //
		{1500 * time.Microsecond, 0.25, 2, 1.5},  //
		{-time.Second, 1, 60, 1},                 // a clock gone backwards
		{12 * time.Millisecond, 1, 10.5, 10.5},   //
		{12 * time.Millisecond, 15, 60, 15},      // a dear base
		{90 * time.Millisecond, 1, 1000, 90},     //
		{500 * time.Millisecond, 1, 1000, 500},   //
		{2 * time.Second, 0.001, 1e6, 2000},      //
		{time.Nanosecond, 0.000001, 1, 0.000001}, //
	} {
		toll.MsPerToken = 1
		if got := toll.Settled(tc.db, tc.base, tc.most); got != tc.want {
			t.Errorf("Settled(%v, %v, %v) = %v, want %v", tc.db, tc.base, tc.most, got, tc.want)
		}
	}
	toll.MsPerToken = 2 // a token is 2 ms
	if got := toll.Settled(10*time.Millisecond, 1, 60); got != 5 {
		t.Errorf("at 2 ms a token, 10 ms settles at %v, want 5", got)
	}
	for _, tc := range []struct {
		price, most float64
		want        time.Duration
	}{
		{1, 60, DefaultTimeoutFloor},          // 2 ms paid (at 2 ms a token) × 4 is under the floor
		{50, 1000, 400 * time.Millisecond},    // 100 ms paid × 4
		{500, 1e6, 4000 * time.Millisecond},   //
		{0, 60, DefaultTimeoutFloor},          //
		{31.25, 1000, 250 * time.Millisecond}, // exactly the floor
		{200, 300, 600 * time.Millisecond},    // 4 × 200 is past the 300 it may be charged: cut at 300's time
		{150, 150, 300 * time.Millisecond},    // priced at the most it may be charged: cut there
		{200, 1000, 1600 * time.Millisecond},  // 4 × 200 is within it
		{60, 10, DefaultTimeoutFloor},         // never under the floor, even where the most pays less
		{62.5, 1000, 500 * time.Millisecond},  //
	} {
		if got := toll.StatementBudget(tc.price, tc.most); got != tc.want {
			t.Errorf("StatementBudget(%v, %v) = %v, want %v", tc.price, tc.most, got, tc.want)
		}
	}
	// A budget past the longest Duration is the longest, not a wrapped
	// negative that the floor would then replace.
	toll.TimeoutFactor = 1e13
	if got := toll.StatementBudget(60, math.Inf(1)); got != time.Duration(math.MaxInt64) {
		t.Errorf("StatementBudget(60) at a timeout factor of 1e13 = %v, want the longest Duration", got)
	}
}

// settleServer serves one priced request through Finish: it charges price
// and then runs sql on the read role with a 10 s statement timeout, as a
// tile or geofence handler would.
func settleServer(t *testing.T, toll *Toll, price Price, sql string) http.Handler {
	t.Helper()
	free := toll.Tiers["free"]
	free.Limit.Rate = 0.001 // nothing refills while the test runs: exact counts
	toll.Tiers["free"] = free
	db := &pgcall.DB{Pool: testenv.ReadPool(t), RetryAfter: 2}
	return Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if toll.Charge(w, r, price) == nil {
			return
		}
		if _, err := db.Read(r.Context(), pgcall.Statement{SQL: sql, Timeout: 10 * time.Second}); err != nil {
			problem.Write(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

func settleRequest(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func header(t *testing.T, w *httptest.ResponseRecorder, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(w.Header().Get(name), 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, w.Header().Get(name), err)
	}
	return v
}

// A request is settled at the database time it took: a cheap-looking one
// that ran 30 ms pays 30 tokens (1 ms a token), a dear-looking one that ran
// nothing gets all but its base back. X-Request-Cost says what it cost,
// X-Request-Cost-Estimate what it paid at the door, and the bucket follows.
func TestSettlesAtDatabaseTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		estimate float64
		sql      string
		lo, hi   float64 // the settled cost, in tokens of 10 ms
		floor    time.Duration
		base     float64
	}{
		{"looked cheap, was not", 0.5, "SELECT pg_sleep(0.03)", 3, 60, time.Millisecond, 1},
		// Refunded: it settles below its estimate (a loaded machine may
		// stretch the few milliseconds it takes).
		{"looked dear, was not", 60, "SELECT pg_sleep(0.002)", 1, 59, time.Millisecond, 1},
		// A price without a base of its own settles at no less than the
		// default weights' base (1 here), not at the 0.2 tokens it ran.
		{"no base of its own", 60, "SELECT pg_sleep(0.002)", 1, 59, time.Millisecond, 0},
		// Measured under the settle floor, where the measurement is mostly
		// round trip: the estimate stands.
		{"under the floor", 7, "SELECT pg_sleep(0.002)", 7, 7, time.Minute, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll := testToll(store)
			toll.SettleFloor = tc.floor
			toll.Default.Base = 1
			h := settleServer(t, toll, Price{Cost: tc.estimate, Route: "x", Zoom: -1, Base: tc.base}, tc.sql)
			w := settleRequest(h)
			if w.Code != http.StatusNoContent {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			cost, estimate := header(t, w, "X-Request-Cost"), header(t, w, "X-Request-Cost-Estimate")
			if estimate != tc.estimate || cost < tc.lo || cost > tc.hi {
				t.Fatalf("X-Request-Cost %v (want %v..%v), X-Request-Cost-Estimate %v (want %v)", cost, tc.lo, tc.hi, estimate, tc.estimate)
			}
			left := mustPeek(t, store, "free", "k:1")
			if want := 100 - cost; left < want-0.01 || left > want+0.01 {
				t.Fatalf("the bucket holds %v after the request, want 100 - %v", left, cost)
			}
			if remaining := header(t, w, "X-RateLimit-Remaining"); remaining != float64(int(100-cost)) {
				t.Errorf("X-RateLimit-Remaining %v, want %v", remaining, int(100-cost))
			}
		})
	}
}

// A request whose price was far too low is cut at the database time it
// paid for (here the floor, 250 ms), not at its 3 s statement:
// 503 with Retry-After, charged what ran — capped at the most one request
// may cost in its tier (60).
func TestCutAtWhatWasPaid(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.Default.MaxCost = 60
	toll.MsPerToken = 1 // 250 ms is then more than the most one request may cost
	h := settleServer(t, toll, Price{Cost: 1, Route: "x", Zoom: -1, Base: 1}, "SELECT pg_sleep(3)")
	start := time.Now()
	w := settleRequest(h)
	took := time.Since(start)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("%d %s: want a 503 with Retry-After", w.Code, w.Body)
	}
	if took > 5*DefaultTimeoutFloor+pgcall.AnswerGrace {
		t.Fatalf("answered after %v: the statement was not cut near the 250 ms it paid for", took)
	}
	// It ran at least 250 ms, which at 1 ms a token is more than the 60
	// one request may cost: it is charged 60.
	if left := mustPeek(t, store, "free", "k:1"); left < 40-0.01 || left > 40+0.01 {
		t.Fatalf("the bucket holds %v: want 100 - 60", left)
	}
}

// A request priced at the most one request may be charged (60 tokens, 600
// ms at the default 10 ms a token) is cut there, not at timeout_factor ×
// its price (2.4 s): past 600 ms it would run on uncharged. A 1.5 s
// statement, which a cut at 2.4 s let finish (a 204, charged 60), answers
// a 503 and is charged 60; one of 350 ms, within the 600 ms, finishes and
// is charged what it ran.
func TestCutAtWhatItMayBeCharged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql    string
		code   int
		lo, hi float64 // the bucket after it
	}{
		{"SELECT pg_sleep(1.5)", http.StatusServiceUnavailable, 40 - 0.01, 40 + 0.01},
		{"SELECT pg_sleep(0.35)", http.StatusNoContent, 40, 100 - 35},
	} {
		t.Run(tc.sql, func(t *testing.T) {
			t.Parallel()
			store := throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll := testToll(store)
			toll.Default.MaxCost = 60
			h := settleServer(t, toll, Price{Cost: 60, Route: "x", Zoom: -1, Base: 1}, tc.sql)
			w := settleRequest(h)
			if w.Code != tc.code || (tc.code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "") {
				t.Fatalf("%d %s: want %d (the cut at the 600 ms it may be charged)", w.Code, w.Body, tc.code)
			}
			if left := mustPeek(t, store, "free", "k:1"); left < tc.lo || left > tc.hi {
				t.Fatalf("the bucket holds %v, want %v..%v", left, tc.lo, tc.hi)
			}
		})
	}
}

// A cache hit is priced at its base and settles nothing.
func TestCacheHitSettlesNothing(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	h := settleServer(t, toll, Price{Cost: 1, Route: "x", Zoom: -1, Base: 1, CacheHit: true}, "SELECT pg_sleep(0.05)")
	w := settleRequest(h)
	if got := w.Header().Get("X-Request-Cost"); got != "1" || w.Header().Get("X-Request-Cost-Estimate") != "" {
		t.Fatalf("a cache hit: X-Request-Cost %q, estimate %q", got, w.Header().Get("X-Request-Cost-Estimate"))
	}
	if left := mustPeek(t, store, "free", "k:1"); left < 99 || left > 99.01 {
		t.Fatalf("the bucket holds %v, want 99", left)
	}
}

// mustPeek is the tokens of a caller's bucket in toll's tiers.
func mustPeek(t *testing.T, s throttle.Store, tier, identity string) float64 {
	t.Helper()
	limit := testToll(nil).Tiers[tier].Limit
	limit.Rate = 0.001
	res, err := s.Peek(t.Context(), throttle.Bucket{Key: throttle.BucketKey("test", tier, identity), Limit: limit})
	if err != nil {
		t.Fatal(fmt.Errorf("peek: %w", err))
	}
	return res.Remaining
}

// A request admitted only by shadow mode (its bucket could not pay) is cut
// at the database time it paid for, as a request its bucket paid for is,
// not left to run its whole statement; the global budget is charged what
// it ran, and its own bucket, which paid nothing, is left alone.
func TestShadowAdmissionIsCutAtWhatItPaidFor(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.Default.MaxCost = 60
	toll.MsPerToken = 1 // the cut: the floor, 250 ms
	sh := toll.Tiers["shadow"]
	sh.Limit.Rate = 0.001
	toll.Tiers["shadow"] = sh
	global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 0.001, Capacity: 1000}}
	toll.Global = &throttle.Global{Store: store, Bucket: global, Chunk: 1}
	// A base of 60: it settles at 60 however long its SELECT 1 takes (on a
	// loaded machine, past the settle floor: settled at its few
	// milliseconds, it left the bucket able to pay the second request).
	fast := settleServer(t, toll, Price{Cost: 60, Route: "x", Zoom: -1, Base: 60}, "SELECT 1")
	slow := settleServer(t, toll, Price{Cost: 20, Route: "x", Zoom: -1, Base: 1}, "SELECT pg_sleep(3)")
	do := func(h http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.Header.Set("X-API-Key", "shadowy")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Paid by the bucket (70 → 10), under the settle floor: the estimate.
	if w := do(fast); w.Code != http.StatusNoContent || w.Header().Get("X-RateLimit-Shadow") != "" {
		t.Fatalf("the paid request: %d, X-RateLimit-Shadow %q", w.Code, w.Header().Get("X-RateLimit-Shadow"))
	}
	start := time.Now()
	w := do(slow)
	took := time.Since(start)
	if w.Header().Get("X-RateLimit-Shadow") != "would-refuse" {
		t.Fatalf("the second request was not admitted by shadow mode: %d, X-RateLimit-Shadow %q", w.Code, w.Header().Get("X-RateLimit-Shadow"))
	}
	if w.Code != http.StatusServiceUnavailable || took > 5*DefaultTimeoutFloor+pgcall.AnswerGrace {
		t.Fatalf("the shadow admission answered %d after %v: not cut near the 250 ms it paid for", w.Code, took)
	}
	if left := mustPeek(t, store, "shadow", "k:99"); left < 10-0.01 || left > 10+0.01 {
		t.Errorf("the shadow caller's bucket holds %v, want the 10 the paid request left", left)
	}
	// The global budget paid 60 for the first and, for the second, what it
	// ran (at least 250 ms at 1 ms a token, capped at 60): not its 20.
	toll.Global.Close()
	g, err := store.Peek(t.Context(), global)
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining < 880-0.01 || g.Remaining > 880+0.01 {
		t.Errorf("the global budget holds %v, want 1000 - 60 - 60", g.Remaining)
	}
}

// A request for which the database did no work — it waited for a render
// another request paid for, or found its tile cached once priced —
// settles at its base price, not at the estimate it paid at the door.
func TestRequestThatRanNoQuerySettlesAtItsBase(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	free := toll.Tiers["free"]
	free.Limit.Rate = 0.001
	toll.Tiers["free"] = free
	h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if toll.Charge(w, r, Price{Cost: 30, Route: "x", Zoom: -1, Base: 1}) == nil {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	w := settleRequest(h)
	if w.Code != http.StatusNoContent {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if cost, estimate := header(t, w, "X-Request-Cost"), header(t, w, "X-Request-Cost-Estimate"); cost != 1 || estimate != 30 {
		t.Errorf("X-Request-Cost %v, X-Request-Cost-Estimate %v: want 1 (the base) and 30", cost, estimate)
	}
	if left := mustPeek(t, store, "free", "k:1"); left < 99-0.01 || left > 99+0.01 {
		t.Errorf("the bucket holds %v, want 100 - 1", left)
	}
}

// A request answered a busy 503 (every connection it may use in use) is
// charged its estimate — asked again at once, it must not be free: it
// paid its base before — while the global database budget is charged
// what ran: its base when nothing did (it was charged the estimate); a
// request that ran a call before the busy one pays at least its estimate
// too, the global budget that call's time.
func TestBusyAnswerPaysItsEstimateAndTheGlobalBudgetWhatRan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		ran          time.Duration // metered before the busy call
		cost, global float64
	}{
		{"nothing ran", 0, 30, 1},
		{"a call ran 60 ms first", 60 * time.Millisecond, 30, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll := testToll(store)
			toll.MsPerToken = 10
			free := toll.Tiers["free"]
			free.Limit.Rate = 0.001
			toll.Tiers["free"] = free
			global := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, "global", "database"), Limit: throttle.Limit{Rate: 0.001, Capacity: 1000}}
			toll.Global = &throttle.Global{Store: store, Bucket: global, Chunk: 1}
			h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if toll.Charge(w, r, Price{Cost: 30, Route: "x", Zoom: -1, Base: 1}) == nil {
					return
				}
				if tc.ran > 0 {
					pgcall.AddTo(r.Context(), tc.ran) // as a call records its time
				}
				pgcall.MarkBusy(r.Context()) // what a call of a busy pool does
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			w := settleRequest(h)
			if w.Code != http.StatusServiceUnavailable {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if cost, estimate := header(t, w, "X-Request-Cost"), header(t, w, "X-Request-Cost-Estimate"); cost != tc.cost || estimate != 30 {
				t.Errorf("X-Request-Cost %v, X-Request-Cost-Estimate %v: want %v and 30", cost, estimate, tc.cost)
			}
			if left := mustPeek(t, store, "free", "k:1"); math.Abs(left-(100-tc.cost)) > 0.01 {
				t.Errorf("the bucket holds %v, want 100 - %v", left, tc.cost)
			}
			toll.Global.Close()
			g, err := store.Peek(t.Context(), global)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(g.Remaining-(1000-tc.global)) > 0.01 {
				t.Errorf("the global budget holds %v, want 1000 - %v", g.Remaining, tc.global)
			}
		})
	}
}

// A request answered before its statement stopped (a client that hung up,
// a 503 whose statement ignored its cancel) shows the cost so far in
// X-Request-Cost, and is charged what ran once the statement stops: the
// caller's note, which the access log reads once the request is settled,
// holds that charge, as the bucket paid it, not the header's estimate.
func TestCallerNoteHoldsTheSettledCharge(t *testing.T) {
	t.Parallel()
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	toll.Default.Base = 1
	free := toll.Tiers["free"]
	free.Limit.Rate = 0.001 // nothing refills while the test runs
	toll.Tiers["free"] = free
	db := &pgcall.DB{Pool: testenv.ReadPool(t), RetryAfter: 2}
	h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if toll.Charge(w, r, Price{Cost: 0.5, Route: "x", Zoom: -1, Base: 1}) == nil {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable) // answered first
		if _, err := db.Read(r.Context(), pgcall.Statement{SQL: "SELECT pg_sleep(0.03)", Timeout: 10 * time.Second}); err != nil {
			t.Error(err)
		}
	}))
	var note CallerNote
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(WithCallerNote(r.Context(), &note)))
	if sent := header(t, w, "X-Request-Cost"); sent != 1 {
		t.Fatalf("X-Request-Cost %v, want the base, 1 (sent before the statement ran)", sent)
	}
	charged, err := strconv.ParseFloat(note.Charged(), 64)
	paid := 100 - mustPeek(t, store, "free", "k:1")
	if err != nil || charged < 3 || math.Abs(charged-paid) > 0.001 { // as X-Request-Cost writes it
		t.Errorf("noted charge %q (%v), the bucket paid %v: want what it paid, at least 3 (30 ms)", note.Charged(), err, paid)
	}
}

// A request no bucket pays — admitted by shadow mode (would-refuse), or
// with fail_mode open (no ticket) — is noted for the access log at 0,
// not at the X-Request-Cost price it was answered with.
func TestCallerNoteIsZeroWhenNoBucketPays(t *testing.T) {
	t.Parallel()
	noted := func(h http.Handler, key string) (*httptest.ResponseRecorder, string) {
		var note CallerNote
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(WithCallerNote(r.Context(), &note)))
		return w, note.Charged()
	}
	store := throttle.NewMemoryStore(throttle.MemoryOptions{})
	toll := testToll(store)
	// Each request keeps its estimate, however long its SELECT 1 took (a
	// connection's first prepare on a busy machine can pass the 5 ms floor
	// and settle it at its time: "1").
	toll.SettleFloor = time.Hour
	sh := toll.Tiers["shadow"]
	sh.Limit.Rate = 0.001
	toll.Tiers["shadow"] = sh
	if _, charged := noted(settleServer(t, toll, Price{Cost: 60, Route: "x", Zoom: -1, Base: 1}, "SELECT 1"), "shadowy"); charged != "60" {
		t.Errorf("the shadow caller's paid request noted %q, want 60", charged)
	}
	w, charged := noted(settleServer(t, toll, Price{Cost: 20, Route: "x", Zoom: -1, Base: 1}, "SELECT 1"), "shadowy")
	if w.Header().Get("X-RateLimit-Shadow") != "would-refuse" || charged != "0" {
		t.Errorf("a shadow admission (%q) noted %q, want 0", w.Header().Get("X-RateLimit-Shadow"), charged)
	}
	open := testToll(&throttle.Failover{Primary: downStore{}, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}),
		Mode: throttle.FailOpen, Logger: discard()})
	if w, charged := noted(settleServer(t, open, Price{Cost: 20, Route: "x", Zoom: -1, Base: 1}, "SELECT 1"), "k1"); w.Code != http.StatusNoContent || charged != "0" {
		t.Errorf("with fail_mode open: %d, noted %q, want 0", w.Code, charged)
	}
}
