package tiles

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/klauspost/compress/gzip"
	"github.com/paulmach/orb/maptile"
	"golang.org/x/sync/singleflight"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/etag"
	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/negotiate"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
)

// ContentType is the media type of a Mapbox Vector Tile.
const ContentType = "application/vnd.mapbox-vector-tile"

// Demand describes what a tile request asks of the database, so that the
// Gate can price it before anything runs. Layers is never empty: a tile
// that reads no layer (a composite between its layers' zooms) is a
// CacheHit of the layers it names.
type Demand struct {
	Layers []*Layer
	Tile   maptile.Tile
	// CacheHit is set when the tile (or its 304) is served from the tile
	// cache, or is the empty tile of a composite between its layers'
	// zooms: the database does no work, so the price should be the base
	// price alone.
	CacheHit bool
}

// Gate admits or refuses a priced request. When it refuses, it has written
// the response (429, 401…) itself. It sets budget headers on w either way.
type Gate interface {
	AdmitTile(w http.ResponseWriter, r *http.Request, d Demand) bool
}

// Renderer renders tiles; *Store is the production one. A Renderer that
// also has Render(ctx, layers, t) (Rendered, error), as *Store does, is
// asked through it, so that responses can say which layers were reduced
// to fit their byte budget.
type Renderer interface {
	Tile(ctx context.Context, layers []*Layer, t maptile.Tile) ([]byte, error)
}

// budgetRenderer is a Renderer that reports reductions (see Renderer).
type budgetRenderer interface {
	Render(ctx context.Context, layers []*Layer, t maptile.Tile) (Rendered, error)
}

// render renders through h.Store, with its reductions when it reports them.
func (h *Handler) render(ctx context.Context, layers []*Layer, t maptile.Tile) (Rendered, error) {
	if br, ok := h.Store.(budgetRenderer); ok {
		return br.Render(ctx, layers, t)
	}
	b, err := h.Store.Tile(ctx, layers, t)
	return Rendered{MVT: b}, err
}

// Describer describes a layer's data for TileJSON; *Store is the
// production one.
type Describer interface {
	Describe(ctx context.Context, l *Layer) (LayerInfo, error)
}

// Observer receives the tile path's measurements; server's Prometheus
// metrics implement it. Its methods must be cheap and safe for concurrent
// use.
type Observer interface {
	// TileCache counts one tile request by how it was served: "hit" (from
	// the cache), "miss" (rendered for it), "shared" (it waited for
	// another request's render of the same tile) or "empty" (a composite
	// between its layers' zooms: nothing to read).
	TileCache(result string)
	// TileQuery times one layer's query within a tile render.
	TileQuery(layer string, z maptile.Zoom, d time.Duration)
}

// Handler serves GET /tiles/{layer}/{z}/{x}/{y}.mvt, and through TileJSON
// and Index the layers' metadata.
//
// A tile request has no parameters beyond its address: the feature cap,
// buffer and extent are per-layer configuration, never client overrides,
// so a tile's price and its cache key depend on the address alone.
//
// With a Cache, the cache is asked before the Gate, so that a hit (or a 304
// answered from the cache) is priced as a hit (Demand.CacheHit). A miss is
// priced in full, then rendered once however many requests in one share of
// the pool want the tile at the same moment. Requests that join a render
// already running were priced as misses too (the price is fixed before
// anything runs); the render's database time is billed to one of them
// (flights), and the others settle at their base price, as a hit does.
type Handler struct {
	Catalog *Catalog
	Store   Renderer
	Gate    Gate
	Logger  *slog.Logger
	// Cache holds rendered tiles and coalesces concurrent misses; nil
	// renders every request, on the request's own context.
	Cache *Cache
	// Describer gives TileJSON its bounds and field types; nil gives the
	// whole world and "String" fields.
	Describer Describer
	// Proxies are the trusted reverse proxies whose forwarded host and
	// scheme TileJSON's tile URLs honour; nil trusts none.
	Proxies *forwarded.Trusted
	// BasePath prefixes the paths of the URLs the catalog and TileJSON
	// write ("/maps" behind a proxy serving geotoll there).
	BasePath string
	// PublicURL, when set, is the base of every URL the catalog and
	// TileJSON write ("https://tiles.example.com/maps": scheme, host and
	// path, BasePath included; one trailing "/" is dropped), instead of the
	// scheme and host of the request and BasePath: the request's Host and
	// forwarding headers are then not read, and the documents do not Vary
	// on them. It is taken as given (the configuration checks it).
	PublicURL string
	// Observer, if set, counts cache results.
	Observer Observer

	infoMu     sync.Mutex
	info       map[*Layer]LayerInfo       // Describe results, kept once they succeed
	infoFailed map[*Layer]describeFailure // when Describe last failed, to back off
	describing singleflight.Group         // one Describe per layer at a time
}

