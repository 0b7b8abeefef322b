package tiles

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geotoll/geotoll/internal/pgcall"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/gzip"
	"github.com/maypok86/otter/v2"
	"github.com/paulmach/orb/maptile"
)

// CacheOptions size a Cache.
type CacheOptions struct {
	// MaxBytes bounds the bytes of tiles held: each tile, its gzip form
	// once a client that accepts gzip has asked for it, and a small
	// per-entry overhead. 0 holds nothing: concurrent misses are still
	// coalesced, and tiles are sent as rendered (never gzipped).
	MaxBytes int64
	// TTL is how long a tile is served from memory after it was rendered
	// (default 1 min) — a second less than its layers' smallest max_age
	// (half of it under 2 s), when that is shorter (see renderExpiry). Tiles are never refreshed
	// in place: the first request after expiry renders it again, at full
	// price.
	TTL time.Duration
}

// DefaultCacheTTL is the TTL of a Cache whose options leave it unset.
const DefaultCacheTTL = time.Minute

// entryOverhead approximates the memory of one entry beyond its bytes (key,
// ETag, otter's node) so that a cache of tiny tiles is bounded too.
const entryOverhead = 160

// Cache holds rendered tiles in memory, bounded in bytes and by TTL, and
// coalesces concurrent renders of one tile into one query.
//
// Entries are keyed by (layer list, z, x, y) and hold the tile as rendered
// with its ETag, so that neither a hit nor a 304 hashes anything, and a
// client that does not accept gzip never pays for compression. The gzip
// form is made on the first request that accepts it, once per entry, and
// kept (when it is smaller) beside the tile. Empty tiles are cached too.
type Cache struct {
	store   *otter.Cache[cacheKey, *entry] // nil when MaxBytes is 0
	flights flights[flightKey, *entry]
	gzip    sync.Pool // *gzip.Writer
	// epoch counts InvalidateLayer calls: a render that began before one
	// neither keeps its tile nor is joined by a request that began after
	// it (see load).
	epoch atomic.Uint64
	// renders numbers renders as they begin: a tile is stored only over
	// one of an earlier render (see load).
	renders atomic.Uint64
}

type cacheKey struct {
	layers string // "a" or "a,b": the layer list as requested, which is its MVT layer order
	tile   maptile.Tile
}

func keyOf(layers []*Layer, t maptile.Tile) cacheKey {
	if len(layers) == 1 {
		return cacheKey{layers: layers[0].Name, tile: t}
	}
	names := make([]string, len(layers))
	for i, l := range layers {
		names[i] = l.Name
	}
	return cacheKey{layers: strings.Join(names, ","), tile: t}
}

// NewCache returns a cache sized by o.
func NewCache(o CacheOptions) (*Cache, error) {
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("tile cache: max_bytes %d must not be negative", o.MaxBytes)
	}
	if o.TTL < 0 {
		return nil, fmt.Errorf("tile cache: ttl %s must not be negative", o.TTL)
	}
	if o.TTL == 0 {
		o.TTL = DefaultCacheTTL
	}
	c := &Cache{}
	if o.MaxBytes > 0 {
		store, err := otter.New(&otter.Options[cacheKey, *entry]{
			MaximumWeight: uint64(o.MaxBytes),
			Weigher: func(k cacheKey, e *entry) uint32 {
				return uint32(min(int64(e.weight()+len(k.layers)+entryOverhead), 1<<32-1)) //nolint:gosec // G115: clamped to 1<<32-1 by min
			},
			ExpiryCalculator: renderExpiry{o.TTL},
		})
		if err != nil {
			return nil, fmt.Errorf("tile cache: %w", err)
		}
		c.store = store
	}
	return c, nil
}

// renderExpiry keeps a tile for the TTL from its render (or its layers'
// max_age, when less: entry.life): a new render that replaces an entry (a
// no-cache request's) starts a whole TTL, while adding an entry's gzip
// form — the same entry, re-weighed — leaves its expiry as it was, and so
// does a read.
type renderExpiry struct{ ttl time.Duration }

func (x renderExpiry) of(e *entry) time.Duration {
	// A hit goes out after its admission (a Redis call) with an Age in
	// whole seconds: kept until a second before its max_age (half of it,
	// if shorter), its Age stays under its max-age.
	if life := e.life - min(time.Second, e.life/2); e.life > 0 && life < x.ttl {
		return life
	}
	return x.ttl
}

func (x renderExpiry) ExpireAfterCreate(e otter.Entry[cacheKey, *entry]) time.Duration {
	return x.of(e.Value)
}

