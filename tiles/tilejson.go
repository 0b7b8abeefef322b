package tiles

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/geotoll/geotoll/internal/etag"
	"github.com/geotoll/geotoll/internal/forwarded"
	"github.com/geotoll/geotoll/internal/pgcall"
	"github.com/geotoll/geotoll/problem"
	queries "github.com/geotoll/geotoll/sql"
)

// LayerInfo describes the data behind a layer, for TileJSON.
type LayerInfo struct {
	// Bounds are west, south, east, north in degrees.
	Bounds [4]float64
	// Fields maps each property to "Number", "String" or "Boolean".
	Fields map[string]string

	// What the Handler keeps with a description (see Handler.describe):
	// when it was read, and the state of the layer's data it describes.
	readAt time.Time
	data   layerData
}

// layerData is what a layer's description depends on that the server
// itself sees change: the writes the server made to the layer's table
// (Catalog.Written) and the plan Catalog.Refresh installed — the serving
// storage it reads and, for a followed layer, its table's change
// detector, which moves when the table is written, by another replica too.
// These are the changes that drop the layer's cached tiles
// (Cache.InvalidateLayer).
type layerData struct {
	writes uint64
	plan   *plan
}

// dataOf is the state of l's data now.
func dataOf(l *Layer) layerData { return layerData{writes: l.state.writes.Load(), plan: l.plan()} }

// same reports whether d and o are the same state of a layer's data. A
// Refresh installs a new plan every time; one reading the same storage
// (and the same table, for a followed layer) is the same data.
func (d layerData) same(o layerData) bool {
	if d.writes != o.writes {
		return false
	}
	if d.plan == o.plan {
		return true
	}
	return d.plan != nil && o.plan != nil && d.plan.kind == o.plan.kind && d.plan.table == o.plan.table &&
		sameStorage(d.plan.storage, o.plan.storage)
}

// WorldBounds are the bounds of the whole web-mercator square, in degrees.
func WorldBounds() [4]float64 { return [4]float64{-180, -85.051129, 180, 85.051129} }

// Describe reads a layer's bounds and property types. The bounds come from
// the planner's statistics (ST_EstimatedExtent, no scan) or, when there are
// none, from ST_Extent under the layer's statement timeout; a table with no
// rows has WorldBounds. A followed layer (Catalog.Follow: the server writes
// its table, as the fence admin writes the fences) reads ST_Extent first:
// the statistics follow its writes only at the table's next ANALYZE, which
// autovacuum runs after some fifty rows changed, so a fence just written
// could lie outside them — and a map requests no tiles outside a layer's
// bounds. Each query is a guarded read of its own (pgcall.DB.Read), so one
// failing does not stop the next.
func (s *Store) Describe(ctx context.Context, l *Layer) (LayerInfo, error) {
	info := LayerInfo{Bounds: WorldBounds(), Fields: make(map[string]string, len(l.Properties))}
	table := l.tableIdent().Sanitize() // text for to_regclass, bound as a value
	fields := make(map[string]string, len(l.Properties))
	db := s.db()
	_, err := db.Read(ctx, pgcall.Statement{
		SQL: fieldsSQL, Args: []any{table, l.Properties}, Timeout: l.StatementTimeout,
		Scan: func(rows pgx.Rows) error {
			var name, kind string
			_, err := pgx.ForEachRow(rows, []any{&name, &kind}, func() error {
				fields[name] = kind
				return nil
			})
			return err
		},
	})
	if err != nil {
		return LayerInfo{}, err
	}
	for _, p := range l.Properties {
		info.Fields[p] = "String"
		if kind, ok := fields[p]; ok {
			info.Fields[p] = kind
		}
	}
	var b [4]float64
	scan := func(q string, args ...any) error {
		_, err := db.Read(ctx, pgcall.Statement{SQL: q, Args: args, Timeout: l.StatementTimeout,
			Scan: pgcall.One(&b[0], &b[1], &b[2], &b[3])})
		return err
	}
	estimate := func() error { return scan(extentEstimateSQL, table, l.GeometryColumn, l.SRID) }
	exact := func() error { return scan(l.extentSQL, l.SRID) }
	if l.state.follow.Load() {
		// A scan that fails (its statement timeout) leaves the statistics.
		if err = exact(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			err = estimate()
		}
	} else if err = estimate(); err != nil {
		// ST_EstimatedExtent fails on some valid names (it re-parses
		// them), and has nothing before the table's first ANALYZE: then
		// scan the table.
		err = exact()
	}
	switch {
	case err == nil:
		info.Bounds = clampBounds(b)
	case errors.Is(err, pgx.ErrNoRows): // no rows, no extent
	default:
		return LayerInfo{}, err
	}
	return info, nil
}

