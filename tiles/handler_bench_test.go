package tiles_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// fixedRenderer answers every tile with the same bytes, so a benchmark
// measures the handler, not the database.
type fixedRenderer []byte

func (f fixedRenderer) Tile(context.Context, []*tiles.Layer, maptile.Tile) ([]byte, error) {
	return f, nil
}

// discardWriter is a ResponseWriter that keeps nothing: a recorder would
// copy every body and weigh on the measurement.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(b []byte) (int, error) { return io.Discard.Write(b) }

// BenchmarkHandlerEncoding measures the tile handler's own work per request
// (parse, cache, encode, write) for clients that send no Accept-Encoding
// ("identity") and clients that accept gzip, on a real dense z14 tile of
// the demo data (rendered once from PostGIS) and on its generalised z2
// tile, served from a warm cache ("hit") and rendered for
// every request ("miss": the cache holds nothing, so each request takes the
// render path with the database answering at once).
//
//	go test -run '^$' -bench BenchmarkHandlerEncoding -benchtime 2s ./tiles
func BenchmarkHandlerEncoding(b *testing.B) {
	cat := demoCatalog(b)
	store := tiles.NewStore(testenv.ReadPool(b))
	for _, tc := range []struct {
		name string
		tile maptile.Tile
	}{{"z14", maptile.At(berlin, 14)}, {"z2", maptile.At(berlin, 2)}} {
		data, err := store.Tile(b.Context(), resolve(b, cat, "places"), tc.tile)
		if err != nil || len(data) == 0 {
			b.Fatalf("render %v: %d bytes, %v", tc.tile, len(data), err)
		}
		path := fmt.Sprintf("/tiles/places/%d/%d/%d.mvt", tc.tile.Z, tc.tile.X, tc.tile.Y)
		for _, cached := range []bool{true, false} {
			max, kind := int64(1<<30), "hit"
			if !cached {
				max, kind = 0, "miss"
			}
			h := tileRouter(&tiles.Handler{
				Catalog: cat, Store: fixedRenderer(data), Gate: allowAll{}, Logger: discardLogger(),
				Cache: newCache(b, tiles.CacheOptions{MaxBytes: max}),
			})
			for _, enc := range []string{"identity", "gzip"} {
				b.Run(fmt.Sprintf("%s/%s/%s", tc.name, kind, enc), func(b *testing.B) {
					r := httptest.NewRequest(http.MethodGet, path, nil)
					if enc == "gzip" {
						r.Header.Set("Accept-Encoding", "gzip")
					}
					b.SetBytes(int64(len(data)))
					b.ReportAllocs()
					for b.Loop() {
						w := &discardWriter{h: http.Header{}}
						h.ServeHTTP(w, r)
						if w.status != http.StatusOK {
							b.Fatalf("status %d", w.status)
						}
					}
				})
			}
		}
	}
}
