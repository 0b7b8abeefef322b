// Package tiles serves Mapbox Vector Tiles (MVT) from PostGIS.
//
// A [Catalog] is the fixed set of [Layer]s a server offers, each one table
// of the configuration. [NewCatalog] validates the layers, fills in defaults
// and renders each layer's queries once: the table and column names are
// quoted with pgx.Identifier, everything else is a bound parameter. No text
// from a request ever becomes part of a query.
//
// # The request path
//
// [Handler] serves GET /tiles/{layer}/{z}/{x}/{y}.mvt (or .pbf), where
// {layer} is one layer or a composite "a,b,c" of up to [MaxComposite]:
//
//  1. [Catalog.ParseRequest] checks the address: [SplitFormat] the
//     extension, [ParseTile] z, x and y, [Catalog.Resolve] the layer list,
//     then each layer's zoom range. A malformed part is a 400, an unknown
//     layer or format a 404, a value out of range a 422; each names the
//     parameter at fault (see package problem). A composite is served
//     from the least minzoom of its layers to the greatest maxzoom, and
//     drops the layers whose own range excludes z; at a zoom between
//     their ranges none is left, and its tile is empty: a 204 that reads
//     nothing, priced as a cache hit of the layers it names.
//  2. The [Cache] is looked up first, so that the [Gate] knows whether the
//     database will do any work: a hit (or a 304 for a cached ETag) is a
//     [Demand] with CacheHit set, which the Gate (toll.Toll) prices at the
//     base price.
//  3. The [Gate] prices the [Demand] (layers, tile, cache hit) before any
//     query runs, and may refuse it, writing the 429 itself.
//  4. On a miss, concurrent requests for the same tile in the same share of
//     the pool (pgcall.ShareOf: the anonymous callers', a key's) share one render
//     (a counted flight: the shared query is cancelled only when the last
//     waiter hangs up), and the [Renderer] draws the tile. [Store.Render] runs one query per layer
//     in a single READ ONLY transaction, in one round trip, under SET LOCAL
//     statement_timeout (each layer's own StatementTimeout) and
//     with JIT off. The request's context goes all the way down: a client
//     that hangs up cancels its query in PostgreSQL. A query that hits its
//     timeout is a 503 with Retry-After.
//  5. The layers' MVT messages are concatenated into one tile (an MVT tile
//     is a protobuf message whose only field is the repeated layer), cached
//     with its ETag (unless [Cache.InvalidateLayer] dropped one of its
//     layers while it rendered: it may show the data as it was), and sent
//     as 200 with Content-Type [ContentType] —
//     gzipped when the client accepts it (compressed on the first such
//     request and kept beside the tile: a client that does not accept gzip
//     never pays for it), 304 when its If-None-Match matches, with
//     [HeaderReduced] when a layer was reduced to fit its byte budget.
//
// A tile with no features is an empty byte string, and the handler answers
// it with 204 No Content instead of a 200 with an empty body: there is
// nothing to decode, the status says so plainly, and MapLibre, OpenLayers
// and Leaflet all draw a 204 as an empty tile. Like a 200, and unlike a
// problem response (Cache-Control: no-store), it may be cached.
//
// # Generalisation
//
// A layer's [Kind] (point, line, polygon or mixed; configured, or read from
// geometry_columns by [Catalog.Refresh]) chooses its query:
// sql/tile_points.sql or sql/tile_lines_polygons.sql, each with its
// parameter contract at the top. Up to [Generalize].MaxZoom (default 12)
// tiles are generalised, with lengths in pixels of a [TilePixels]-wide
// tile ([Generalize.At] computes them per zoom):
//
//   - Points are clustered: one feature per cell of a grid aligned to the
//     tile's pixels (cluster_px, default 8 px, so 64×64 cells per tile),
//     drawn as the cell's first point in the layer's order_by with all of
//     that point's properties, plus point_count, the number of points in
//     the cell (MapLibre's name for it). Every feature of a point layer
//     carries point_count, 1 beyond the clustered zooms. The cells a
//     tile keeps are its own and its buffer's, rounded up to whole cells
//     ([Generalization.CellRange]), and its features are clipped to that
//     widened buffer, so the point_counts of a tile sum to the rows whose
//     cell lies there, exactly.
//   - Lines and polygons are simplified to the pixel (tolerance_px,
//     default 1 px) in their overviews, where features smaller than
//     min_size_px (default 1 px) are also thinned to one per cluster cell,
//     the first in order_by. Every tile clips and snaps them to its grid
//     with ST_AsMVTGeom, whose polygon clipping (wagyu) returns valid
//     polygons; over an overview it draws a feature that leaves nothing on
//     the grid (smaller than a unit of it, or collapsed by the snap) as a
//     point, so a tile holding a feature of the overview is never empty
//     (a part under a pixel of a feature with larger parts is not in it).
//     Zooms beyond the overviews
//     are not simplified further (doing it per tile would read each whole
//     feature again).
//
// Beyond Generalize.MaxZoom features are served as stored, so the tiles of
// DataMaxZoom (TileJSON's maxzoom, default 16), which clients overzoom,
// carry every detail.
//
// # Order, cap and byte budget
//
// A layer's OrderBy (default its id; the id is always the last key, so the
// order is total) is its priority: the feature cap (max_features) keeps the
// first features in that order (clusters: the largest point_count first;
// lines and polygons: the first that leave something on the tile once
// clipped, among the first twice-the-cap rows — from pieces, ids — whose
// box meets it, so that a feature whose box meets the tile but whose shape
// misses it takes no place while the clipping work stays bounded by the
// cap),
// and features are written in that order, so a tile renders to the same
// bytes — and the same ETag — on every render and every replica.
//
// Each layer of a tile is held to its byte budget (max_tile_bytes, default
// 500,000 bytes of uncompressed MVT) inside its query: a tile over budget
// is rendered again from the same rows at [Budget] levels 1, 2, … — points
// merged into cells twice as wide per level (counts summed), lines and
// polygons simplified twice as coarsely (ST_SimplifyPreserveTopology, on
// the clipped features) with the cap halved and, from level 2 on, half
// the features drawn at the level before — until it fits or the last
// level is reached. A feature
// is never cut. The response names the reduced layers and their levels in
// [HeaderReduced].
//
// # Serving storage and Source
//
// Low zooms of a layer read precomputed overview tables instead of the
// layer's table, once `geotoll prepare` has built them (package serving:
// per zoom of the layer's overview band, by default z0–z12 for points and
// z0–z7 for lines and polygons, the zoom's clusters or simplified
// features, so a z2 tile reads a few thousand rows instead of the whole
// table). [Catalog.Refresh] reads the serving
// registry ([LoadStorage], geotoll_serving.storage) with the read role at
// start-up and on every refresh, and swaps each layer's plan: which
// relation and query each zoom runs. Storage the layer cannot use (built
// from another table or geometry column than the layer reads now, storage
// its configuration turned off — overviews with generalize or overviews
// off or outside its overview band, pieces with subdivide off —,
// overviews built under other generalisation settings — cluster_px,
// tolerance_px, min_size_px or order_by ([Layer.OverviewParams]; an order
// spelt otherwise is the same order: [Layer.CanonicalOrderBy]) —, another
// kind, missing columns, an unknown builder) is left out with a warning;
// those zooms read the table. A followed layer ([Catalog.Follow]: the
// server writes its table, as the fence admin writes the fences) reads
// only storage built from its table as it is (the change detector
// `geotoll prepare` recorded is the table's), and [Catalog.Written] makes
// it read its table at once after a write; [Cache.InvalidateLayer] then
// drops its cached tiles, and no render begun before keeps its tile.
//
// Above the overview band, a line or polygon layer reads its pieces
// (BuilderSubdivide: its rows cut into pieces of at most
// Subdivide.MaxVertices vertices): the pieces near the tile, snapped to
// the tile's grid, collected per id and drawn as one feature by
// ST_AsMVTGeom, whose polygon clipping (wagyu) fills the collection as one
// area, so no seam is left where pieces meet (lines are merged at their
// shared ends by ST_LineMerge). A tile reads the pieces near it instead
// of whole rows. A line or polygon overview is stored in pieces too
// ([Storage.InPieces], unless subdivide is off), joined back on the
// overview's own feature number ([PiecesKey]), so that a low-zoom tile
// reads the parts of a detailed border near it, not the whole border
// wherever its box meets the tile; a layer reads an overview whole or in
// pieces as the registry records it.
// [Layer.Heavy] reports a layer whose largest rows exceed that size while
// it reads no pieces.
//
// [Layer.Source] says what a tile of a layer at zoom z actually reads: the
// relation (the table, or an overview), its geometry column, SRID and kind,
// the builder and its row count, and the [Generalization] applied (cluster
// cells, tolerances). A per-relation cost model prices tiles from exactly
// those relations.
//
// # Tile envelopes
//
// [Envelope] gives a tile's bounds in EPSG:3857 metres with the arithmetic
// of PostGIS's ST_TileEnvelope: the world square ±π·R (R the WGS84
// semi-major axis) cut into 2^z steps of 2π·R/2^z. It does not project the
// lon/lat corners of orb's Tile.Bound, whose round trip through atan(sinh)
// and log(tan) is close but not exact; the tests hold Envelope to
// ST_TileEnvelope within a micrometre for every zoom up to [MaxZoom].
package tiles