var (
	fieldsSQL         = queries.MustRead("layer_fields.sql")
	extentEstimateSQL = queries.MustRead("layer_extent_estimate.sql")
)

func clampBounds(b [4]float64) [4]float64 {
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return WorldBounds()
		}
		lim := WorldBounds()[2]
		if i%2 == 1 {
			lim = WorldBounds()[3]
		}
		// To the microdegree, outward: bounds rounded in would leave a
		// sliver of data outside them, where clients ask for no tiles.
		// A value on a microdegree already (to float64's error) stays.
		round := math.Floor
		if i >= 2 {
			round = math.Ceil
		}
		x := v * 1e6
		if math.Abs(x-math.Round(x)) < 1e-6 {
			x = math.Round(x)
		}
		b[i] = max(-lim, min(lim, round(x)/1e6))
	}
	if b[0] > b[2] || b[1] > b[3] {
		return WorldBounds()
	}
	return b
}

// describeBackoff is how long a failed Describe is not retried: TileJSON is
// unpriced, so a failing (slow) Describe must not be something a client can
// make the database do on every request. A Describe of any layer that
// succeeds ends every layer's backoff: the database answers again.
const describeBackoff = 30 * time.Second

// describeMaxAge is how long a layer's description is kept before TileJSON
// reads it again: the default tiles.storage_refresh, how often the server
// looks at what the layers read, and so the staleness their tiles already
// accept. Bounds come from the planner's statistics, which move when
// autovacuum analyzes the table: data loaded into it reaches the bounds at
// most this long after that ANALYZE. A description is also read again at
// once when the layer's data changed as the server sees it (layerData).
const describeMaxAge = 30 * time.Second

// described returns the description of l kept by an earlier Describe, if
// any (kept), whether it is still fresh (younger than describeMaxAge, of
// the layer's data as it is), and whether Describe failed for l less than
// describeBackoff ago.
func (h *Handler) described(l *Layer) (info LayerInfo, kept, fresh, backingOff bool) {
	h.infoMu.Lock()
	defer h.infoMu.Unlock()
	info, kept = h.info[l]
	fresh = kept && time.Since(info.readAt) < describeMaxAge && info.data.same(dataOf(l))
	f, failed := h.infoFailed[l]
	return info, kept, fresh, failed && time.Since(f.at) < describeBackoff
}

// describeFailure is when Describe last failed for a layer, and whether
// it failed by its statement timeout: the layer's own slowness, which a
// description of another layer does not end.
type describeFailure struct {
	at   time.Time
	slow bool
}

// errDescribeBackoff is a shared describe's answer when Describe failed
// for the layer meanwhile: its callers use what they would have had they
// looked after the failure.
var errDescribeBackoff = errors.New("describe failed recently")

// fallbackInfo is what TileJSON says of a layer it could not describe:
// the whole world, and every property a "String".
func fallbackInfo(l *Layer) LayerInfo {
	info := LayerInfo{Bounds: WorldBounds(), Fields: make(map[string]string, len(l.Properties))}
	for _, p := range l.Properties {
		info.Fields[p] = "String"
	}
	return info
}