// Route vars the handler reads (see server's router).
const (
	VarLayer = "layer"
	VarZ     = "z"
	VarX     = "x"
	VarY     = "y" // "{y}.mvt" or "{y}.pbf"
)

// Request is a parsed, validated tile request.
type Request struct {
	// Layers are the layers the tile reads: those Named that are served
	// at Tile.Z, in the address's order. A composite asked at a zoom
	// between its layers' ranges has none: its tile is empty.
	Layers []*Layer
	// Named are the layers the address names, in its order.
	Named []*Layer
	Tile  maptile.Tile
}

// ParseRequest validates a tile address: layer list, z, x and "{y}.{ext}".
// Errors are problems: 400 malformed, 404 unknown layer or format, 422 out
// of range. A composite is served from the least minzoom of its layers to
// the greatest maxzoom (its TileJSON advertises that range, up to the
// deepest data_maxzoom); a layer whose own range excludes z is left out
// (as martin does), so a map asking one URL for several layers gets those
// in range — and at a zoom between their ranges, none: an empty tile. A
// zoom outside the composite's range is a 422.
func (c *Catalog) ParseRequest(layer, z, x, yext string) (Request, error) {
	ys, err := SplitFormat(yext)
	if err != nil {
		return Request{}, err
	}
	t, err := ParseTile(z, x, ys)
	if err != nil {
		return Request{}, err
	}
	layers, err := c.Resolve(layer)
	if err != nil {
		return Request{}, err
	}
	lo, hi := int(MaxZoom), 0
	in := layers[:0:0]
	for _, l := range layers {
		lo, hi = min(lo, l.MinZoom), max(hi, l.MaxZoom)
		if l.ZoomInRange(t.Z) {
			in = append(in, l)
		}
	}
	if int(t.Z) < lo || int(t.Z) > hi {
		if len(layers) == 1 {
			return Request{}, problem.Range("z", "layer %q is served at zoom %d..%d, not %d", layers[0].Name, lo, hi, t.Z)
		}
		return Request{}, problem.Range("z", "the layers of %q are served at zoom %d..%d, not %d", truncate(layer, 64), lo, hi, t.Z)
	}
	return Request{Layers: in, Named: layers, Tile: t}, nil
}

// emptyTile is the tile of a composite at a zoom none of its layers
// serves: nothing to read, nothing to cache.
var emptyTile = newEntry(Rendered{})

