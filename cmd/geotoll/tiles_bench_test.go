package main

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/demo"
)

// benchTileLists are the demo data's tile lists: dense city cores at z14
// (the 3×3 tiles around each of the 44 cities), the tile of each city at
// z8, z9 and z10, and every tile of z0–3.
func benchTileLists() []struct {
	name  string
	tiles []maptile.Tile
} {
	var z14, z8to10, z0to3 []maptile.Tile
	for _, c := range demo.Cities {
		p := orb.Point{c.Lon, c.Lat}
		centre := maptile.At(p, 14)
		for dx := -1; dx <= 1; dx++ {
			for dy := -1; dy <= 1; dy++ {
				z14 = append(z14, maptile.New(uint32(int(centre.X)+dx), uint32(int(centre.Y)+dy), 14))
			}
		}
		for z := maptile.Zoom(8); z <= 10; z++ {
			z8to10 = append(z8to10, maptile.At(p, z))
		}
	}
	for z := maptile.Zoom(0); z <= 3; z++ {
		for x := uint32(0); x < 1<<z; x++ {
			for y := uint32(0); y < 1<<z; y++ {
				z0to3 = append(z0to3, maptile.New(x, y, z))
			}
		}
	}
	return []struct {
		name  string
		tiles []maptile.Tile
	}{{"z14-dense", z14}, {"z8-10", z8to10}, {"z0-3", z0to3}}
}

// benchClients hands out client addresses, a new one for each request,
// from 198.18.0.0/15 (the range set aside for benchmarks): they are only
// text in X-Forwarded-For, never a destination. A server behind a trusted
// proxy at 127.0.0.1 (benchServer) then prices, charges and holds an
// in-flight slot for every request under the default anonymous tier — 80
// tokens, 10/s, 8 in flight — as it would for a real client, and 131,072
// clients in turn never run one dry: at 10,000 requests/s each comes back
// after 13 s, when its bucket has refilled.
type benchClients struct{ n atomic.Uint32 }

func (c *benchClients) next() string {
	i := c.n.Add(1) % (1 << 17)
	return netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)}).String()
}

// benchServer runs geotoll as startServer does, with the default tiers
// behind a trusted proxy at 127.0.0.1 (see benchClients), and edit's
// changes.
func benchServer(b *testing.B, edit func(*Config)) string {
	b.Helper()
	base, _ := startServer(b, func(c *Config) {
		c.HTTP.TrustedProxies = []string{"127.0.0.1/32"}
		c.LogLevel = "error"
		if edit != nil {
			edit(c)
		}
	})
	return base
}

// BenchmarkTileServing measures whole-server tile throughput for each tile
// list, with the cache off (every request renders: "cold") and pre-filled
// ("warm"). Each request is a real one under the default tiers: HTTP, the
// client address from X-Forwarded-For, the price, one Redis round trip that
// spends from the client's bucket and takes an in-flight slot, the cache or
// PostGIS, gzip, and the request's settlement, which frees the slot (a
// client of its own makes no next request, so its settlement goes to Redis
// in a batch of its own, FinishDelay after the response). The client asks
// for gzip, as browsers do, and does not decompress. Requests run on
// 4×GOMAXPROCS goroutines, cycling through the list; any answer but 200 or
// 204 (a 429, say) fails the benchmark.
//
//	go test -run '^$' -bench BenchmarkTileServing -benchtime 3s ./cmd/geotoll
func BenchmarkTileServing(b *testing.B) {
	client := &http.Client{Transport: &http.Transport{
		DisableCompression: true, MaxIdleConns: 64, MaxIdleConnsPerHost: 64,
	}}
	var clients benchClients
	fetchTile := func(base string, t maptile.Tile) (int, int64, error) {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/tiles/places/%d/%d/%d.mvt", base, t.Z, t.X, t.Y), nil)
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set("X-Forwarded-For", clients.next())
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, n, err
	}
	for _, list := range benchTileLists() {
		for _, warm := range []bool{false, true} {
			name := list.name + "/cold"
			if warm {
				name = list.name + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				base := benchServer(b, func(c *Config) {
					c.Tiles.Cache.MaxBytes = 0
					if warm {
						c.Tiles.Cache.MaxBytes, c.Tiles.Cache.TTL = 1<<30, time.Hour
					}
				})
				if warm {
					for _, t := range list.tiles {
						if status, _, err := fetchTile(base, t); err != nil || (status != http.StatusOK && status != http.StatusNoContent) {
							b.Fatalf("warming %v: %d %v", t, status, err)
						}
					}
				}
				var next, bytes atomic.Int64
				b.SetParallelism(4)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						t := list.tiles[int(next.Add(1)-1)%len(list.tiles)]
						status, n, err := fetchTile(base, t)
						if err != nil || (status != http.StatusOK && status != http.StatusNoContent) {
							b.Errorf("%v: %d %v", t, status, err)
							return
						}
						bytes.Add(n)
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tiles/s")
				b.ReportMetric(float64(bytes.Load())/float64(b.N), "B/tile")
			})
		}
	}
}
