package toll

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// redisToll is testToll on the real Redis with a unique prefix.
func redisToll(t *testing.T) (*Toll, func() []string) {
	t.Helper()
	return redisTollOn(t, testenv.Redis(t))
}

// eachRedis runs fn against the single test Redis and the test Redis
// Cluster.
func eachRedis(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { fn(t, testenv.Redis(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, testenv.RedisCluster(t)) })
}

// redisTimeout bounds the tests' calls to Redis: generous, as the race
// detector is slow; these are not the fault tests.
const redisTimeout = 2 * time.Second

// redisTollOn is testToll on rdb with a unique prefix; keys lists the
// test's keys in Redis (on every master of a cluster).
func redisTollOn(t *testing.T, rdb redis.UniversalClient) (*Toll, func() []string) {
	t.Helper()
	store := throttle.NewRedisStore(rdb, throttle.RedisOptions{Timeout: redisTimeout})
	toll := testToll(store)
	toll.Prefix = testenv.Prefix(t)
	// keys lists the test's keys once every settlement and release on its
	// way has been sent (an open-request hash empties then, and vanishes).
	keys := func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := store.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var (
			mu  sync.Mutex
			out []string
		)
		scan := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, toll.Prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				mu.Lock()
				out = append(out, iter.Val())
				mu.Unlock()
			}
			return iter.Err()
		}
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(context.Background(), scan)
		case *redis.Client:
			err = scan(context.Background(), c)
		}
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(out)
		return out
	}
	t.Cleanup(func() {
		for _, k := range keys() {
			rdb.Del(context.Background(), k)
		}
	})
	return toll, keys
}

// 10,000 random keys from one address create no bucket for any of them:
// only the address's failed-auth bucket exists afterwards.
func TestRandomKeysCreateNoBuckets(t *testing.T) {
	toll, keys := redisToll(t)
	toll.FailedAuth = throttle.Limit{Rate: 1, Capacity: 20}
	z14 := tileDemand(14, "places")
	codes := map[int]int{}
	for i := 0; i < 10000; i++ {
		w, ok := admit(t, toll, "random-"+strconv.Itoa(i), z14)
		if ok {
			t.Fatalf("random key %d admitted", i)
		}
		codes[w.Code]++
	}
	if codes[http.StatusUnauthorized] < 20 || codes[http.StatusTooManyRequests] < 9000 {
		t.Errorf("status counts %v: want 401s until the failed-auth bucket is dry, then 429s", codes)
	}
	got := keys()
	want := throttle.BucketKey(toll.Prefix, FailedAuthTier, "ip:192.0.2.7")
	if len(got) != 1 || got[0] != want {
		t.Fatalf("bucket keys after 10,000 random API keys: %q, want only %q", got, want)
	}
}