// parse reads what a tile request asks — the tile and its layers, and its
// conditional headers — before anything is priced: an error is the
// request's 4xx (or a layer's mismatch with the database).
func (h *Handler) parse(r *http.Request) (Request, etag.Conditions, error) {
	vars := mux.Vars(r)
	req, err := h.Catalog.ParseRequest(vars[VarLayer], vars[VarZ], vars[VarX], vars[VarY])
	if err == nil {
		err = misfit(req.Named)
	}
	if err != nil {
		return Request{}, etag.Conditions{}, err
	}
	conds, err := etag.ParseConditions(r.Header)
	return req, conds, err
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, conds, err := h.parse(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if len(req.Layers) == 0 {
		// A composite between its layers' zooms: an empty tile, known from
		// the address alone. No query runs, so it is priced as a cache hit
		// of the layers it names: the Gate still checks the caller's key
		// and budget, and answers a dry run.
		if !h.Gate.AdmitTile(w, r, Demand{Layers: req.Named, Tile: req.Tile, CacheHit: true}) {
			return
		}
		h.observe("empty")
		h.write(w, r, conds, req.Named, cacheKey{}, emptyTile, "")
		return
	}
	key := keyOf(req.Layers, req.Tile)
	if h.Cache == nil {
		if !h.Gate.AdmitTile(w, r, Demand{Layers: req.Layers, Tile: req.Tile}) {
			return
		}
		tile, err := h.render(r.Context(), req.Layers, req.Tile)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.observe("miss")
		h.write(w, r, conds, req.Layers, key, newEntry(tile), "MISS")
		return
	}

	// The cache is asked before the gate, so that a hit is priced as one —
	// unless the request asks for a fresh render (Cache-Control: no-cache),
	// which it pays in full.
	fresh := noCache(r.Header)
	if e, ok := h.Cache.get(key); ok && !fresh {
		if !h.Gate.AdmitTile(w, r, Demand{Layers: req.Layers, Tile: req.Tile, CacheHit: true}) {
			return
		}
		h.observe("hit")
		h.write(w, r, conds, req.Layers, key, e, "HIT")
		return
	}
	if !h.Gate.AdmitTile(w, r, Demand{Layers: req.Layers, Tile: req.Tile}) {
		return
	}
	deadline, hasDeadline := r.Context().Deadline()
	// Kept by the max-age the answers say: whole seconds.
	e, shared, err := h.Cache.load(r.Context(), key, fresh, maxAge(req.Layers).Truncate(time.Second), func(ctx context.Context) (Rendered, error) {
		// The render outlives the request that started it while others
		// wait for it (see flights), so it needs a bound of its own: the
		// statement timeout, plus time to get a connection — and the
		// starting request's deadline, so that the render answers (with a
		// 503 of its own) before the requests waiting for it must.
		bound := time.Now().Add(statementTimeout(req.Layers) + renderGrace)
		if hasDeadline && deadline.Before(bound) {
			bound = deadline
		}
		ctx, cancel := context.WithDeadline(ctx, bound)
		defer cancel()
		return h.render(ctx, req.Layers, req.Tile)
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if shared {
		h.observe("shared")
	} else {
		h.observe("miss")
	}
	h.write(w, r, conds, req.Layers, key, e, "MISS")
}

// renderGrace is what a shared render may take beyond its statement
// timeout: waiting for a pooled connection and the round trips around the
// query.
const renderGrace = 5 * time.Second

// statementTimeout bounds a render of layers: Store.Tile runs them one
// after another, each under its own statement timeout.
func statementTimeout(layers []*Layer) time.Duration {
	var d time.Duration
	for _, l := range layers {
		d += l.StatementTimeout
	}
	return d
}

// preconditionFailed answers an If-Match that names another
// representation than the one the answer would send.
var preconditionFailed = &problem.Error{Code: problem.PreconditionFailed, Param: "If-Match",
	Detail: "If-Match names neither * nor the ETag of the current representation"}

// write sends a rendered tile: 412 when If-Match names another (strong
// comparison), 304 when If-None-Match names it, 204 when it
// is empty, else 200 — gzip-coded when the client accepts gzip, the
// handler's Cache keeps tiles, and gzip makes the tile smaller (compressed
// once per cached tile; a client that does not accept gzip never pays for
// it, nor does anyone for a tile that is not kept), and also when the
// client refuses identity and accepts gzip (compressed for that answer;
// see negotiate.Codings.SendGzip). Every answer carries
// ETag, Cache-Control, Vary: Accept-Encoding and X-Cache (unless cache is
// "": a tile neither cached nor rendered), X-Tile-Reduced when a layer
// was reduced to fit its byte budget, and Age on a hit drawn a second or
// more before.
func (h *Handler) write(w http.ResponseWriter, r *http.Request, conds etag.Conditions, layers []*Layer, key cacheKey, e *entry, cache string) {
	hdr := w.Header()
	body, gz := e.data, false
	codings := negotiate.Accepted(r.Header.Values("Accept-Encoding"))
	if h.Cache != nil && codings.Gzip {
		if z, ok := h.Cache.gzipped(key, e); ok {
			body, gz = z, true
		}
	}
	if !gz && len(e.data) > 0 && codings.SendGzip(false) {
		body, gz = gzipTile(e.data), true
	}
	// Before the tile's own headers: a problem carries none of them.
	if conds.MatchFails(e.etagFor(gz)) {
		problem.Write(w, r, preconditionFailed)
		return
	}
	if cache != "" {
		hdr.Set("X-Cache", cache)
	}
	if cache == "HIT" {
		// How long ago the tile was drawn (RFC 9111 §5.1), so that a
		// cache downstream keeps it for max-age from its render, not from
		// this answer.
		if age := time.Since(e.made); age >= time.Second {
			hdr.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
		}
	}
	hdr.Set("Cache-Control", cacheControl(layers))
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("ETag", e.etagFor(gz))
	if e.reduced != "" {
		hdr.Set(HeaderReduced, e.reduced)
	}
	if conds.NoneMatchFails(e.etagFor(gz)) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if len(e.data) == 0 {
		// An empty tile is 204 No Content (as martin does): MapLibre,
		// OpenLayers and Leaflet all draw it as an empty tile.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if gz {
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("Content-Type", ContentType)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// gzipTile is tile gzip-coded as Cache.gzipped codes it (the same bytes,
// so the same ETag), for a client that refuses identity when the cache
// keeps no gzip form of the tile.
func gzipTile(tile []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzipLevel) // a valid level: no error
	// Writes to a bytes.Buffer do not fail.
	_, _ = zw.Write(tile)
	_ = zw.Close()
	return buf.Bytes()
}

// cacheControl is the Cache-Control of a tile of layers: public, for
// maxAge.
func cacheControl(layers []*Layer) string {
	return "public, max-age=" + strconv.FormatInt(int64(maxAge(layers)/time.Second), 10)
}

// maxAge is the smallest of the layers' MaxAge: how long a client may
// keep their tile, and the cache too.
func maxAge(layers []*Layer) time.Duration {
	var age time.Duration
	for i, l := range layers {
		if i == 0 || l.MaxAge < age {
			age = l.MaxAge
		}
	}
	return age
}

func (h *Handler) observe(result string) {
	if h.Observer != nil {
		h.Observer.TileCache(result)
	}
}

// fail answers a failed tile request. A database statement still running
// behind err is waited for after the answer is sent (pgcall.Respond), so
// the request — and its in-flight slot — lasts as long as the database
// works for it.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.From(err)
	level := slog.LevelWarn
	switch ctxErr := r.Context().Err(); {
	case errors.Is(ctxErr, context.Canceled):
		// The client hung up: not a server fault, and nobody reads this
		// response.
		p = &problem.Error{Code: problem.Unavailable, Detail: "request cancelled", Err: err}
		level = slog.LevelInfo
	case errors.Is(ctxErr, context.DeadlineExceeded) && p.Code == problem.Internal:
		// The request's deadline passed while it waited for a render.
		p = &problem.Error{Code: problem.Timeout, Detail: "the tile was not ready within the request's time limit; try again later",
			RetryAfter: 1, Err: err}
	case p.Code == problem.Internal:
		level = slog.LevelError
	}
	var stopping *pgcall.Stopping
	h.logger().LogAttrs(r.Context(), level, "tile failed",
		slog.String("path", apikeys.RedactPath(r.URL.Path)), slog.String("code", string(p.Code)), slog.Any("err", err),
		slog.Bool("db_still_running", errors.As(err, &stopping)))
	pgcall.Respond(w, err, func() { problem.Write(w, r, p) })
}

func (h *Handler) logger() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}
