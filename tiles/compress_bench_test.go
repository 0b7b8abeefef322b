package tiles_test

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	kpgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/paulmach/orb/maptile"

	"github.com/geotoll/geotoll/internal/testenv"
	"github.com/geotoll/geotoll/tiles"
)

// compressTiles are the demo tiles BenchmarkTileCompression compresses, all
// around Berlin: the dense z14 tile of the point layer "places" (not
// generalised), its generalised z12 (the largest of Berlin's z0–z14), z10
// and z2 tiles, and the generalised z1 tile of the polygon layer
// "districts".
var compressTiles = []struct {
	name, list string
	tile       maptile.Tile
}{
	{"places-z14", "places", maptile.At(berlin, 14)},
	{"places-z12", "places", maptile.At(berlin, 12)},
	{"places-z10", "places", maptile.At(berlin, 10)},
	{"places-z2", "places", maptile.At(berlin, 2)},
	{"districts-z1", "districts", maptile.At(berlin, 1)},
}

var (
	renderedOnce sync.Once
	rendered     [][]byte // compressTiles' bytes, rendered once per process
)

// codec compresses a whole tile, reusing its writer and output buffer as the
// cache reuses its gzip writer, and decompresses for the round-trip check.
type codec struct {
	name       string
	compress   func(dst, tile []byte) []byte
	decompress func([]byte) ([]byte, error)
}

func gzipCodec(tb testing.TB, name string, level int, std bool) codec {
	var buf bytes.Buffer
	var w interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	var err error
	if std {
		w, err = stdgzip.NewWriterLevel(&buf, level)
	} else {
		w, err = kpgzip.NewWriterLevel(&buf, level)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return codec{
		name: name,
		compress: func(_, tile []byte) []byte {
			buf.Reset()
			w.Reset(&buf)
			if _, err := w.Write(tile); err != nil || w.Close() != nil {
				tb.Fatal("gzip into a bytes.Buffer failed")
			}
			return buf.Bytes()
		},
		decompress: func(b []byte) ([]byte, error) {
			r, err := stdgzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, err
			}
			return io.ReadAll(r)
		},
	}
}

func zstdCodec(tb testing.TB, name string, level zstd.EncoderLevel) codec {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level))
	if err != nil {
		tb.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = enc.Close(); dec.Close() })
	return codec{
		name:       name,
		compress:   func(dst, tile []byte) []byte { return enc.EncodeAll(tile, dst[:0]) },
		decompress: func(b []byte) ([]byte, error) { return dec.DecodeAll(b, nil) },
	}
}

// BenchmarkTileCompression measures, for real demo tiles (rendered once
// from PostGIS), each encoding's compression time per tile (ns/op, and
// cpu-ns/op: the CPU time of the loop's own thread) and the size it makes
// ("%size": compressed bytes as a percentage of the tile): the standard
// library's gzip at BestSpeed (what the cache used before) and at its default
// level; klauspost/compress's gzip at level 1, at level 4 (what the cache uses: its lowest
// level smaller than the standard library's level 1 on these tiles) and at
// its default level; and its zstd at SpeedFastest and SpeedDefault. Every
// writer is made once and reused, as a server would. Each result is checked
// to decompress to the tile (gzip with the standard library's reader).
//
//	go test -run '^$' -bench BenchmarkTileCompression -count 10 ./tiles
//
// -count repeats each case back to back; on a shared machine, run the test
// binary ten times with -test.count 1 instead, so that every encoding is
// measured under the same load as the others.
func BenchmarkTileCompression(b *testing.B) {
	renderedOnce.Do(func() {
		// The render is not measured: give it time on a busy machine.
		layers := demoLayers()
		for i := range layers {
			layers[i].StatementTimeout = time.Minute
		}
		store, cat := tiles.NewStore(testenv.ReadPool(b)), newCatalog(b, layers...)
		for _, tc := range compressTiles {
			data, err := store.Tile(b.Context(), resolve(b, cat, tc.list), tc.tile)
			if err != nil || len(data) == 0 {
				b.Fatalf("render %s %v: %d bytes, %v", tc.list, tc.tile, len(data), err)
			}
			rendered = append(rendered, data)
		}
	})
	if len(rendered) != len(compressTiles) {
		b.Fatal("the tiles were not rendered")
	}
	codecs := []codec{
		gzipCodec(b, "gzip-1", stdgzip.BestSpeed, true),
		gzipCodec(b, "gzip-default", stdgzip.DefaultCompression, true),
		gzipCodec(b, "klauspost-gzip-1", kpgzip.BestSpeed, false),
		gzipCodec(b, "klauspost-gzip-4", 4, false),
		gzipCodec(b, "klauspost-gzip-default", kpgzip.DefaultCompression, false),
		zstdCodec(b, "zstd-fastest", zstd.SpeedFastest),
		zstdCodec(b, "zstd-default", zstd.SpeedDefault),
	}
	for i, tc := range compressTiles {
		tile := rendered[i]
		for _, c := range codecs {
			b.Run(fmt.Sprintf("%s-%dKB/%s", tc.name, (len(tile)+512)/1024, c.name), func(b *testing.B) {
				dst := c.compress(nil, tile)
				if back, err := c.decompress(dst); err != nil || !bytes.Equal(back, tile) {
					b.Fatalf("%d bytes do not decompress to the %d-byte tile: %v", len(dst), len(tile), err)
				}
				b.SetBytes(int64(len(tile)))
				b.ReportAllocs()
				// The loop's own thread's CPU time, which other processes on a
				// busy machine do not inflate as they do wall time.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := testenv.ThreadCPU()
				for b.Loop() {
					dst = c.compress(dst, tile)
				}
				if end := testenv.ThreadCPU(); start >= 0 && end >= start {
					b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
				}
				b.ReportMetric(100*float64(len(dst))/float64(len(tile)), "%size")
			})
		}
	}
}
