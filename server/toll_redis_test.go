package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/throttle"
)

// redisToll is testToll on the real Redis with a unique prefix.
func redisToll(t *testing.T) (*Toll, func() []string) {
	t.Helper()
	rdb := testenv.Redis(t)
	toll := testToll(throttle.NewRedisStore(rdb))
	toll.Prefix = testenv.Prefix(t)
	toll.Timeout = 2 * time.Second // the race detector is slow; this is not the fault test
	keys := func() []string {
		var out []string
		iter := rdb.Scan(context.Background(), 0, toll.Prefix+":*", 1000).Iterator()
		for iter.Next(context.Background()) {
			out = append(out, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Cleanup(func() {
		if k := keys(); len(k) > 0 {
			rdb.Del(context.Background(), k...)
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