// describe returns the layer's info, asking the Describer when it has no
// fresh description of it (see described) and keeping the answer once it
// succeeds. Concurrent requests share one Describe, and a request that
// looked before a Describe ended takes its answer. When Describe fails,
// the description kept before (stale, but of the layer's data) is served,
// or else the fallback (fallbackInfo) — described false: an answer that
// no cache may keep —, for describeBackoff before the database is asked
// again. Without a Describer every layer has the fallback, described.
func (h *Handler) describe(ctx context.Context, l *Layer) (info LayerInfo, described bool) {
	if h.Describer == nil {
		return fallbackInfo(l), true
	}
	kept, ok, fresh, backingOff := h.described(l)
	if fresh {
		return kept, true
	}
	orKept := func() (LayerInfo, bool) {
		if ok {
			return kept, true
		}
		return fallbackInfo(l), false
	}
	if backingOff {
		return orKept()
	}
	v, err, _ := h.describing.Do(l.Name, func() (any, error) {
		// Looked up again: a Describe that ended after this caller looked
		// (and before it got here) has kept its answer, or its failure.
		if info, _, fresh, backingOff := h.described(l); fresh {
			return info, nil
		} else if backingOff {
			return nil, errDescribeBackoff
		}
		return h.describeNow(ctx, l)
	})
	if err != nil {
		if !errors.Is(err, errDescribeBackoff) {
			msg := "describe layer failed; TileJSON uses world bounds"
			if ok {
				msg = "describe layer failed; TileJSON keeps the layer's last description"
			}
			h.logger().LogAttrs(ctx, slog.LevelWarn, msg,
				slog.String("layer", l.Name), slog.Any("err", err), slog.Duration("retry_in", describeBackoff))
		}
		return orKept()
	}
	return v.(LayerInfo), true
}

// describeNow runs Describe for l and keeps its answer, or the time of
// its failure. The state of the layer's data is taken before the read: a
// change while it runs leaves the description stale at once.
func (h *Handler) describeNow(ctx context.Context, l *Layer) (LayerInfo, error) {
	data := dataOf(l)
	// Not the request's context: the answer is shared, and one caller
	// hanging up must not fail it for the others. Describe bounds its own
	// queries with statement timeouts.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.StatementTimeout+renderGrace)
	defer cancel()
	info, err := h.Describer.Describe(dctx, l)
	h.infoMu.Lock()
	defer h.infoMu.Unlock()
	if err != nil {
		if h.infoFailed == nil {
			h.infoFailed = make(map[*Layer]describeFailure)
		}
		h.infoFailed[l] = describeFailure{at: time.Now(), slow: problem.From(err).Code == problem.Timeout}
		return LayerInfo{}, err
	}
	if h.info == nil {
		h.info = make(map[*Layer]LayerInfo)
	}
	info.readAt, info.data = time.Now(), data
	h.info[l] = info
	// The database answers: no layer waits for its backoff, unless its own
	// description timed out (a client must not make the database run it
	// again by asking for another layer).
	maps.DeleteFunc(h.infoFailed, func(_ *Layer, f describeFailure) bool { return !f.slow })
	delete(h.infoFailed, l)
	return info, nil
}

// tileJSON is a TileJSON 3.0.0 document
// (https://github.com/mapbox/tilejson-spec/tree/master/3.0.0).
type tileJSON struct {
	TileJSON     string        `json:"tilejson"`
	Name         string        `json:"name"`
	Version      string        `json:"version"`
	Scheme       string        `json:"scheme"`
	Tiles        []string      `json:"tiles"`
	MinZoom      int           `json:"minzoom"`
	MaxZoom      int           `json:"maxzoom"`
	Bounds       [4]float64    `json:"bounds"`
	Center       [3]float64    `json:"center"`
	VectorLayers []vectorLayer `json:"vector_layers"`
}

type vectorLayer struct {
	ID      string            `json:"id"`
	Fields  map[string]string `json:"fields"`
	MinZoom int               `json:"minzoom"`
	MaxZoom int               `json:"maxzoom"`
	layerMeta
}

// layerMeta is what TileJSON's vector layers and the catalog add about a
// layer beyond TileJSON: its geometry kind, the deepest zoom the server
// answers (clients overzoom from maxzoom, the data's deepest zoom), and
// the serving storage it reads, with the age of each.
type layerMeta struct {
	GeometryKind  Kind          `json:"geometry_kind"`
	ServedMaxZoom int           `json:"served_maxzoom"`
	Storage       []storageMeta `json:"storage"`
	// Heavy: the layer's largest rows exceed its pieces' vertices and it
	// reads no pieces (see Layer.Heavy).
	Heavy *Heavy `json:"heavy,omitempty"`
}

