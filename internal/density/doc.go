// Package density estimates, in memory and without a database call, how much
// of one relation (a table or view with a geometry column) a query reads: how
// many features, and how many vertices (ST_NPoints of the whole geometries),
// fall in a tile envelope with its buffer, a lon/lat box, a radius circle or
// at a point. Pricing uses it to charge a request for the database work it
// will cause before running it.
//
// # What an estimate counts
//
// A query filters with an index (&&, or ST_DWithin on geography) and then
// reads and clips whole geometries, so a feature whose bounding box meets the
// area counts whole, however little of it lies inside:
//
//   - [Model.Rect]: a rectangle in EPSG:3857 metres, such as a tile envelope
//     expanded by its buffer. On an EPSG:3857 relation it counts what
//     `geom && rectangle` reads; on an EPSG:4326 relation what
//     `geom && ST_Transform(rectangle, 4326)` reads with the rectangle's x
//     range cut at the world's edges first, as the tile query cuts it (PROJ
//     would wrap a longitude beyond ±180° round to the other side, and a
//     buffer that overhangs the antimeridian would make that box span every
//     longitude but the tile's). A relation in another SRID is modelled in
//     EPSG:4326 and counted the same way; the tile query filters it by the
//     box of the transformed corners, a little wider than the tile, so the
//     estimate falls short by the rows in that margin: 5–20% of a tile's
//     rows where the projection is meant for (the demo places in EPSG:3035,
//     in Europe), up to half far from it, where the projection turns the
//     tile and the box of its corners grows (New York, Sydney).
//   - [Model.BBox]: a lon/lat box; west > east crosses the antimeridian and
//     counts both parts.
//   - [Model.Circle]: the features whose bounding box comes within a radius,
//     in metres on the ground, of a lon/lat centre (on a sphere of the mean
//     Earth radius; PostGIS measures on the spheroid, up to 0.5% apart). For
//     points it is what ST_DWithin on geography returns; the index reads
//     about 1.3–1.6 times as many candidates.
//   - [Model.Point]: the features whose bounding box contains a lon/lat
//     point: the candidates of a point-in-polygon test.
//
// Estimates are expected values (fractions), never negative. An area that is
// empty, inverted, outside the world or not a number estimates zero.
//
// # Structure, and why
//
// Positions are normalised Web Mercator, [0, 1]² over the square world, so
// that a level-z grid cell is exactly a z/x/y tile. Latitudes beyond
// ±85.0511° are clamped onto the world's edge (keeping their longitude).
//
// A model is two pyramids of sparse grids: one for light features and one for
// heavy ones (geometries stored in at least [Options.HeavyBytes], about 500
// vertices), so that a polygon of 10^5 vertices is never averaged with its
// light neighbours. In each pyramid:
//
//   - all[ℓ], for ℓ = 0…level, holds every feature whose bounding box fits a
//     level-ℓ cell (at most a cell wide and tall), in the cell of its box
//     centre. A feature is counted once, in one cell — never split — and
//     lies within half a cell of it: a query widened by that half extent
//     finds it.
//   - fit[ℓ], for ℓ < level, holds the features whose box fits a level-ℓ
//     cell but no level-ℓ+1 cell: the ones too large for a finer grid.
//
// A query is read at level q, the finest at which its height spans at most 8
// cells (a tile of zoom z reads level z+2), in all[q] and in every non-empty
// fit[ℓ] with ℓ < q; each feature is in exactly one of them.
//
// A grid is its non-empty cells in row-major order, with prefix sums of
// features and vertices, so a run of cells in one row sums with two binary
// searches (the second short, and consecutive rows gallop from the last one)
// whatever the run's length. The cells an edge cuts — at most two per side
// and row, and the cells of the first and last rows read (up to 64 a row;
// beyond, the row's inner cells take its even vertical share) — are weighed
// one by one: each keeps the extent of its features' box centres (a content
// box), their mean and their mean half extent, to 1/65535 of the cell. The
// share of a cut cell that counts is the share of its centres that fall in
// the query widened by the half extent, the centres taken as spread over
// the content box in two even pieces split at the mean (so a city at one
// end of a cell stays at that end). An empty place therefore estimates
// exactly zero: no cell there, or no content box within reach.
//
// The features clamped onto the world's edge lie in the last step of their
// cells there, at every level, and count whole in a query that reaches the
// edge: a query wholly on the edge reads that step of each grid's cells. A
// long edge row counts them whole too, rather than at its even vertical
// share. A row that holds only such features sums as a row the query
// covers. One that also holds others is weighed cell by cell, as a short
// row is, while at most 2,048 of its cells are in the query's reach (18 µs
// an estimate on a 2-CPU machine); beyond that, so that a polar query on
// the finest grids stays cheap, it keeps prefix sums over its cells on the edge, which count
// whole, and takes its other cells together as one cell over the whole row
// — the union of their content boxes, the mean of their means and the
// grid's mean half extent — of which the query reads its share: exact when
// those cells share one vertical spread and are points, an approximation
// otherwise, which can be far off (several times) when the row's cells
// differ in the columns the query does not read. Which features are on the
// edge is known per cell, not per feature: a cell counts as on the edge
// when its content box is the step at the edge, so a cell that holds both
// clamped features and others short of the edge (in the finest grid, those
// within one cell's height of it; in a coarser one, anywhere in the row) is
// one cell among the others, and its clamped features count only at the
// share of the query that cell (or, on the long path, the row's other
// cells together) gets, which can be a sliver.
//
// Rejected: dense summed-area tables (4^16 cells a level); descending a
// quadtree at the edges (dozens of lookups a query); a box per feature, as in
// an R-tree (memory grows with the rows, not bounded); splitting a feature
// over the cells it covers (the database reads it whole, once).
//
// # Building
//
// [Build] (and a [Refresher]) read a relation in one READ ONLY transaction
// on the caller's pool — give it the read-only role — under
// [Options.StatementTimeout], with jit off and work_mem at 64 MB: the
// planner's row estimate (EXPLAIN, which runs nothing), then ONE aggregate
// query (sql/density_cells.sql) that groups the features by class and by
// the cell of their box centre at their fit level, with their count, vertex
// sum, summed box sizes and centre extent and mean. An EPSG:3857 or
// EPSG:4326 relation is read as it is; one in any other SRID has each
// feature's bounding box transformed to EPSG:4326 and is modelled in
// lon/lat (see [Relation.Transformed]). The box is what the query's index
// compares, and a polygon of 10^5 vertices costs the build its box's four
// corners, not 10^5 points — 33 points of its outline when the corners span
// more than a degree, where a projection curves the edges. Three places
// need more than the corners: a box that holds a pole (a polygon around
// the South Pole in EPSG:3031, whose corners reach only 64°S) reaches it at
// every longitude — where the poles lie in the relation's SRID is read once
// a build; a box across the antimeridian (the Aleutians in EPSG:3338),
// whose outline jumps from 180°E to 180°W, is cut in two at ±180° rather
// than made to span every longitude between (its second part is not
// counted in [Summary.Rows]); and a box outside the projection's domain,
// which ST_Transform refuses and which would fail every build for ever, is
// skipped and counted ([Summary.Skipped]): the build then reads the relation
// again with geotoll.density_transform (migration 11), one subtransaction
// a row, so only after the fast query failed. An SRID PostGIS does not
// know fails the build, which a [Refresher] reports as any other failure.
//
// When the planner expects more than [Options.SampleRows] rows, the query
// keeps each light row with probability p = SampleRows / rows (random() <
// p, on tables and views alike) and weighs it 1/p; heavy rows are always kept
// with weight 1 (pg_column_size tells them apart without detoasting). The
// estimate of an area that holds n light rows then has a relative standard
// error of √((1−p)/(n·p)): 1% for n = 10^5 at p = 0.1. A SYSTEM sample
// would read fewer pages, but rows loaded together share pages, so a sampled
// page takes or drops a whole neighbourhood; BERNOULLI rows are independent.
// Measured at p = 0.1 on the demo points (TestAccuracySampled): tiles ρ
// 0.985, median relative error 0.2%, 90th percentile 26%.
//
// # Memory
//
// A cell takes 24 bytes in a point relation (key, prefix sum, content box,
// mean) and 36 in others (vertex prefix sum, half extent). [Options.MaxCells]
// (default 512k) caps a model's cells over all levels: a build that would
// hold more drops its finest levels until it fits — coarser cells, same
// totals — so a model takes at most 12.6 MB (points) or 18.9 MB (lines,
// polygons). Measured (BenchmarkBuild): the 240k demo points take 270k cells
// at level 16, 6.5 MB; a million points clustered like them 339k cells at
// level 15, 8.1 MB; a million points spread evenly 317k cells at level 9,
// 7.6 MB. While it runs, a build allocates 0.2–0.6 KB per row it reads.
//
// # Accuracy
//
// Measured against PostGIS's exact count(*) and sum(ST_NPoints) of what each
// filter reads (TestAccuracyDemo, TestAccuracyHeavy; ρ is Spearman's rank
// correlation of estimate and count; errors are relative, |e−x|/max(x, 1)):
//
//	relation                  probes                     ρ features  ρ vertices  median  90th pct
//	demo points (240k)        236 tiles z0–z16           ≥ 0.999     ≥ 0.999     0.1%    ≤ 4.5%
//	                          60 bboxes                  ≥ 0.985     ≥ 0.985     0.0%    ≤ 81%
//	                          60 circles (4326)          0.999       0.999       0.0%    10%
//	demo districts (1584)     236 tiles                  0.999       0.999       0.0%    12%
//	                          60 bboxes, 60 circles      ≥ 0.993     ≥ 0.993     0.0%    ≤ 39%
//	demo geofences (300)      236 tiles                  1.000       1.000       0.0%    3.1%
//	                          60 bboxes, 60 circles      ≥ 0.986     ≥ 0.986     0.0%    ≤ 14%
//	heavy polygons (430;      236 tiles                  1.000       1.000       0.0%    1% / 0%
//	  10^4–10^5 vertices)     bboxes, circles, points    1.000       1.000       0.0%    0.0%
//
// Each demo table is measured in both its columns (EPSG:3857 and 4326). Tiles
// are half where data is and half anywhere, z0–z16, plus the world's edge
// tiles; empty tiles estimate 0 (every empty z2 tile of the demo points
// below 0.01). A bbox's 90th percentile is large because random boxes of
// extreme aspect (0.002° × 30°) are read at a level fitted to their height.
// Points (features whose box contains them) are small integers, where a rank
// correlation says little: their mean absolute error is 0.18–0.23 features.
//
// # Speed
//
// An estimate allocates nothing. Measured (BenchmarkEstimate, CPU time of the
// loop's thread on 2 busy cores): tiles 180–350 ns, bboxes 330–700 ns,
// circles 580–1220 ns, points 150–350 ns.
//
// # Refreshing
//
// A [Refresher] builds a model, then rebuilds it every [Options.Interval]
// (every [Options.RetryInterval] after a failure) and swaps each new one in
// with an atomic pointer: readers never wait and never see a torn model. A
// failed build keeps the last good model. Until the first build succeeds,
// [Refresher.Model] returns nil — price without a model then (by area) — or
// the model [Refresher.Inherit] lent it, and
// [Refresher.Status] says why; it carries what readiness detail and metrics
// need (ready, age, rows, cells, bytes, the last error).
//
// With [Options.Shelf], a rebuild first reads the relation's change
// detector (package signature: row count, newest xmin and a checksum of
// the xmins, one scan): when a model of the relation was built at the
// same detector, by this refresher or another in the process, that model
// is kept and nothing else is read. A view has no detector and is read
// every time.
//
// [NewModel] builds a model from features held in memory, grouped exactly as
// a build groups rows: for tests of code that prices with a model.
package density
