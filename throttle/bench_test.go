package throttle

import (
	"context"
	"fmt"
	"testing"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/paulmach/orb/maptile"
)

func BenchmarkTileCost(b *testing.B) {
	w := DefaultWeights()
	tiles := []maptile.Tile{maptile.New(8800, 5373, 14), maptile.New(1, 1, 2), maptile.New(300, 200, 9)}
	b.ReportAllocs()
	var sink float64
	for i := 0; b.Loop(); i++ {
		sink += w.Tile(tiles[i%len(tiles)])
	}
	if sink == 0 {
		b.Fatal("no cost")
	}
}

// benchLimit admits every spend of cost 1 however fast the benchmark runs,
// so the benchmarks time the admitted path (the one that writes).
var benchLimit = Limit{Rate: 1e7, Capacity: 1e9}

func BenchmarkSpendMemory(b *testing.B) {
	ctx := context.Background()
	b.Run("one key", func(b *testing.B) {
		s := NewMemoryStore(MemoryOptions{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Spend(ctx, "k", benchLimit, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("10k keys", func(b *testing.B) {
		s := NewMemoryStore(MemoryOptions{})
		keys := make([]string, 10000)
		for i := range keys {
			keys[i] = BucketKey("geotoll", "free", fmt.Sprint("client", i))
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := s.Spend(ctx, keys[i%len(keys)], benchLimit, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := NewMemoryStore(MemoryOptions{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Spend(ctx, "k", benchLimit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkSpendRedis times one Spend: one EVALSHA round trip plus the
// script. Compare with BenchmarkPingRedis, one bare round trip on the same
// client.
func BenchmarkSpendRedis(b *testing.B) {
	rdb := testenv.Redis(b)
	ctx := context.Background()
	s := NewRedisStore(rdb)
	key := BucketKey(testenv.Prefix(b), "bench", "client")
	b.Cleanup(func() { rdb.Del(context.Background(), key) })
	if _, err := s.Spend(ctx, key, benchLimit, 1); err != nil { // load the script
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.Spend(ctx, key, benchLimit, 1)
		if err != nil || !r.Allowed {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkPingRedis is the baseline for BenchmarkSpendRedis: one PING round
// trip on the same kind of client.
func BenchmarkPingRedis(b *testing.B) {
	rdb := testenv.Redis(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