type storageMeta struct {
	StorageSummary
	AgeSeconds int64 `json:"age_seconds"`
}

// fieldsOf is what every feature of l's tiles carries: its properties
// (fields, as described) and, on a point layer, point_count — the
// cluster's count, which MapLibre styles read.
func fieldsOf(l *Layer, fields map[string]string) map[string]string {
	if l.Kind() != KindPoint {
		return fields
	}
	out := make(map[string]string, len(fields)+1)
	maps.Copy(out, fields)
	out[PointCount] = "Number"
	return out
}

// propertiesOf is fieldsOf's names, in configuration order (point_count
// last).
func propertiesOf(l *Layer) []string {
	props := append([]string{}, l.Properties...)
	if l.Kind() == KindPoint {
		props = append(props, PointCount)
	}
	return props
}

func metaOf(l *Layer, now time.Time) layerMeta {
	m := layerMeta{GeometryKind: l.Kind(), ServedMaxZoom: l.MaxZoom, Storage: []storageMeta{}, Heavy: l.Heavy()}
	for _, s := range l.StorageSummary() {
		m.Storage = append(m.Storage, storageMeta{StorageSummary: s, AgeSeconds: int64(s.Age(now) / time.Second)})
	}
	return m
}

// TileJSON serves GET /tiles/{layer}.json: the TileJSON 3.0.0 document of
// one layer or of a composite "a,b". Its maxzoom is the deepest
// DataMaxZoom of the layers, so that clients overzoom instead of asking
// deeper tiles that add nothing; each vector layer also carries its
// geometry kind, served_maxzoom and serving storage (with age_seconds).
// Its tile URL is absolute: below PublicURL when it is set, else built
// from the host and scheme the client used (forwarded ones only from
// trusted proxies; see urls). It carries the request's ?key= along for
// map clients that cannot set headers — such a response is private. It
// is not priced: the database answers it at most once per layer every
// describeMaxAge, and again when the layer's data changed (see describe).
// A document with a layer the database could not describe (the fallback's
// world bounds and "String" fields) is no-store, without an ETag: no
// cache keeps it once the database answers again. See writeMeta for its
// caching and conditional GETs.
func (h *Handler) TileJSON() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		layers, err := h.Catalog.Resolve(mux.Vars(r)[VarLayer])
		if err == nil {
			err = misfit(layers) // its bounds and fields are its table's too
		}
		var conds etag.Conditions
		if err == nil {
			conds, err = etag.ParseConditions(r.Header)
		}
		if err != nil {
			problem.Write(w, r, err)
			return
		}
		base, query, err := h.urls(r)
		if err != nil {
			problem.Write(w, r, err)
			return
		}
		names := make([]string, len(layers))
		doc := tileJSON{TileJSON: "3.0.0", Version: "1.0.0", Scheme: "xyz", MinZoom: int(MaxZoom), MaxZoom: 0}
		now := time.Now()
		scope := metaPublic
		if query != "" {
			scope = metaPrivate
		}
		for i, l := range layers {
			names[i] = l.Name
			info, described := h.describe(r.Context(), l)
			if !described && scope == metaPublic {
				scope = metaUnstored
			}
			if i == 0 {
				doc.Bounds = info.Bounds
			} else {
				doc.Bounds = union(doc.Bounds, info.Bounds)
			}
			// A composite is served from the least minzoom of its layers
			// to the greatest maxzoom (with the layers in range; between
			// their ranges, an empty tile: see ParseRequest), and its data
			// ends at the deepest of theirs: clients overzoom from there.
			doc.MinZoom = min(doc.MinZoom, l.MinZoom)
			doc.MaxZoom = max(doc.MaxZoom, l.DataMaxZoom)
			doc.VectorLayers = append(doc.VectorLayers, vectorLayer{ID: l.Name, Fields: fieldsOf(l, info.Fields),
				MinZoom: l.MinZoom, MaxZoom: l.DataMaxZoom, layerMeta: metaOf(l, now)})
		}
		list := strings.Join(names, ",")
		doc.Name = list
		doc.Tiles = []string{base + "/tiles/" + list + "/{z}/{x}/{y}.mvt" + query}
		doc.Center = center(doc.Bounds, doc.MinZoom, doc.MaxZoom)
		h.writeMeta(w, r, conds, scope, doc)
	})
}

