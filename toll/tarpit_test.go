package toll

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// tarpitToll is a toll whose anonymous bucket pays one z0 tile (60 of its
// 70 tokens) and then needs 5 s, at 10 tokens a second, for the next;
// its tarpit holds a refusal at most 2 s, through sleep.
func tarpitToll(sleep func(context.Context, time.Duration)) *Toll {
	now := time.Unix(1_800_000_000, 0)
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: func() time.Time { return now }}))
	toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: throttle.Limit{Rate: 10, Capacity: 70}}
	toll.Tarpit = &Tarpit{MaxHold: 2 * time.Second, MaxHeld: 1, sleep: sleep}
	return toll
}

// A refusal by the bucket is held for as long as the bucket needs to pay,
// at most MaxHold, and its Retry-After is what remains of the wait.
func TestTarpitHoldsBucketRefusals(t *testing.T) {
	var slept []time.Duration
	toll := tarpitToll(func(_ context.Context, d time.Duration) { slept = append(slept, d) })
	if w, ok := admit(t, toll, "", tileDemand(0, "places")); !ok {
		t.Fatalf("the first tile was refused: %d %s", w.Code, w.Body)
	}
	if len(slept) != 0 {
		t.Fatalf("an admitted request was held %v", slept)
	}
	w, ok := admit(t, toll, "", tileDemand(0, "places"))
	if ok || w.Code != http.StatusTooManyRequests {
		t.Fatalf("the second tile: %d, want 429", w.Code)
	}
	if len(slept) != 1 || slept[0] != 2*time.Second {
		t.Errorf("held %v, want once for MaxHold (2 s) of the 5 s the bucket needs", slept)
	}
	if got := w.Header().Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After %q after a hold of 2 s, want 3 (of 5)", got)
	}
}

// A refusal of the in-flight cap is answered at once.
func TestTarpitLeavesInFlightRefusals(t *testing.T) {
	held := false
	toll := tarpitToll(func(context.Context, time.Duration) { held = true })
	toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: throttle.Limit{Rate: 10, Capacity: 70}, MaxInFlight: 1}
	entered, release := make(chan bool), make(chan struct{})
	h := Finish(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := toll.AdmitTile(w, r, tileDemand(14, "places"))
		entered <- ok
		<-release
	}))
	var wg sync.WaitGroup
	wg.Go(func() {
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/14/0/0.mvt", nil)
		r.RemoteAddr = "192.0.2.7:5555"
		h.ServeHTTP(httptest.NewRecorder(), r)
	})
	defer wg.Wait()
	defer close(release)
	if !testenv.Receive(t, entered, "the first request") {
		t.Fatal("the first request was refused")
	}
	w, ok := admit(t, toll, "", tileDemand(14, "places"))
	if ok || w.Code != http.StatusTooManyRequests {
		t.Fatalf("the second request: %d, want 429 by the in-flight cap", w.Code)
	}
	if held {
		t.Error("an in-flight refusal was held")
	}
}

// Beyond MaxHeld refusals held at once, a refusal is answered at once
// with the whole Retry-After; a held one whose client hung up ends.
func TestTarpitMaxHeld(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	toll := tarpitToll(func(ctx context.Context, d time.Duration) {
		entered <- struct{}{}
		<-release
	})
	admit(t, toll, "", tileDemand(0, "places"))
	var wg sync.WaitGroup
	wg.Go(func() {
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt", nil)
		r.RemoteAddr = "192.0.2.7:5555"
		toll.AdmitTile(httptest.NewRecorder(), r, tileDemand(0, "places"))
	})
	testenv.Receive(t, entered, "the first refusal's hold")
	w, ok := admit(t, toll, "", tileDemand(0, "places"))
	if ok || w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "5" {
		t.Errorf("a refusal beyond MaxHeld: %d, Retry-After %q; want 429 at once, Retry-After 5", w.Code, w.Header().Get("Retry-After"))
	}
	close(release)
	wg.Wait()

	// A real hold ends with the client's request.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tp := &Tarpit{MaxHold: time.Minute, MaxHeld: 1}
	if held := tp.hold(ctx, "k", time.Minute); held >= time.Minute {
		t.Errorf("a refusal whose client hung up was held %v", held)
	}
}