func (x renderExpiry) ExpireAfterUpdate(e otter.Entry[cacheKey, *entry], old *entry) time.Duration {
	if e.Value != old {
		return x.of(e.Value)
	}
	return e.ExpiresAfter()
}

func (x renderExpiry) ExpireAfterRead(e otter.Entry[cacheKey, *entry]) time.Duration {
	return e.ExpiresAfter()
}

// Bytes is the weight of the tiles held now (see CacheOptions.MaxBytes).
func (c *Cache) Bytes() int64 {
	if c == nil || c.store == nil {
		return 0
	}
	return int64(c.store.WeightedSize()) //nolint:gosec // G115: the weight is bounded by CacheOptions.MaxBytes, an int64
}

// Len is the number of tiles held now.
func (c *Cache) Len() int {
	if c == nil || c.store == nil {
		return 0
	}
	return c.store.EstimatedSize()
}

// InvalidateLayer drops every cached tile that contains the named layer,
// composites included, and reports how many it dropped. A render under
// way, of any layer, keeps nothing it started before the call, and a
// request after the call never waits for one: so once it returns, no
// tile drawn before it is answered from the cache. It walks the whole
// cache: call it after writes to a layer's table, not per request.
func (c *Cache) InvalidateLayer(name string) int {
	if c == nil {
		return 0
	}
	c.epoch.Add(1) // before the walk: see load
	if c.store == nil {
		return 0
	}
	n := 0
	for k := range c.store.Keys() {
		for part := range strings.SplitSeq(k.layers, ",") {
			if part == name {
				if _, ok := c.store.Invalidate(k); ok {
					n++
				}
				break
			}
		}
	}
	return n
}

func (c *Cache) get(k cacheKey) (*entry, bool) {
	if c.store == nil {
		return nil, false
	}
	return c.store.GetIfPresent(k)
}

// load renders the tile of k through render, coalescing concurrent calls
// (see flights), and stores the result, for life if that is less than the
// TTL. shared reports that another
// request's render was joined. Unless fresh, a tile cached meanwhile is
// taken instead of rendered.
//
// A render that began before an InvalidateLayer call does not keep its
// tile: it is stored only when no call came since the render began, and
// dropped again when one came while it was being stored (a call after
// that finds it in its walk).
func (c *Cache) load(ctx context.Context, k cacheKey, fresh bool, life time.Duration, render func(context.Context) (Rendered, error)) (e *entry, shared bool, err error) {
	epoch := c.epoch.Load()
	return c.flights.do(ctx, flightKey{k, pgcall.ShareOf(ctx), epoch, fresh}, func(ctx context.Context) (*entry, error) {
		if e, ok := c.get(k); ok && !fresh { // filled while this request was being priced
			return e, nil
		}
		began := c.renders.Add(1)
		tile, err := render(ctx)
		if err != nil {
			return nil, err
		}
		e := newEntry(tile)
		e.began, e.life = began, life
		if c.store != nil && c.epoch.Load() == epoch {
			// A render that began later (a no-cache request's, which
			// shares no flight with this one) and is stored already is
			// the newer tile: it stays.
			c.store.Compute(k, func(old *entry, found bool) (*entry, otter.ComputeOp) {
				if found && old.began > began {
					return old, otter.CancelOp
				}
				return e, otter.WriteOp
			})
			if c.epoch.Load() != epoch {
				c.store.Invalidate(k)
			}
		}
		return e, nil
	})
}

// flightKey names a render callers may share: the tile, the share of the
// pool it runs in (pgcall.ShareOf: the anonymous callers', or a key's
// own), so that a caller outside the share never waits on a render queued
// for a slot of it — two keys asking for one tile at once render it twice
// — and the cache's epoch when it began, so that a caller after an
// InvalidateLayer never waits on a render from before it. fresh keeps a
// Cache-Control: no-cache request out of a flight that may answer from the
// cache (one filled while it was being priced), and out of the cache's
// copy: it is rendered afresh, as it asked and paid for.
type flightKey struct {
	cacheKey
	share *pgcall.Share
	epoch uint64
	fresh bool
}

// entry is one rendered tile, ready to send.
type entry struct {
	began uint64 // the render's number (Cache.renders) when it began
	data  []byte // the tile; nil for an empty tile
	etag  string // strong validator of the tile, quoted
	// reduced is the X-Tile-Reduced header, "" when no layer was reduced.
	reduced string
	made    time.Time // when the render ended: a hit's Age counts from it
	// life is its layers' smallest max_age: under the cache's TTL, it
	// bounds how long the cache keeps it (renderExpiry), so that no hit
	// goes out stale (an Age at its Cache-Control max-age or past it).
	life time.Duration

	gzipOnce sync.Once
	gz       atomic.Pointer[[]byte] // the gzip form, once made, if smaller
}