// catalogEntry is one layer of the catalog at /tiles.
type catalogEntry struct {
	Name       string   `json:"name"`
	MinZoom    int      `json:"minzoom"`
	MaxZoom    int      `json:"maxzoom"` // the data's deepest zoom (DataMaxZoom)
	Properties []string `json:"properties"`
	TileJSON   string   `json:"tilejson"`
	Tiles      string   `json:"tiles"`
	layerMeta
}

// Index serves GET /tiles: every layer with its zoom range (maxzoom is the
// data's deepest zoom, served_maxzoom the deepest answered), properties,
// URLs, geometry kind and serving storage, in configuration order. It
// never touches the database. Its URLs are written as TileJSON's are.
func (h *Handler) Index() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conds, err := etag.ParseConditions(r.Header)
		if err != nil {
			problem.Write(w, r, err)
			return
		}
		base, query, err := h.urls(r)
		if err != nil {
			problem.Write(w, r, err)
			return
		}
		out := struct {
			Layers []catalogEntry `json:"layers"`
		}{Layers: []catalogEntry{}}
		now := time.Now()
		for _, l := range h.Catalog.Layers() {
			out.Layers = append(out.Layers, catalogEntry{
				Name: l.Name, MinZoom: l.MinZoom, MaxZoom: l.DataMaxZoom, Properties: propertiesOf(l),
				TileJSON:  base + "/tiles/" + l.Name + ".json" + query,
				Tiles:     base + "/tiles/" + l.Name + "/{z}/{x}/{y}.mvt" + query,
				layerMeta: metaOf(l, now),
			})
		}
		scope := metaPublic
		if query != "" {
			scope = metaPrivate
		}
		h.writeMeta(w, r, conds, scope, out)
	})
}

// urls returns the base of the URLs the documents write and the query
// string to carry into them ("?key=…" or ""; a key given twice is a 400). The base is PublicURL when
// it is set: then nothing the client sends chooses it. Otherwise it is
// the scheme and host the client used (forwarded.Trusted.HostProto:
// forwarded ones only from trusted proxies, and only when they are valid)
// followed by BasePath; a request without a Host (HTTP/1.0) gets
// "localhost".
//
// A request Host that is not a valid host[:port] — "example.com:abc", a
// port of 0 or above 65535 — is a 400 problem rather than a "localhost"
// fallback: RFC 9110 §7.2 makes a Host with an invalid field value a bad
// request, the client learns what is wrong instead of getting a document
// whose URLs lead nowhere, and nothing is sent that a shared cache could
// keep and hand to others (a 400 is not heuristically cacheable, RFC 9110
// §15.1), where a "localhost" document would be public for 60 s.
// Echoing it was the flaw: the host goes verbatim into the URLs of a
// public document. Only these documents answer so; the other routes do
// not read the Host. An invalid forwarded host is not the client's
// request but a proxy's header: it is ignored (HostProto), as before.
func (h *Handler) urls(r *http.Request) (base, query string, err error) {
	keys := r.URL.Query()["key"]
	if len(keys) > 1 {
		// Which one the tiles should carry is the client's to say: the
		// priced routes refuse a key given twice too.
		return "", "", problem.Malformed("key", "key is given more than once: send one key")
	}
	if len(keys) == 1 && keys[0] != "" {
		query = "?key=" + url.QueryEscape(keys[0])
	}
	if h.PublicURL != "" {
		return strings.TrimSuffix(h.PublicURL, "/"), query, nil
	}
	host, proto := h.Proxies.HostProto(r)
	switch {
	case host == "":
		host = "localhost"
	case !forwarded.ValidHost(host):
		return "", "", &problem.Error{Code: problem.Invalid, Param: "Host",
			Detail: "the Host header is not a valid host[:port] (a name or an IP address, and a port from 1 to 65535): this document's URLs are written from it"}
	}
	return proto + "://" + host + strings.TrimRight(h.BasePath, "/"), query, nil
}