// A bucket's refusals held at once queue: each is held until the bucket
// could pay it after the ones before it, at most MaxHold; another
// bucket's do not wait for them, and a bucket whose refusals have all been
// answered starts again. A refusal answered before its turn (its client
// hung up) gives its place back, unless one queued behind it since.
func TestTarpitQueuesABucketsRefusals(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tp := &Tarpit{MaxHold: time.Second, MaxHeld: 2, now: func() time.Time { return now }}
	const retry = 300 * time.Millisecond
	turn := func(key string) time.Duration {
		d, _, _ := tp.turn(key, retry)
		return d
	}
	for i, want := range []time.Duration{300, 600, 900, 1000, 1000} {
		if got := turn("a"); got != want*time.Millisecond {
			t.Errorf("refusal %d of a: held %v, want %v ms", i, got, want)
		}
	}
	if got := turn("b"); got != retry {
		t.Errorf("b's first refusal beside a's: held %v, want %v", got, retry)
	}
	now = now.Add(2 * time.Second)
	if got := turn("a"); got != retry {
		t.Errorf("a's refusal once the others were answered: held %v, want %v", got, retry)
	}

	// c's second refusal hangs up: the third is held as the second was.
	turn("c")
	_, until, before := tp.turn("c", retry)
	tp.leave("c", until, before)
	if got := turn("c"); got != 2*retry {
		t.Errorf("c's refusal after one that hung up: held %v, want %v", got, 2*retry)
	}
	// d's first hangs up after a second queued behind it: the third waits
	// for both.
	_, until, before = tp.turn("d", retry)
	turn("d")
	tp.leave("d", until, before)
	if got := turn("d"); got != 3*retry {
		t.Errorf("d's refusal behind one that stayed: held %v, want %v", got, 3*retry)
	}
}

// The buckets a tarpit remembers are swept once they reach twice MaxHeld,
// or twice what the last sweep left: those whose refusals have all been
// answered go.
func TestTarpitForgetsAnsweredBuckets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tp := &Tarpit{MaxHold: time.Second, MaxHeld: 2, now: func() time.Time { return now }}
	for i := range 1000 {
		tp.turn(fmt.Sprint("k", i), 300*time.Millisecond)
		now = now.Add(time.Second) // the refusal is answered
	}
	if n := len(tp.queue); n > 4 {
		t.Errorf("after 1,000 buckets' refusals, answered one at a time: %d remembered, want at most 4", n)
	}
	for i := range 1000 { // none answered yet: kept, and swept as the map doubles
		tp.turn(fmt.Sprint("held", i), 300*time.Millisecond)
	}
	if n, at := len(tp.queue), tp.sweepAt; n < 1000 || at < int64(n) {
		t.Errorf("1,000 refusals held: %d remembered, next sweep at %d (want at or past the map's size: not on every refusal)", n, at)
	}
}

// Refusals of different callers do not queue behind each other; a
// refusal held past its own bucket's wait shows the bucket as it is when
// it could pay (the refusals queued before it come first), not beyond.
func TestTarpitQueuesPerCaller(t *testing.T) {
	var slept []time.Duration
	toll := tarpitToll(func(_ context.Context, d time.Duration) { slept = append(slept, d) })
	toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: throttle.Limit{Rate: 100, Capacity: 70}} // 0.5 s for the next z0 tile
	toll.Tarpit.now = func() time.Time { return time.Unix(1_800_000_000, 0) }                             // the store's clock: nothing is answered
	from := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		toll.AdmitTile(w, r, tileDemand(0, "places"))
		return w
	}
	for _, addr := range []string{"192.0.2.7:5555", "192.0.2.8:5555"} {
		if w := from(addr); w.Code != http.StatusOK {
			t.Fatalf("%s's first tile: %d", addr, w.Code)
		}
	}
	from("192.0.2.7:5555")
	second := from("192.0.2.7:5555")
	from("192.0.2.8:5555")
	want := []time.Duration{500 * time.Millisecond, time.Second, 500 * time.Millisecond}
	if len(slept) != 3 || slept[0] != want[0] || slept[1] != want[1] || slept[2] != want[2] {
		t.Errorf("held %v, want %v: the second caller's refusal does not wait for the first's", slept, want)
	}
	if got := second.Header().Get("RateLimit"); !strings.Contains(got, "r=60") {
		t.Errorf("a refusal held 1 s behind another: RateLimit %q, want r=60 (the bucket when it could pay it)", got)
	}
}