// weight is the memory the entry's bytes take.
func (e *entry) weight() int {
	n := len(e.data) + len(e.etag)
	if gz := e.gz.Load(); gz != nil {
		n += len(*gz)
	}
	return n
}

// gzipETag is the validator of the gzip-encoded representation: a strong
// ETag names one sequence of bytes, so the two encodings need two. It
// names the compressor and its level too ("-gz4": gzipLevel), so that a
// client holding the bytes of another level or compressor (an earlier
// version's) is sent the new ones, not a 304.
func (e *entry) gzipETag() string { return e.etag[:len(e.etag)-1] + `-gz4"` }

// etagFor returns the ETag of the representation sent with or without gzip
// (gz), which If-Match and If-None-Match are compared with (RFC 9110
// §13.1.2: the tag of the selected representation). The other coding's
// tag names other bytes: a 304 for it would validate bytes the client
// cannot decode, or does not hold.
func (e *entry) etagFor(gz bool) string {
	if gz {
		return e.gzipETag()
	}
	return e.etag
}

// tileETag is a strong validator derived from the tile's bytes alone, so
// every geotoll instance gives the same tile the same ETag: the tile's
// XXH64 and its length. A validator needs no cryptographic strength (it
// only tells one version of a tile from another), and XXH64 hashes a 180
// KB z8 tile in 50–65 µs where SHA-256 took 410–490 µs (2 loaded cores).
// TileJSON and the catalog take theirs from it too (writeMeta).
func tileETag(tile []byte) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], xxhash.Sum64(tile))
	binary.BigEndian.PutUint32(b[8:], uint32(len(tile))) //nolint:gosec // G115: the ETag keeps the low 32 bits of the length; tiles are far smaller
	return `"` + base64.RawURLEncoding.EncodeToString(b[:]) + `"`
}

// gzipLevel is the tiles' gzip level (klauspost/compress/gzip): see
// Cache.gzipped.
const gzipLevel = 4

// minGzip is the smallest tile worth compressing: below it gzip's own 18
// bytes of framing eat the gain.
const minGzip = 256

// newEntry hashes the tile. It does not compress it: see Cache.gzipped.
func newEntry(r Rendered) *entry {
	tile := r.MVT
	e := &entry{data: tile, etag: tileETag(tile), reduced: reducedHeader(r.Reduced), made: time.Now()}
	if len(tile) == 0 {
		e.data = nil
	}
	return e
}

// gzipped returns the gzip form of the tile of k, making it on the first
// call for the entry and keeping it; ok is false when the tile is too small
// for gzip to pay, gzip would not make it smaller, or the cache keeps
// nothing (MaxBytes 0): a tile rendered for one answer would be compressed
// for that answer alone, which costs the server more than it saves (a
// dense z14 tile ~4 KB: ~50 µs of a ~700 µs tile; a z8–10 tile ~180 KB:
// 1.5–2.5 ms of ~11 ms). klauspost/compress's gzip at level 4: the first
// gzip client of a tile waits for the compression, and every gzip client
// gets its bytes. BenchmarkTileCompression (CPU time, against the
// standard library's BestSpeed, which the cache used before): 0.935–0.978
// × the bytes for 0.47–0.73 × the CPU on the demo's tiles; the generalised
// z12 tile of Berlin, 98 KB, the largest of Berlin's z0–z14, took the
// standard library 0.8 ms for 37 % of the size.
func (c *Cache) gzipped(k cacheKey, e *entry) (gz []byte, ok bool) {
	if c.store == nil || len(e.data) < minGzip {
		return nil, false
	}
	e.gzipOnce.Do(func() {
		var buf bytes.Buffer
		buf.Grow(len(e.data) / 3)
		zw, _ := c.gzip.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(&buf, gzipLevel) // a valid level: no error
		} else {
			zw.Reset(&buf)
		}
		defer c.gzip.Put(zw)
		// Writes to a bytes.Buffer do not fail.
		if _, err := zw.Write(e.data); err != nil || zw.Close() != nil || buf.Len() >= len(e.data) {
			return
		}
		z := bytes.Clone(buf.Bytes()) // exact size: the cache weighs len
		e.gz.Store(&z)
		if c.store != nil { // re-weigh the entry, if it is still the cached one
			c.store.ComputeIfPresent(k, func(old *entry) (*entry, otter.ComputeOp) {
				if old != e {
					return old, otter.CancelOp
				}
				return e, otter.WriteOp
			})
		}
	})
	if z := e.gz.Load(); z != nil {
		return *z, true
	}
	return nil, false
}