func TestClientAddressBuckets(t *testing.T) {
	toll, keys := redisToll(t)
	trusted, err := forwarded.New([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	toll.Proxies = trusted
	z14 := tileDemand(14, "places")
	send := func(remote string, hdr ...string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/14/0/0.mvt", nil)
		r.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		if !toll.AdmitTile(w, r, z14) {
			t.Fatalf("refused: %d %s", w.Code, w.Body)
		}
	}
	send("203.0.113.5:1000", "X-Forwarded-For", "198.51.100.1")               // spoofed: untrusted peer
	send("10.1.1.1:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.2, 10.2.2.2") // trusted chain
	send("[2001:db8:aa:bb:1::1]:443")                                         // IPv6 …
	send("[2001:db8:aa:bb:2::2]:443")                                         // … same /64
	want := map[string]bool{
		throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:203.0.113.5"):         true,
		throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:198.51.100.2"):        true,
		throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:2001:db8:aa:bb::/64"): true,
	}
	got := keys()
	if len(got) != len(want) {
		t.Fatalf("bucket keys %q, want %v", got, want)
	}
	for _, k := range got {
		if !want[k] {
			t.Errorf("unexpected bucket %q", k)
		}
	}
}

// Every /64 of an IPv6 network also pays the network's aggregate bucket
// (/48 here): a site cannot multiply the anonymous budget by hopping /64s.
// The /64's bucket and the /48's share one Redis Cluster slot, so one
// script may touch both.
func TestIPv6AggregateBucket(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, keys := redisTollOn(t, rdb)
		toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 0.001, Capacity: 100}}
		if err := toll.Validate(); err != nil {
			t.Fatal(err)
		}
		z2 := tileDemand(2, "places") // 60 tokens; the anonymous bucket holds 80, the /48 100
		from := func(remote string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt", nil)
			r.RemoteAddr = remote
			w := httptest.NewRecorder()
			toll.AdmitTile(w, r, z2)
			return w
		}
		if w := from("[2001:db8:1:1::1]:443"); w.Code != http.StatusOK {
			t.Fatalf("first /64: %d %s", w.Code, w.Body)
		}
		w := from("[2001:db8:1:2::1]:443") // a fresh /64, but the /48 holds 40
		if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"anonymous-ipv6-/48"`) || w.Header().Get("Retry-After") == "" {
			t.Fatalf("second /64 of the same /48: %d %s", w.Code, w.Body)
		}
		if w := from("[2001:db8:2:1::1]:443"); w.Code != http.StatusOK { // another /48
			t.Fatalf("another /48: %d %s", w.Code, w.Body)
		}
		if w := from("[2002:c000:0207::1]:443"); w.Code != http.StatusOK { // 6to4: the IPv4 client 192.0.2.7
			t.Fatalf("6to4: %d %s", w.Code, w.Body)
		}
		net48 := throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:2001:db8:1::/48")
		own64 := net48 + ":ip:2001:db8:1:1::/64"
		// The refused /64 has no key: a refusal writes nothing.
		want := []string{
			own64, net48,
			throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:2001:db8:2::/48"),
			throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:2001:db8:2::/48") + ":ip:2001:db8:2:1::/64",
			throttle.BucketKey(toll.Prefix, AnonymousTier, "ip:192.0.2.7"),
		}
		sort.Strings(want)
		if got := keys(); !slices.Equal(got, want) {
			t.Fatalf("bucket keys\n got %q\nwant %q", got, want)
		}
		// One script touching the /64 and its /48: no CROSSSLOT on a cluster.
		n, err := rdb.Eval(t.Context(), "return redis.call('EXISTS', KEYS[1], KEYS[2])", []string{own64, net48}).Int()
		if err != nil || n != 2 {
			t.Fatalf("one script over the /64 and the /48: %d %v", n, err)
		}
	})
}

// A dry run of an anonymous IPv6 caller answers as its request would be
// answered: would_allow false, and its retry_after, when the network's
// aggregate cannot pay, though the caller's own /64 could.
func TestDryRunSeesTheIPv6Aggregate(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, _ := redisTollOn(t, rdb)
		toll.IPv6Aggregate = IPv6Aggregate{Bits: 48, Limit: throttle.Limit{Rate: 0.001, Capacity: 100}}
		if err := toll.Validate(); err != nil {
			t.Fatal(err)
		}
		z2 := tileDemand(2, "places") // 60 tokens; the anonymous bucket holds 80, the /48 100
		from := func(remote, query string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/tiles/places/2/0/0.mvt"+query, nil)
			r.RemoteAddr = remote
			w := httptest.NewRecorder()
			toll.AdmitTile(w, r, z2)
			return w
		}
		if w := from("[2001:db8:1:1::1]:443", ""); w.Code != http.StatusOK {
			t.Fatalf("first /64: %d %s", w.Code, w.Body)
		}
		w := from("[2001:db8:1:2::1]:443", "?dry_run=1") // a fresh /64: the /48 holds 40
		var body struct {
			WouldAllow bool    `json:"would_allow"`
			RetryAfter float64 `json:"retry_after"`
		}
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil {
			t.Fatalf("dry run: %d %s", w.Code, w.Body)
		}
		if body.WouldAllow || body.RetryAfter < 1000 {
			t.Fatalf("dry run of 60 tokens from a fresh /64 of a /48 holding 40: %s; want would_allow false, retry_after about 20,000 s", w.Body)
		}
		if w := from("[2001:db8:1:2::1]:443", ""); w.Code != http.StatusTooManyRequests {
			t.Fatalf("the request itself: %d %s", w.Code, w.Body)
		}
	})
}

// The budget headers never promise a token the bucket lacks: after 57.00004
// of 100 tokens, 42.99996 remain — RateLimit's r and X-RateLimit-Remaining
// say 42, a request of 43 is refused, and its refusal's detail and members
// do not show a remainder that would pay it.
func TestRemainingHeadersRoundDown(t *testing.T) {
	eachRedis(t, func(t *testing.T, rdb redis.UniversalClient) {
		toll, _ := redisTollOn(t, rdb)
		toll.Tiers[AnonymousTier] = Tier{Name: AnonymousTier, Limit: throttle.Limit{Rate: 1e-6, Capacity: 100}}
		charge := func(cost float64) (*httptest.ResponseRecorder, bool) {
			r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt", nil)
			r.RemoteAddr = "192.0.2.77:5555"
			w := httptest.NewRecorder()
			return w, toll.Charge(w, r, Price{Cost: cost, Route: routeTile, Layer: "x", Zoom: 0, Base: 0.01}) != nil
		}
		w, ok := charge(57.00004)
		if !ok {
			t.Fatal("the first request was refused")
		}
		if got := w.Header().Get("X-RateLimit-Remaining"); got != "42" || !strings.Contains(w.Header().Get("RateLimit"), ";r=42;") {
			t.Errorf("42.99996 tokens left: X-RateLimit-Remaining %q, RateLimit %q, want 42", got, w.Header().Get("RateLimit"))
		}
		refused, ok := charge(43)
		if ok {
			t.Fatal("a request of 43 tokens was admitted with 42.99996 left")
		}
		var body struct {
			Detail    string  `json:"detail"`
			Cost      float64 `json:"cost"`
			Remaining float64 `json:"remaining"`
		}
		if err := json.Unmarshal(refused.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if body.Remaining >= body.Cost || body.Remaining != 42.99996 || !strings.Contains(body.Detail, "costs 43 tokens; 42.99996 remain") {
			t.Errorf("refusal: cost %v, remaining %v, detail %q; want 43 and 42.99996", body.Cost, body.Remaining, body.Detail)
		}
		// A dry run says the same.
		r := httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt?dry_run=1", nil)
		r.RemoteAddr = "192.0.2.77:5555"
		dry := httptest.NewRecorder()
		toll.Charge(dry, r, Price{Cost: 43, Route: routeTile, Layer: "x", Zoom: 0, Base: 0.01})
		var preview struct {
			Cost       float64 `json:"cost"`
			Remaining  float64 `json:"remaining"`
			WouldAllow bool    `json:"would_allow"`
		}
		if err := json.Unmarshal(dry.Body.Bytes(), &preview); err != nil {
			t.Fatalf("dry run: %v %s", err, dry.Body)
		}
		if preview.WouldAllow || preview.Cost != 43 || preview.Remaining != 42.99996 {
			t.Errorf("dry run of 43: %+v, want cost 43, remaining 42.99996, not allowed", preview)
		}
		// A dry run that would be allowed never shows less remaining than
		// its cost, and quotes the cost its X-Request-Cost does, to the
		// micro-token.
		r = httptest.NewRequest(http.MethodGet, "/tiles/x/0/0/0.mvt?dry_run=1", nil)
		r.RemoteAddr = "192.0.2.77:5555"
		dry = httptest.NewRecorder()
		toll.Charge(dry, r, Price{Cost: 42.99996, Route: routeTile, Layer: "x", Zoom: 0, Base: 0.01})
		if err := json.Unmarshal(dry.Body.Bytes(), &preview); err != nil {
			t.Fatalf("dry run: %v %s", err, dry.Body)
		}
		if !preview.WouldAllow || preview.Remaining < preview.Cost || dry.Header().Get("X-Request-Cost") != "42.99996" {
			t.Errorf("dry run of 42.99996: %+v, X-Request-Cost %q; want allowed, remaining at least the cost, header 42.99996", preview, dry.Header().Get("X-Request-Cost"))
		}
	})
}