// A refusal held by the tarpit is answered with the bucket as the
// caller's request admitted while it was held left it — not the refused
// reading refilled for the hold — and with the wait that bucket needs:
// answered the latter, a client that honours Retry-After was refused
// again.
func TestHeldRefusalShowsWhatTheCallerSpentMeanwhile(t *testing.T) {
	store := &throttle.Failover{Primary: throttle.NewMemoryStore(throttle.MemoryOptions{}), Mode: throttle.FailClosed, Logger: discard()}
	toll := testToll(store)
	// 0.01 token a second: the test's own time refills nothing to speak of.
	toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: throttle.Limit{Rate: 0.01, Capacity: 70}}
	var during *httptest.ResponseRecorder
	toll.Tarpit = &Tarpit{MaxHold: 2 * time.Second, MaxHeld: 4, sleep: func(context.Context, time.Duration) {
		w, ok := admit(t, toll, "", tileDemand(14, "places"))
		if !ok {
			t.Errorf("the z14 tile during the hold was refused: %d %s", w.Code, w.Body)
		}
		during = w
	}}
	if w, ok := admit(t, toll, "", tileDemand(0, "places")); !ok {
		t.Fatalf("the first tile was refused: %d %s", w.Code, w.Body)
	}
	w, ok := admit(t, toll, "", tileDemand(0, "places"))
	if ok || w.Code != http.StatusTooManyRequests || during == nil {
		t.Fatalf("the second tile: %d, want 429 held (held: %v)", w.Code, during != nil)
	}
	cost, err := strconv.ParseFloat(during.Header().Get("X-Request-Cost"), 64)
	if err != nil || cost <= 0 {
		t.Fatalf("the z14 tile's cost %q: %v", during.Header().Get("X-Request-Cost"), err)
	}
	if got, want := w.Header().Get("X-RateLimit-Remaining"), during.Header().Get("X-RateLimit-Remaining"); got != want {
		t.Errorf("the held refusal says %s remain, want %s: what the z14 tile admitted meanwhile left", got, want)
	}
	// The bucket held 10 tokens after the first tile, cost less after the
	// second: the refused tile (60) waits (60 - (10 - cost)) / 0.01 s.
	retry, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if least := int((60 - (10 - cost) - 0.1) / 0.01); err != nil || retry < least {
		t.Errorf("Retry-After %q, want at least %d s (the bucket after the z14 tile's %v tokens)", w.Header().Get("Retry-After"), least, cost)
	}
}

// While Redis is out (fail_mode local), a held refusal never shows more
// than the refusal's own reading, refilled: what the replica learnt of
// the shared bucket before the outage — moved on by the settlement of a
// request Redis admitted — knows nothing of what the caller spent in its
// local bucket since. Answered from it, the 429 said 66 tokens remained and
// Retry-After 1, and the next request was refused again for 5,500 s.
func TestHeldRefusalNeverShowsMoreThanItsReading(t *testing.T) {
	primary := &switchStore{Store: throttle.NewMemoryStore(throttle.MemoryOptions{})}
	store := &throttle.Failover{Primary: primary, Local: throttle.NewMemoryStore(throttle.MemoryOptions{}),
		Mode: throttle.FailLocal, Replicas: 1, Logger: discard()}
	toll := testToll(store)
	limit := throttle.Limit{Rate: 0.01, Capacity: 70}
	toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: limit}
	own := throttle.Bucket{Key: throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:192.0.2.7"), Limit: limit}
	// A request Redis admits (5 tokens), still running when it goes out.
	a, err := store.Admit(t.Context(), throttle.Request{Bucket: own, Cost: 5, Debt: 60, MaxInFlight: 100, TTL: time.Minute})
	if err != nil || !a.Allowed {
		t.Fatalf("the first request: %+v, %v", a, err)
	}
	primary.down.Store(true)
	if w, ok := admit(t, toll, "", tileDemand(0, "places")); !ok {
		t.Fatalf("the z0 tile, from the local bucket: %d %s", w.Code, w.Body)
	}
	toll.Tarpit = &Tarpit{MaxHold: 2 * time.Second, MaxHeld: 4, sleep: func(context.Context, time.Duration) {
		a.Ticket.Settle(4) // it cost 4: a refund of 1, counted in what is known of the bucket
	}}
	w, ok := admit(t, toll, "", tileDemand(0, "places"))
	if ok || w.Code != http.StatusTooManyRequests {
		t.Fatalf("the second z0 tile: %d, want 429", w.Code)
	}
	retry, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if remaining := w.Header().Get("X-RateLimit-Remaining"); err != nil || retry < 5000 || remaining != "5" {
		t.Errorf("the held refusal: Retry-After %q, %s remain; want about 5,500 s and 5 (the local bucket after 5 and 60)", w.Header().Get("Retry-After"), remaining)
	}
}
