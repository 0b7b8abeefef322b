// Package tiles serves Mapbox Vector Tiles (MVT) from PostGIS.
//
// A [Catalog] is the fixed set of [Layer]s a server offers, each one table
// of the configuration. [NewCatalog] validates the layers, fills in defaults
// and renders each layer's query (sql/tile.sql) once: the table and column
// names are quoted with pgx.Identifier, everything else is a bound
// parameter. No text from a request ever becomes part of a query.
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
//     parameter at fault (see package problem).
//  2. The [Cache] is looked up first, so that the [Gate] knows whether the
//     database will do any work: a hit (or a 304 for a cached ETag) is a
//     [Demand] with CacheHit set, which server prices at the base price.
//  3. The [Gate] prices the [Demand] (layers, tile, cache hit) before any
//     query runs, and may refuse it, writing the 429 itself.
//  4. On a miss, concurrent requests for the same tile share one render
//     (a counted flight: the shared query is cancelled only when the last
//     waiter hangs up), and the [Renderer] draws the tile. [Store.Tile] runs one query per layer
//     in a single READ ONLY transaction, in one round trip, under SET LOCAL
//     statement_timeout (each layer's own StatementTimeout) and
//     with JIT off. The request's context goes all the way down: a client
//     that hangs up cancels its query in PostgreSQL. A query that hits its
//     timeout is a 503 with Retry-After.
//  5. The layers' MVT messages are concatenated into one tile (an MVT tile
//     is a protobuf message whose only field is the repeated layer), cached
//     with its ETag, and sent as 200 with Content-Type [ContentType] —
//     gzipped when the client accepts it (compressed on the first such
//     request and kept beside the tile: a client that does not accept gzip
//     never pays for it), 304 when its If-None-Match matches.
//
// A tile with no features is an empty byte string, and the handler answers
// it with 204 No Content instead of a 200 with an empty body: there is
// nothing to decode, the status says so plainly, and MapLibre, OpenLayers
// and Leaflet all draw a 204 as an empty tile. Like a 200, and unlike a
// problem response (Cache-Control: no-store), it may be cached.
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
