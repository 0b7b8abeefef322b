package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/demo"
	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/toll"
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

// benchServer runs geotoll as startServer does, with a budget no benchmark
// can exhaust, and the tile cache on (warm) or off (cold).
func benchServer(b *testing.B, cache bool) string {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Database.URL = testenv.ReadDatabaseURL(b)
	cfg.Redis.URL = testenv.RedisURL(b)
	cfg.Throttle.Prefix = testenv.Prefix(b)
	cfg.Throttle.Tiers[toll.AnonymousTier] = TierConfig{Rate: 1e9, Capacity: 1e9}
	cfg.LogLevel = "error"
	if !cache {
		cfg.Tiles.Cache.MaxBytes = 0
	} else {
		cfg.Tiles.Cache.MaxBytes = 1 << 30
		cfg.Tiles.Cache.TTL = time.Hour
	}
	m := &Main{Config: cfg, Logger: quietLog()}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Open(ctx); err != nil {
		cancel()
		b.Fatalf("open: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("serve: %v", err)
		}
	})
	return "http://" + m.Addr()
}

// BenchmarkTileServing measures whole-server tile throughput (HTTP, price,
// Redis spend, cache or PostGIS, gzip) for each tile list, with the cache
// off (every request renders: "cold") and pre-filled ("warm"). The client
// asks for gzip, as browsers do, and does not decompress. Requests run on
// 4×GOMAXPROCS goroutines, cycling through the list.
//
//	go test -run '^$' -bench BenchmarkTileServing -benchtime 3s ./cmd/geotoll
func BenchmarkTileServing(b *testing.B) {
	client := &http.Client{Transport: &http.Transport{
		DisableCompression: true, MaxIdleConns: 64, MaxIdleConnsPerHost: 64,
	}}
	fetchTile := func(base string, t maptile.Tile) (int, int64, error) {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/tiles/places/%d/%d/%d.mvt", base, t.Z, t.X, t.Y), nil)
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Accept-Encoding", "gzip")
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
				base := benchServer(b, warm)
				if warm {
					for _, t := range list.tiles {
						if _, _, err := fetchTile(base, t); err != nil {
							b.Fatal(err)
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
