// Package geofence serves geotoll's geofence API for fleet trackers: radius
// and box searches over configured layers, point-in-fence tests, a batch
// check, and the fence admin. Every query request is priced from its own
// parameters by a Gate (toll.Toll) before anything touches the database.
//
// # Endpoints
//
//	GET  /geofence/within?layer&lng&lat&radius[&limit]
//	     features of layer within radius metres of the point, nearest first,
//	     as a GeoJSON FeatureCollection; each feature's properties carry
//	     distance_m
//	GET  /geofence/bbox?layer&bbox=minx,miny,maxx,maxy[&limit]
//	     features of layer intersecting the lon/lat box, in id order
//	GET  /geofence/contains?lng&lat[&limit][&layer]
//	     the fences (geotoll.geofences) that contain the point, in id order;
//	     with layer, the features of that polygon layer (ids and
//	     properties, geometry null)
//	POST /geofence/check[?layer]   {"points":[{"id":"v1","lng":13.4,"lat":52.5}, …]}
//	     for every point, in request order, the ids of the fences (or of
//	     the layer's features; the layer may also be the body's "layer")
//	     that contain it: {"results":[{"id":"v1","fences":[12, 40]}, …]}
//	GET|POST /geofence/fences, GET|PUT|DELETE /geofence/fences/{id}
//	     fence admin, GeoJSON Features in and out; admin API keys only
//	     (the older paths /geofences[/{id}] are aliases). A fence comes
//	     with a strong ETag, its revision quoted; PUT and DELETE honour
//	     If-Match and If-None-Match (412 when they do not hold), GET
//	     answers 304 to an If-None-Match that names the ETag. A page of the
//	     list holds at most limit fences and MaxResponseVertices positions,
//	     but always its first fence; one that ends early gives next too
//
// Package server routes these paths (below its base path) to the
// Handler's methods, the fence admin's wrapped in Handler.Admin.
//
// FeatureCollections and fences are application/geo+json; errors are
// application/problem+json (package problem).
//
// # Semantics
//
// Distances are geography-correct: within measures metres on the WGS 84
// spheroid (ST_DWithin and ST_Distance on geography), so a 5 km radius is
// 5 km on the ground at the equator and at 70°N. The query is written on
// (geom::geography), the expression the migrations index, so it runs as a
// GiST index scan. Results are ordered by distance_m, then id. A radius
// under 1 mm is read as 1 mm: the index's test of a radius of 0 misses
// what touches the point at ±180° or at a pole.
//
// Boxes are planar in lon/lat (edges along meridians and parallels). A box
// with minx > maxx crosses the antimeridian: it is split at ±180° into
// [minx, 180] and [-180, maxx], both parts searched in one query, and
// priced by their total area. It is never rejected for crossing.
//
// Containment uses ST_Covers: a point on a fence's boundary (edge or
// vertex) is inside the fence. contains and check apply the same rule, and
// fences are polygons in lon/lat with straight edges, as GeoJSON draws them.
// On the edge itself the rule holds to within a double's rounding: the
// pieces (below) add vertices where they cut an edge, rounded to doubles,
// so a point on such an edge to the last bit (ST_Distance 0) may be
// answered otherwise than by ST_Covers on the whole polygon, itself a
// rounded test there; off the edge the answers are the same.
//
// within reads the same polygons differently. On geography an edge is the
// shorter great-circle arc between its positions, not the straight line
// in lon/lat that contains, check and bbox (planar geometry) follow. On
// the geofences layer — the fences, searched with within and bbox — a
// fence with long edges therefore answers within otherwise than contains:
// the fence (-100 -10, 100 -10, 100 10, -100 10) contains (0, 0) for
// contains and check, but within 10 m of (0, 0) does not find it, because
// as geography its edges from -100° to 100° run the short way, across the
// antimeridian, and it covers (180, 0) instead. Short edges differ little
// (an edge along the 50th parallel bows about 2 m from its straight line
// in lon/lat over 10 km, 230 m over 100 km); a fence meant to answer both
// alike should have short edges (positions added along the long ones).
//
// # Pieces
//
// contains and check never test a point against a whole polygon. Fences
// are stored cut by ST_Subdivide into pieces of at most 256 vertices
// (geotoll.geofence_pieces, migration 00008, kept current by a trigger on
// every fence write); a polygon layer is read from the pieces `geotoll
// prepare` registered for its table in geotoll_serving.storage (builder
// "subdivide": the source's id and properties, in EPSG:4326 from the
// layer's own column, or in EPSG:3857 from a tile layer's, read with the
// point transformed: their edges are straight in Mercator, not in lon/lat,
// and stray from the layer's by about R·tanφ·Δφ²/8 between vertices Δφ
// apart — nothing for detailed borders, some 90 m for an edge one degree
// tall at 20°N), or from its table while it has none or while the
// table has changed since they were cut ([Catalog.LoadContainment], which
// serve calls at start-up and every tiles.storage_refresh). A point's GiST probe
// finds a piece or two of bounded size however large the polygon, and a
// point on a seam between two pieces of one polygon is answered once
// (DISTINCT over the source ids). A layer named by layer= must hold
// polygons: unknown is a 404, points or lines a 422, a 503 while its
// storage has not been read.
//
// # Parameters
//
// Every parameter is parsed strictly and bounded by [Limits]; a parameter
// that is malformed is a 400 naming it, one out of range a 422:
//
//   - numbers use JSON's grammar, in query strings and bodies alike: digits
//     with an optional '-', fraction and exponent. NaN, Inf, hex floats
//     (0x1p3), a leading '+', leading zeros, spaces and empty values are
//     400s. See [ParseLng].
//   - lng in [-180, 180], lat in [-90, 90], radius in [0, MaxRadius] metres,
//     limit in [1, MaxLimit] (default DefaultLimit), bbox area at most
//     MaxBBoxArea square degrees with miny <= maxy, a batch of 1..MaxBatch
//     points with ids of 1..[MaxPointIDLen] bytes of UTF-8 text (invalid
//     bytes or half of a surrogate pair are a 400 naming the point's id,
//     never read as U+FFFD), check bodies of at most
//     MaxBodyBytes and fence bodies of at most MaxFenceBytes (413 beyond:
//     from the request's head when its Content-Length says so, before the
//     body is read), fences of at most MaxVertices positions.
//   - a contains answer holds at most limit fences and MaxResponseVertices
//     positions in all: fences past either cap are left out (geometries
//     past them are never rendered) and the collection says
//     "truncated": true.
//   - a within or bbox answer holds at most limit features, and of them
//     the nearest (within) or the first by id (bbox) whose positions stay
//     within MaxResponseVertices in all: a feature larger than the cap is
//     left out alone, and the answer ends before the first other that
//     would take it past the cap (neither rendered); it then says
//     "truncated": true.
//   - limit and fence ids are digits without sign or leading zeros; any
//     number of digits is well formed: a limit past MaxLimit is a 422, a
//     fence id past int64 names no fence (404), an after past it is a 422.
//   - a fence list page holds at most limit fences and MaxResponseVertices
//     positions: it ends before the fence that would take it past them
//     (its geometry never rendered) and gives "next", so its bytes do not
//     grow with the fences' size; its first fence is answered however
//     large, alone on its page if need be, so that every fence is listed.
//   - check and fence bodies are read as sent: one with a Content-Encoding
//     other than identity (gzip…) is a 415 with Accept-Encoding: identity,
//     before it is read or priced.
//   - check and fence bodies are JSON: a Content-Type other than
//     application/json, application/geo+json or another application/*+json
//     (a charset other than utf-8 included) is a 415 naming Content-Type,
//     with Accept-Post on a POST, from the request's head: before the body
//     is read or priced, and on the check before its key is checked. A body
//     without a Content-Type is read as JSON.
//   - a fence's name and kind are text without control characters (C0,
//     DEL, C1) or bidirectional embeddings, overrides and isolates
//     (U+202A–U+202E, U+2066–U+2069): a 422 naming the member. Its
//     geometry is a Polygon or MultiPolygon: any other type, a
//     GeometryCollection included, is a 422. The read-only properties a
//     fence is answered with (created_at, updated_at, revision) are taken
//     and ignored, so a fence read with GET can be edited and PUT back.
//   - a query parameter the request does not read is a 400 naming it
//     (parseQuery): each request reads its own; dry_run and key on the
//     priced ones, dry_run (0 or false only) on fence writes, none on a
//     fence's GET — the fence routes answer it after the admin key. A
//     misspelt optional one would otherwise leave its default in place;
//   - a parameter given twice is a 400; so is a body member given twice
//     or in another case than its own ("LAT", "Name"), in check and fence
//     bodies alike. Malformed JSON is a 400 at the byte where it goes
//     wrong, counted as encoding/json counts a whole document; anything
//     after the body's one object is malformed where it begins.
//
// # Pricing
//
// The Gate receives a [Demand] built from the validated parameters alone;
// toll.Toll prices it from the features and vertices the density model of
// the relation it reads estimates (the layer's, or the fences'; contains
// and check on a layer with that layer's model) through a work
// model — or, with throttle.pricing size and until that model is built, by
// its size with throttle.Weights (radius: base + km × weight + limit ×
// feature weight; bbox: base + area × weight + limit × feature weight;
// check: base + points × point weight; contains: the price of a one-point
// check plus limit × feature weight). Every geofence query takes the
// base, max_cost and size weights of throttle.weights (its work model is
// the geofence one: the weights file's — within and bbox by layer,
// contains and check on a layer by layer, else the fences' —, else
// toll's defaults): a tile
// layer's own weights and shadow apply to its tiles only, never to a
// geofence layer of the same name. It answers 429 with Retry-After when
// the caller's budget cannot pay. Fence admin calls are not priced: they
// need an admin key (X-API-Key or Authorization: Bearer, compared in
// constant time), and are bounded by fence size (MaxFenceBytes), vertex
// count and Limits.FenceWriteTimeout.
//
// # Database
//
// [Store] runs each query in its own transaction — READ ONLY for reads —
// whose first statement is SET LOCAL statement_timeout (per layer, or
// Limits.StatementTimeout) and jit = off, with the request's context. A
// statement timeout is a 503 with Retry-After. A fence write cut by
// Limits.FenceWriteTimeout is one too, whose detail says to simplify the
// fence (fewer vertices) or raise geofence.fence_write_timeout, not to
// query a smaller radius, box or batch; its Retry-After stays, as a
// database busy with other work makes a write slow too. Layer identifiers come from
// configuration, quoted with pgx.Identifier and rendered once by
// [NewCatalog]; every value is a bound parameter. The batch check is one
// statement (unnest … WITH ORDINALITY joined to the fences), whatever the
// number of points.
//
// Fence writes go through a separate pool that should connect as the
// geotoll_fence_writer role (migrations/00003), which can write
// geotoll.geofences and nothing else. An edge between antipodal positions
// is refused first, in Go (a 422: PostGIS cannot make the geography its
// index needs of it). A geometry is checked with
// ST_IsValidDetail first (an invalid polygon is a 422 carrying PostGIS's
// reason and location) and stored as a MultiPolygon with RFC 7946 ring
// orientation (ST_ForcePolygonCCW). The insert or update fires the trigger
// that cuts the fence into its pieces (SECURITY DEFINER: the writer role
// has no right on the pieces table itself).
//
// # Conditional requests
//
// Every fence has a revision (migrations/00010): the number of the write
// that last changed it, drawn from one sequence by a trigger on every
// insert and update. Its ETag is the revision quoted ("41"): strong, new
// on every write and only then, and the same on every replica, since it
// comes from the database. GET, POST and PUT answer it; the list carries
// each fence's revision in its properties.
//
// [ParsePreconditions] reads If-Match and If-None-Match (RFC 9110 §13.1):
// "*" or a list of entity tags; anything else is a 400, since a condition
// the server cannot read might let through a write its sender meant to
// stop. If-Match compares strongly (a weak W/ tag never matches),
// If-None-Match weakly. A write with conditions first locks the fence's
// row (SELECT … FOR UPDATE) in its own transaction and checks them
// against the revision it reads: a 412 when they do not hold, nothing
// written. Another write of the fence waits for the lock and then reads
// the revision the first committed, so two writes with the same If-Match
// cannot both succeed. A fence that does not exist is a 404 whatever the
// conditions (PUT does not create), so If-None-Match: * on PUT or DELETE
// is always a 412 or a 404. POST writes to the collection of fences,
// which has no ETag: If-Match holds there only as "*", If-None-Match "*"
// never (a 412, nothing written). The list's GET reads that collection:
// an If-Match other than "*" is a 412, If-None-Match "*" a 304.
// If-Modified-Since and If-Unmodified-Since are not evaluated (no
// Last-Modified is sent).
package geofence
