package geofence

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkCheckVersusContains answers the same 1,000 positions two ways
// over real HTTP (loopback) against the real PostGIS: one POST
// /geofence/check of 1,000 points, and 1,000 GET /geofence/contains calls.
// One op is the whole 1,000 positions either way, so the ratio of ns/op is
// what batching saves.
//
//	make services && eval "$(scripts/services.sh env)" && \
//	GEOTOLL_REQUIRE_SERVICES=1 go test -run '^$' -bench CheckVersusContains -benchmem ./geofence/
func BenchmarkCheckVersusContains(b *testing.B) {
	srv := httptest.NewServer(liveAPI(b, false))
	b.Cleanup(srv.Close)
	client := srv.Client()
	pts := thousandPoints(b)
	body, err := json.Marshal(map[string]any{"points": pts})
	if err != nil {
		b.Fatal(err)
	}
	urls := make([]string, len(pts))
	for i, p := range pts {
		urls[i] = srv.URL + "/geofence/contains?lng=" + strconv.FormatFloat(p.Lng, 'f', -1, 64) +
			"&lat=" + strconv.FormatFloat(p.Lat, 'f', -1, 64)
	}
	do := func(req *http.Request) {
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode)
		}
	}

	b.Run("check-1000-points", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/geofence/check", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			do(req)
		}
	})
	b.Run("contains-1000-calls", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, u := range urls {
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				do(req)
			}
		}
	})
}
