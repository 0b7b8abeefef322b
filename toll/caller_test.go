package toll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/forwarded"
)

// lateKeys knows its keys only when asked to recheck, as a ring does for a
// key created after its last reload.
type lateKeys map[string]apikeys.Key

func (lateKeys) Lookup(string) (apikeys.Key, bool) { return apikeys.Key{}, false }

func (l lateKeys) Recheck(_ context.Context, key string) (apikeys.Key, bool) {
	k, ok := l[key]
	return k, ok
}

// A key the ring has not loaded yet is rechecked before the request is
// refused: it pays as itself, and an admin key administers.
func TestUnknownKeyIsRechecked(t *testing.T) {
	toll := testToll(nil)
	toll.Keys = lateKeys{"new": {ID: 5, Name: "new", Tier: "free", Admin: true}}
	for _, tc := range []struct {
		key      string
		ok       bool
		identity string
	}{
		{"new", true, "k:5"},
		{"never", false, "ip:192.0.2.7"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/tiles/places/0/0/0.mvt", nil)
		r.RemoteAddr = "192.0.2.7:5555"
		r.Header.Set("X-API-Key", tc.key)
		c, ok := toll.identify(r)
		if ok != tc.ok || c.Identity != tc.identity {
			t.Errorf("key %q: caller %+v, ok %v; want ok %v, identity %s", tc.key, c, ok, tc.ok, tc.identity)
		}
		if got := toll.AllowAdmin(r); got != tc.ok {
			t.Errorf("key %q: AllowAdmin %v", tc.key, got)
		}
	}
}

func TestBucketIP(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"ipv4", "192.0.2.1:443", "192.0.2.1"},
		{"ipv6 grouped by /64", "[2001:db8:1:2:aaaa::1]:80", "2001:db8:1:2::/64"},
		{"same /64, other host", "[2001:db8:1:2:bbbb::9]:80", "2001:db8:1:2::/64"},
		{"v4-mapped v6", "[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"zone dropped", "[fe80::1%eth0]:80", "fe80::/64"},
		{"6to4 is its IPv4 client", "[2002:c000:0207:1:2::3]:80", "192.0.2.7"},
		{"6to4, other host of the same IPv4", "[2002:c000:0207:ffff::9]:80", "192.0.2.7"},
		{"Teredo is its IPv4 client", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", "192.0.2.45"}, // RFC 4380's example
		{"2001:db8::/32 is not Teredo", "[2001:db8:0:1::5]:80", "2001:db8:0:1::/64"},
		{"no port", "192.0.2.1", "192.0.2.1"},
		{"garbage", "not-an-address", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.in
			if got := bucketIP(forwarded.Peer(r)); got != tc.want {
				t.Errorf("bucketIP(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestAPIKeySources(t *testing.T) {
	for _, tc := range []struct {
		name, header, value, query, want string
		present                          bool
	}{
		{"none", "", "", "", "", false},
		{"X-API-Key", "X-API-Key", "k1", "", "k1", true},
		{"bearer", "Authorization", "Bearer k2", "", "k2", true},
		{"bearer case-insensitive", "Authorization", "bearer k3", "", "k3", true},
		{"basic is not a key", "Authorization", "Basic abc", "", "", false},
		{"query", "", "", "key=k4", "k4", true},
		{"header wins over query", "X-API-Key", "h", "key=q", "h", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/x?"+tc.query, nil)
			if tc.header != "" {
				r.Header.Set(tc.header, tc.value)
			}
			got, present := APIKey(r)
			if got != tc.want || present != tc.present {
				t.Errorf("APIKey = %q, %v; want %q, %v", got, present, tc.want, tc.present)
			}
		})
	}
}

// FuzzAPIKey: any headers and query parse without panic; X-API-Key wins;
// a key is reported present iff one was found.
func FuzzAPIKey(f *testing.F) {
	for _, s := range []string{"", "gt_abc", "Bearer x", "bearer  y ", "Basic z", "key=%zz", "key=a&key=b"} {
		f.Add(s, s, s)
	}
	f.Fuzz(func(t *testing.T, header, auth, rawQuery string) {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.URL.RawQuery = rawQuery
		r.Header["X-Api-Key"] = []string{header}
		r.Header["Authorization"] = []string{auth}
		key, present := APIKey(r)
		if header != "" && (key != header || !present) {
			t.Fatalf("X-API-Key %q not preferred (got %q, %v)", header, key, present)
		}
		if !present && key != "" {
			t.Fatalf("key %q reported absent", key)
		}
	})
}