// metaScope says who may keep a metadata document.
type metaScope int

const (
	// metaPublic: any cache, for 60 s, revalidated by its ETag.
	metaPublic metaScope = iota
	// metaPrivate: a document that carries a key (?key=) is nobody else's
	// business, and no cache keeps the URL that holds the key.
	metaPrivate
	// metaUnstored: a document the database could not fill in (TileJSON's
	// fallback), true only until it answers again.
	metaUnstored
)

// writeMeta sends a metadata document. Written from the request's host (no
// PublicURL) behind trusted proxies, it varies with the forwarding
// headers they write (forwarded.Trusted.HostHeaders), which may choose
// that host; written from PublicURL, or with no proxy trusted, it varies
// with nothing the client sends but the URL. A public one (metaPublic) is "public, max-age=60" with a weak
// ETag (metaETag: the same on every replica for the same document,
// whatever its storage's age), and an If-None-Match naming it — weak
// comparison, a list, or "*" — is answered 304 with no body, with the
// ETag, Cache-Control and Vary the 200 would carry (RFC 9110 §13.1.2,
// §15.4.5). A private one is "private, no-store" and one the database could
// not fill in "no-store": no cache keeps either, so neither has an ETag,
// and each is sent whole whatever If-None-Match says (there is nothing
// stored to revalidate). Any If-Match but "*" is answered 412: the weak
// ETag never matches under If-Match's strong comparison (RFC 9110
// §13.1.1), and the others have none.
func (h *Handler) writeMeta(w http.ResponseWriter, r *http.Request, conds etag.Conditions, scope metaScope, doc any) {
	body, err := json.Marshal(doc)
	if err != nil { // plain structs of strings and numbers: unreachable
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	hdr := w.Header()
	var tag string
	if scope == metaPublic {
		tag = metaETag(body)
	}
	if conds.MatchFails(tag) {
		problem.Write(w, r, preconditionFailed)
		return
	}
	if vary := h.Proxies.HostHeaders(); h.PublicURL == "" && len(vary) > 0 {
		hdr.Add("Vary", strings.Join(vary, ", "))
	}
	switch scope {
	case metaPrivate:
		hdr.Set("Cache-Control", "private, no-store")
	case metaUnstored:
		hdr.Set("Cache-Control", "no-store")
	default:
		hdr.Set("Cache-Control", "public, max-age=60")
		hdr.Set("ETag", tag)
		if conds.NoneMatchFails(tag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// ageField is how a metadata document writes a storage's age.
var ageField = regexp.MustCompile(`"age_seconds":[0-9]+`)

// metaETag is the weak ETag of a metadata document: a hash of its bytes
// with every storage[].age_seconds left out. The age grows every second
// while the document says the same thing (the same storage, checked at
// the same checked_at), so a client or cache revalidating it keeps its
// copy — whose age is then older than it says, as any cached copy's is.
// Weak, because the bytes differ (RFC 9110 §8.8.1).
func metaETag(body []byte) string {
	return "W/" + tileETag(ageField.ReplaceAll(body, []byte(`"age_seconds":0`)))
}

func union(a, b [4]float64) [4]float64 {
	return [4]float64{min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])}
}

// center is the middle of bounds, at the zoom where the bounds about fill
// one 512-pixel view, clamped to the zoom range.
func center(b [4]float64, minZoom, maxZoom int) [3]float64 {
	lon, lat := (b[0]+b[2])/2, (b[1]+b[3])/2
	z := minZoom
	if w := b[2] - b[0]; w > 0 {
		z = int(math.Floor(math.Log2(360 / w)))
	}
	z = max(minZoom, min(maxZoom, z))
	return [3]float64{math.Round(lon*1e6) / 1e6, math.Round(lat*1e6) / 1e6, float64(z)}
}
