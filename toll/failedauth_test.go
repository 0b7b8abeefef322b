package toll

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/throttle"
)

// outcomeObserver records the outcomes the toll observed, by tier.
type outcomeObserver struct{ seen []string }

func (o *outcomeObserver) Priced(tier string, _ Price, out Outcome) {
	o.seen = append(o.seen, tier+":"+string(out))
}
func (o *outcomeObserver) Settled(string, Price, float64) {}

// An unknown key is a 401 charged to its address's failed-auth bucket,
// observed as unauthorized; once that bucket is dry, the 429 is observed
// as refused, as every 429 is (the throttled requests' metrics count it).
func TestFailedAuthRefusalIsObservedAsRefused(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	obs := &outcomeObserver{}
	toll.Observer = obs
	var codes []int
	for range 4 { // the failed-auth bucket holds 3
		w, _ := admit(t, toll, "gt_wrong", tileDemand(2, "places"))
		codes = append(codes, w.Code)
	}
	want := []string{"failed-auth:unauthorized", "failed-auth:unauthorized", "failed-auth:unauthorized", "failed-auth:refused"}
	if codes[3] != http.StatusTooManyRequests || len(obs.seen) != 4 {
		t.Fatalf("answers %v, observed %v", codes, obs.seen)
	}
	for i := range want {
		if obs.seen[i] != want[i] {
			t.Errorf("request %d (%d): observed %s, want %s", i+1, codes[i], obs.seen[i], want[i])
		}
	}
}

// countedRecheck is a key ring that finds no key and counts the reloads
// its rechecks would ask of the database.
type countedRecheck struct{ rechecks int }

func (c *countedRecheck) Lookup(string) (apikeys.Key, bool) { return apikeys.Key{}, false }
func (c *countedRecheck) Recheck(context.Context, string) (apikeys.Key, bool) {
	c.rechecks++
	return apikeys.Key{}, false
}

// A client whose failed-auth bucket refuses it (429) is refused again
// without a recheck: each new guessed key asked the server to reload every
// key from the database, 429 or not. Until its bucket is dry, a guess
// is rechecked as before (a key created a moment ago is found so). The
// fence admin routes keep the same promise (AllowAdmin rechecked every
// guess, each 429 waiting for a reload of the key table).
func TestRefusedGuesserAsksNoReload(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guess func(t *testing.T, toll *Toll, key string) int
	}{
		{"priced route", func(t *testing.T, toll *Toll, key string) int {
			w, _ := admit(t, toll, key, tileDemand(2, "places"))
			return w.Code
		}},
		{"fence admin", func(t *testing.T, toll *Toll, key string) int {
			r := httptest.NewRequest(http.MethodGet, "/geofence/fences", nil)
			r.RemoteAddr = "192.0.2.47:1000"
			r.Header.Set("X-API-Key", key)
			w := httptest.NewRecorder()
			if toll.AllowAdmin(r) {
				t.Fatalf("guess %s allowed", key)
			}
			toll.RefuseAdmin(w, r)
			return w.Code
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := throttle.NewMemoryStore(throttle.MemoryOptions{})
			toll := testToll(&throttle.Failover{Primary: primary, Mode: throttle.FailClosed, Logger: slog.New(slog.DiscardHandler)})
			keys := &countedRecheck{}
			toll.Keys = keys
			var codes []int
			for i := range 10 { // the failed-auth bucket holds 3
				codes = append(codes, tc.guess(t, toll, "gt_guess"+strconv.Itoa(i)))
			}
			if codes[2] != http.StatusUnauthorized || codes[3] != http.StatusTooManyRequests || codes[9] != http.StatusTooManyRequests {
				t.Fatalf("answers %v, want 3 × 401 then 429", codes)
			}
			if keys.rechecks != 4 {
				t.Errorf("%d rechecks for 10 guesses, want 4: the three 401s and the guess whose 429 the store decided", keys.rechecks)
			}
		})
	}
}

// A key presented before the server ever read its API keys (the database
// down since start-up, or the keys' table unreadable) may well be valid:
// it is answered 503 with a Retry-After — try again — not a 401 telling
// its client the key is wrong. It is still charged to its address's
// failed-auth bucket (429 once dry), and a string that cannot be a key
// is still a 401. Once the keys are read, an unknown key is a 401 again.
func TestKeyPresentedBeforeTheKeysWereReadIsUnavailable(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	toll := testToll(throttle.NewMemoryStore(throttle.MemoryOptions{Now: c.now}))
	down := errors.New("the database does not answer")
	var fail atomic.Bool
	fail.Store(true)
	ring := apikeys.NewRing(func(context.Context) (map[apikeys.Hash]apikeys.Key, error) {
		if fail.Load() {
			return nil, down
		}
		return map[apikeys.Hash]apikeys.Key{}, nil
	}, time.Minute, slog.New(slog.DiscardHandler))
	if err := ring.Refresh(t.Context()); !errors.Is(err, down) {
		t.Fatalf("Refresh: %v, want %v", err, down)
	}
	toll.Keys = ring
	obs := &outcomeObserver{}
	toll.Observer = obs
	key := "gt_" + strings.Repeat("a", 43)
	var codes []int
	for range 4 { // the failed-auth bucket holds 3
		w, _ := admit(t, toll, key, tileDemand(14, "places"))
		codes = append(codes, w.Code)
		if w.Code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
			t.Error("a 503 without Retry-After")
		}
	}
	if want := []int{503, 503, 503, 429}; !slices.Equal(codes, want) {
		t.Errorf("a plausible key before the keys were read: %v, want %v", codes, want)
	}
	if want := "failed-auth:keys-unread"; len(obs.seen) == 0 || obs.seen[0] != want {
		t.Errorf("observed %v, want %s first", obs.seen, want)
	}
	c.t = c.t.Add(time.Hour) // the failed-auth bucket refilled
	for _, notAKey := range []string{"not-a-key", "gt_", "gt_x"} {
		if w, _ := admit(t, toll, notAKey, tileDemand(14, "places")); w.Code != http.StatusUnauthorized {
			t.Errorf("%q, which cannot be a key: %d, want 401", notAKey, w.Code)
		}
	}
	fail.Store(false)
	c.t = c.t.Add(time.Hour)
	if err := ring.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w, _ := admit(t, toll, key, tileDemand(14, "places")); w.Code != http.StatusUnauthorized {
		t.Errorf("an unknown key once the keys were read: %d, want 401", w.Code)
	}
}
