package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		profile string
		n       int
		prefix  string
	}{
		{"z14", 44 * 9, "/tiles/places/14/"},
		{"z8-10", 44 * 3, "/tiles/places/"},
		{"z0-3", 1 + 4 + 16 + 64, "/tiles/places/"},
		{"within", 44 * 3, "/geofence/within?layer=places"},
		{"healthz", 1, "/healthz"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			a, err := Paths(tc.profile, "places")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Paths(tc.profile, "places")
			if len(a) != tc.n || strings.Join(a, " ") != strings.Join(b, " ") {
				t.Fatalf("%d paths (want %d), deterministic %v", len(a), tc.n, strings.Join(a, " ") == strings.Join(b, " "))
			}
			for _, p := range a {
				if !strings.HasPrefix(p, tc.prefix) {
					t.Fatalf("path %q lacks prefix %q", p, tc.prefix)
				}
			}
		})
	}
	if _, err := Paths("z99", "places"); err == nil {
		t.Fatal("unknown profile accepted")
	}
}

func TestOptionsRefuseRemoteAndUnbounded(t *testing.T) {
	for _, o := range []Options{
		{BaseURL: "http://10.0.0.1:8080", Profile: "z14", Rate: 10, Duration: time.Second},
		{BaseURL: "http://example.com", Profile: "z14", Rate: 10, Duration: time.Second},
		{BaseURL: "http://127.0.0.1:8080", Profile: "z14", Rate: 0, Duration: time.Second},
		{BaseURL: "http://127.0.0.1:8080", Profile: "z14", Rate: 10, Duration: time.Hour},
		{BaseURL: "ftp://127.0.0.1", Profile: "z14", Rate: 10, Duration: time.Second},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) accepted", o)
		}
	}
}

func TestRunCountsCostsAndCodes(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "k" {
			t.Errorf("key not sent")
		}
		w.Header().Set("X-Request-Cost", "1.5")
		if n.Add(1)%4 == 0 {
			w.Header().Set("X-Cache", "HIT")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	rep, err := Run(context.Background(), Options{BaseURL: srv.URL, Profile: "z14", Rate: 40, Duration: time.Second, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	got := int(rep.Requests)
	if got < 30 || int64(got) != n.Load() {
		t.Fatalf("requests %d, server saw %d", got, n.Load())
	}
	if rep.StatusCodes["200"]+rep.StatusCodes["429"] != got || rep.StatusCodes["429"] != got/4 {
		t.Fatalf("status codes %v for %d requests", rep.StatusCodes, got)
	}
	if rep.Tokens != 1.5*float64(rep.StatusCodes["200"]) || rep.CacheHits != got/4 {
		t.Fatalf("tokens %v, cache hits %d for %d requests", rep.Tokens, rep.CacheHits, got)
	}
	var sb strings.Builder
	rep.WriteText(&sb)
	if !strings.Contains(sb.String(), "429×") {
		t.Fatalf("report lacks status codes:\n%s", sb.String())
	}
}
