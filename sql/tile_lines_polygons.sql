-- One MVT layer of a line, polygon (or mixed) layer for one tile: the
-- first features in order_by, clipped and snapped to the tile's grid,
-- reduced level by level until the tile fits its byte budget.
--
-- Template fields (double braces) come from the layer catalog, quoted with
-- pgx.Identifier and rendered once per layer and relation at start-up:
--   .Table .Geom   the relation read and its geometry column: the layer's
--                  own table, one of its overviews (.Overview: simplified
--                  to the pixel and thinned of sub-pixel features when built)
--                  or its pieces (.Pieces: rows cut into pieces of few
--                  vertices, joined back per .Key; .LineMerge: lines); a
--                  line or polygon overview is stored in pieces too
--                  (.Overview and .Pieces)
--   .Transform     the relation is not in EPSG:3857: the function that
--                  transforms it (ST_Transform, or geotoll.tile_transform,
--                  which draws what it can of a row outside the
--                  projection's domain; package tiles retries a tile with
--                  it when ST_Transform failed)
--   .FilterExpr    the buffered envelope in the relation's SRID (for
--                  another SRID than 3857, its x range cut at the world's
--                  edges first: the transform would wrap an overhang past
--                  ±180° to the other side; the corners' box, widened
--                  outside EPSG:4326 by a margin for sides that bend in
--                  other projections (tiles.transformedEnvelope). A
--                  scalar subquery over env: computed once per query)
--   .Cols          every column carried: id, properties, order_by
--                  columns, each read as .Column (its name in the table
--                  and the pieces; in an overview, the name it is stored
--                  under, c0, c1…) and carried as .As, a name of the
--                  query's own (c0, c1…): the steps carry g, geom and
--                  prio too, and a column by one of those names would be
--                  ambiguous
--   .ID            the carried id (empty: features carry no id)
--   .Key           with .Pieces, the column the pieces join back on,
--                  carried as fid: the id column (the layer's pieces),
--                  or an overview's own feature number, fid (an overview
--                  stored in pieces, whose layer's ids may repeat or be
--                  absent); .Box with it: the column holding each piece's
--                  whole feature's box (box2d), for the point a feature
--                  that collapses on the grid is drawn as
--   .Props         the properties, in order: carried as .As, and named
--                  .Column again only in the row ST_AsMVT encodes (q,
--                  passed as q.*, so that a property called q is not
--                  taken for it)
--   .Order         the layer's order_by over alias t and the carried
--                  names, a total order when the layer has ids (the id is
--                  its last key); without either, the geometry (g).
--                  Over an overview in pieces it ends with the
--                  overview's feature number (fid), which is the whole
--                  order without either (deterministic for a build, not
--                  the geometry's). .TableOrder the same over the
--                  relation's columns as
--                  read (.Column), for the scan that reads it
-- Everything else is bound (every parameter is named once in env):
--   $1..$4  tile envelope in EPSG:3857 (xmin, ymin, xmax, ymax)
--   $5  extent (tile units)    $6  buffer (tile units)    $7  buffer in metres
--   $8  feature cap            $9  MVT layer name
--   $10 simplification tolerance (tile units), for the reduction levels
--   $11 1 when the zoom is generalised, else 0
--   $12 byte budget (uncompressed MVT)        $13 last reduction level
-- Level 0 draws the features as ST_AsMVTGeom clips and snaps them to the
-- tile's grid (its polygon clipping, wagyu, returns valid polygons); over
-- an overview, a feature that leaves nothing on the grid (smaller than a
-- unit of it, or collapsed by the snap) is drawn as a point, so a tile
-- holding a feature of the overview is never empty. Simplifying or sizing a
-- whole stored feature here would cost more than clipping it (a country
-- border: hundreds of thousands of vertices, read again for each): the
-- overviews hold features simplified and thinned for their zoom. Level
-- L > 0 simplifies the clipped features with ST_SimplifyPreserveTopology
-- at the tolerance scaled by 2^(L − 1 + $11) — and draws them again with
-- ST_AsMVTGeom, so that each ring is wound as MVT says; a feature whose
-- simplification is not valid, or vanishes in that redraw, is drawn as
-- level 0 drew it — and keeps the first
-- min(cap / 2^L, n / 2^(L − 1)) features in order_by (at least one), n the
-- features the tile draws at level 0: level 1 simplifies them (and halves
-- the cap), each level after it halves what the tile draws, so that the
-- last one draws a few — the cap alone, halved, stayed above the features
-- of a tile that had fewer than it, which no level then dropped. The cap and the levels count the
-- features drawn: a row whose clipped shape is NULL is none of them.
-- Result: one row (mvt bytea, level int): the first level whose tile fits
-- the budget, or else the smallest of the levels, the last of those as
-- small (a level may draw more than the one before it, where a feature's
-- simplification is not valid and it is drawn as at level 0). Features are written in order_by order,
-- so the same rows give the same bytes.
WITH RECURSIVE env AS NOT MATERIALIZED (
    SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS geom,
           $5::int AS extent, $6::int AS buffer, $7::float8 AS buffer_m, $8::int AS cap,
           $9::text AS name, $10::float8 AS tolerance, $11::int AS generalised,
           $12::int AS budget, $13::int AS last_level
),
near AS (
    {{- if .Pieces}}
    -- Pieces: as from the table, the cap counts the ids drawn, not the ids
    -- whose pieces' boxes meet the tile, so that an id whose boxes meet
    -- it but whose shape misses it takes no place. The candidates are the
    -- first 2 × cap ids near the tile in order_by, picked from their
    -- pieces' columns (one row per id), then drawn one at a time in that
    -- order only until cap of them leave something on the tile (the
    -- outer ORDER BY finds them already in its order, so its LIMIT stops
    -- the drawing: no sort draws every candidate first); no tile draws
    -- more than 2 × cap ids.
    -- Only the pieces near the tile are drawn, all read in the one scan
    -- that picks the candidates (a lookup per candidate went through the
    -- geometry's index, the planner knowing no better, and read every
    -- piece near the tile for each: a tile of thousands of small features
    -- took seconds; a join of the two was planned as a loop as well):
    -- ranked by their id's place in order_by (dense_rank: an id's pieces
    -- carry its columns, so they share a rank, and the order ends with the
    -- id), those of the candidates' ranks snapped to the tile's grid (in
    -- EPSG:3857, so ST_AsMVTGeom's own snap changes nothing; no other
    -- piece is snapped), collected per id (a window over the id, beside
    -- the id's columns) and drawn once each by ST_AsMVTGeom,
    -- whose polygon clipping (wagyu) fills the collection's rings as one
    -- area: the cut edges the pieces share vanish, no seam is left inside
    -- an outline. .LineMerge joins a line's pieces at their shared ends
    -- (a line layer's polygon is drawn as it is: ST_LineMerge would
    -- leave nothing of it).
    -- The layer's pieces are built only from a table whose ids are unique
    -- and never NULL (package serving), so each id is one row of the
    -- table; an overview's pieces join on its own feature number.
    -- Each feature is drawn once, inside its LATERAL: OFFSET 0 keeps the
    -- planner from pulling the snap into the scan's filter and the
    -- outer "IS NOT NULL" into the drawing, which evaluated the snap and
    -- ST_AsMVTGeom (most of a z8 tile's time) twice.
    {{- if .Overview}}
    -- Over an overview, a feature whose pieces near the tile leave
    -- nothing on its grid is drawn as a point, as from a whole overview
    -- (below): at the centre of its whole box (k.box) when that box is
    -- under a unit of the grid, else of that box's part on the tile when
    -- its pieces near the tile meet the tile (read again only then).
    {{- end}}
    SELECT t.g, t.fid{{range .Cols}}, t.{{.As}}{{end}}
    FROM (SELECT {{if .Overview}}d.g{{else}}m.g{{end}}, k.fid{{range .Cols}}, k.{{.As}}{{end}}
          FROM (SELECT t.fid{{if .Box}}, t.box{{end}}, t.g{{range .Cols}}, t.{{.As}}{{end}}
                FROM (SELECT DISTINCT ON (c.fid) c.fid{{if .Box}}, c.box{{end}},
                             ST_Collect(c.g) FILTER (WHERE NOT ST_IsEmpty(c.g)) OVER (PARTITION BY c.fid) AS g{{range .Cols}}, c.{{.As}}{{end}}
                      FROM (SELECT t.fid{{if .Box}}, t.box{{end}},
                                   ST_RemoveRepeatedPoints(ST_SnapToGrid({{if .Transform}}{{.Transform}}(t.g, 3857){{else}}t.g{{end}},
                                       ST_XMin(env.geom), ST_YMin(env.geom),
                                       (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent,
                                       (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent)) AS g{{range .Cols}}, t.{{.As}}{{end}}
                            FROM (SELECT t.fid{{if .Box}}, t.box{{end}}, t.g{{range .Cols}}, t.{{.As}}{{end}},
                                         dense_rank() OVER (ORDER BY {{.Order}}) AS rank
                                  FROM (SELECT t.{{.Key}} AS fid{{if .Box}}, t.{{.Box}} AS box{{end}}, t.{{.Geom}} AS g{{range .Cols}}, t.{{.Column}} AS {{.As}}{{end}}
                                        FROM {{.Table}} AS t, env
                                        WHERE t.{{.Geom}} && {{.FilterExpr}}
                                        OFFSET 0) AS t) AS t,
                                 env
                            WHERE t.rank <= 2 * $8::int
                            OFFSET 0) AS c
                      ORDER BY c.fid) AS t
                ORDER BY {{.Order}}
                LIMIT 2 * $8::int) AS k,
               env,
               LATERAL (SELECT {{if .LineMerge}}CASE WHEN ST_Dimension(a.g) = 1 THEN ST_LineMerge(a.g) ELSE a.g END{{else}}a.g{{end}} AS g
                        FROM (SELECT ST_AsMVTGeom(k.g, env.geom, env.extent, env.buffer, true) AS g
                              OFFSET 0) AS a) AS m
               {{- if .Overview}},
               LATERAL (SELECT coalesce(m.g, (SELECT CASE WHEN ST_XMax(k.box) - ST_XMin(k.box) < (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent
                                                           AND ST_YMax(k.box) - ST_YMin(k.box) < (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent
                                                          THEN ST_AsMVTGeom(ST_Centroid(ST_SetSRID(k.box::geometry, 3857)), env.geom, env.extent, env.buffer, true)
                                                          WHEN bool_or(ST_Intersects(t.{{.Geom}}, env.geom))
                                                          THEN ST_AsMVTGeom(ST_Centroid(ST_Intersection(ST_SetSRID(k.box::geometry, 3857), env.geom)),
                                                                            env.geom, env.extent, env.buffer, true) END
                                                     FROM {{.Table}} AS t
                                                     WHERE t.{{.Key}} = k.fid
                                                       AND t.{{.Geom}} && {{.FilterExpr}})) AS g
                        OFFSET 0) AS d
               {{- end}}) AS t
    WHERE t.g IS NOT NULL
    {{- else}}
    -- The first rows near the tile in order_by that leave something on
    -- it once clipped, up to the feature cap, numbered in that order
    -- (prio): a row whose box meets the tile but whose shape does not
    -- (ST_AsMVTGeom returns NULL) takes no place under the cap, nor the
    -- first place the reduction levels keep, so a tile with data is never
    -- empty, reduced or not. The cap bounds the work too: the candidates
    -- are the first 2 × cap rows by their box, sorted first, then clipped
    -- one at a time in order only until cap of them are drawn (each once:
    -- OFFSET 0 keeps the clip out of the filter, which would run it
    -- again). A tile whose candidates all meet it clips cap rows; none
    -- clips more than twice that.
    SELECT c.geom, row_number() OVER (ORDER BY {{.Order}}) AS prio{{range .Cols}}, t.{{.As}}{{end}}
    FROM (SELECT t.{{.Geom}} AS g{{range .Cols}}, t.{{.Column}} AS {{.As}}{{end}}
          FROM {{.Table}} AS t, env
          WHERE t.{{.Geom}} && {{.FilterExpr}}
          ORDER BY {{.TableOrder}}
          LIMIT 2 * $8::int) AS t,
         env,
         LATERAL (SELECT {{if .Overview -}}
                         -- A feature of the overview that leaves nothing
                         -- on the tile's grid (too small, or so thin that
                         -- its snapped shape collapses) is drawn as a point
                         -- at the centre of its box, when its box is under
                         -- a unit of the grid, else of its box's part on
                         -- the tile, when its shape meets the tile: a tile
                         -- with data is never empty.
                         coalesce(ST_AsMVTGeom(m.g, env.geom, env.extent, env.buffer, true),
                                  CASE WHEN ST_XMax(b.e) - ST_XMin(b.e) < (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent
                                        AND ST_YMax(b.e) - ST_YMin(b.e) < (ST_XMax(env.geom) - ST_XMin(env.geom)) / env.extent
                                       THEN ST_AsMVTGeom(ST_Centroid(b.e), env.geom, env.extent, env.buffer, true)
                                       WHEN ST_Intersects(m.g, env.geom)
                                       THEN ST_AsMVTGeom(ST_Centroid(ST_Intersection(b.e, env.geom)), env.geom, env.extent, env.buffer, true) END)
                         {{- else}}ST_AsMVTGeom(m.g, env.geom, env.extent, env.buffer, true){{end}} AS geom
                  FROM (SELECT {{if .Transform}}{{.Transform}}(t.g, 3857){{else}}t.g{{end}} AS g OFFSET 0) AS m{{if .Overview}},
                       LATERAL (SELECT ST_Envelope(m.g) AS e) AS b{{end}}
                  OFFSET 0) AS c
    WHERE c.geom IS NOT NULL
    {{- end}}
    ORDER BY {{.Order}}
    LIMIT $8::int
),
feats AS MATERIALIZED (
    {{- if .Pieces}}
    SELECT t.g AS geom, row_number() OVER (ORDER BY {{.Order}}) AS prio{{range .Cols}}, t.{{.As}}{{end}}
    FROM near AS t
    {{- else}}
    SELECT t.geom, t.prio{{range .Cols}}, t.{{.As}}{{end}}
    FROM near AS t
    {{- end}}
),
fit (level, mvt) AS (
    SELECT 0, NULL::bytea
    UNION ALL
    SELECT fit.level + 1, (
        SELECT ST_AsMVT(q.*, $9::text, $5::int, 'geom'{{if .ID}}, 'id'{{end}} ORDER BY s.prio)
        FROM (SELECT g.geom, f.prio{{range .Cols}}, f.{{.As}}{{end}}
              FROM feats AS f,
                   LATERAL (SELECT CASE WHEN fit.level > 0
                                        -- Drawn again as level 0 is (its
                                        -- y axis turned back first), so
                                        -- that each ring is wound as MVT
                                        -- says. A simplification that is
                                        -- not valid (a hole outside its
                                        -- shell, which the redraw would
                                        -- fill) or that the redraw drops
                                        -- leaves the feature as level 0
                                        -- drew it.
                                        -- (OFFSET 0: each step once.)
                                        THEN coalesce((SELECT r.g
                                                       FROM (SELECT ST_SimplifyPreserveTopology(f.geom, env.tolerance * k.f) AS g OFFSET 0) AS x,
                                                            LATERAL (SELECT ST_AsMVTGeom(ST_Scale(x.g, 1, -1), ST_MakeEnvelope(0, -env.extent, env.extent, 0),
                                                                                         env.extent, env.buffer, true) AS g OFFSET 0) AS r
                                                       WHERE (ST_IsValidDetail(x.g)).valid AND r.g IS NOT NULL AND NOT ST_IsEmpty(r.g)),
                                                      f.geom)
                                        ELSE f.geom END AS geom) AS g
              WHERE f.geom IS NOT NULL
                AND f.prio <= greatest(1, least(env.cap >> fit.level, (SELECT count(*) FROM feats) >> greatest(fit.level - 1, 0)))) AS s,
             LATERAL (SELECT s.geom{{if .ID}}, s.{{.ID}} AS id{{end}}{{range .Props}}, {{.Value "s"}} AS {{.Column}}{{end}}) AS q
        WHERE NOT ST_IsEmpty(s.geom))
    FROM fit, env,
         LATERAL (SELECT 2 ^ (fit.level - 1 + env.generalised) AS f) AS k
    WHERE fit.level = 0 OR (length(fit.mvt) > env.budget AND fit.level <= env.last_level)
)
SELECT fit.mvt, fit.level - 1
FROM fit
WHERE fit.level > 0
ORDER BY coalesce(length(fit.mvt), 0) <= (SELECT budget FROM env) DESC, coalesce(length(fit.mvt), 0), fit.level DESC
LIMIT 1
