-- One MVT layer of a point layer for one tile: points clustered into one
-- feature per cell of a grid aligned to the tile's pixels, each carrying
-- point_count, reduced level by level until it fits its byte budget.
--
-- Template fields (double braces) come from the layer catalog, quoted with
-- pgx.Identifier and rendered once per layer and relation at start-up:
--   .Table .Geom   the relation read and its geometry column: the layer's
--                  own table, or one of its point overviews (.Overview)
--   .GeomExpr      that geometry in EPSG:3857 (over alias t)
--   .FilterExpr    the buffered envelope in the relation's SRID (for
--                  another SRID than 3857, its x range cut at the world's
--                  edges first: the transform would wrap an overhang past
--                  ±180° to the other side; the corners' box, widened
--                  outside EPSG:4326 by a margin for sides that bend in
--                  other projections (tiles.transformedEnvelope). A
--                  scalar subquery over env: computed once per query)
--   .Cols          every column carried: id, properties, order_by
--                  columns, each read as .Column (its name in the table;
--                  in an overview, the name it is stored under, c0, c1…)
--                  and carried as .As, a name of the query's own (c0,
--                  c1…): the steps carry g, cx, cy, point_count and geom
--                  too, and a column by one of those names would be
--                  ambiguous
--   .ID            the carried id (empty: features carry no id)
--   .Props         the properties, in order: carried as .As, and named
--                  .Column again only in the row ST_AsMVT encodes (q,
--                  passed as q.*, so that a property called q is not
--                  taken for it)
--   .Order         the layer's order_by over alias t and the carried
--                  names, a total order when the layer has ids (the id is
--                  its last key); without either, the cell (t.cx, t.cy)
--   .Overview      the relation holds clusters already: columns cx, cy
--                  (cell indices) and point_count
--   .Cluster       cluster the layer's own rows (without .Overview)
-- Everything else is bound (every parameter is named once in env):
--   $1..$4  tile envelope in EPSG:3857 (xmin, ymin, xmax, ymax)
--   $5  extent (tile units)
--   $6  buffer in tile units and $7 in metres, both widened to whole
--       cells: ST_AsMVTGeom keeps every cluster of the cells read, so the
--       point_counts of the tile sum to the rows of its cells
--   $8  feature cap            $9  MVT layer name
--   $10 π·R: cell x = floor((x + $10) / $11), likewise y
--   $11 cell side in metres
--   $12..$15  the cells kept: x from $12 to $13, y from $14 to $15
--   $16 byte budget (uncompressed MVT)      $17 last reduction level
--   $18 1 when level 0 is clustered, else 0 (level L > 0 merges cells
--       2^(L − 1 + $18) wide)
-- Result: one row (mvt bytea, level int): the first level whose tile fits
-- the budget, or the last level. Features are written in a fixed order
-- (point_count descending, then order_by), so the same rows give the same
-- bytes.
WITH RECURSIVE env AS NOT MATERIALIZED (
    SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS geom,
           $5::int AS extent, $6::int AS buffer, $7::float8 AS buffer_m, $8::int AS cap,
           $9::text AS name, $10::float8 AS origin, $11::float8 AS cell,
           $12::bigint AS cx0, $13::bigint AS cx1, $14::bigint AS cy0, $15::bigint AS cy1,
           $16::int AS budget, $17::int AS last_level, $18::int AS clustered
),
near AS (
{{- if .Overview}}
    SELECT t.{{.Geom}} AS g, t.cx, t.cy, t.point_count{{range .Cols}}, t.{{.Column}} AS {{.As}}{{end}}
    FROM {{.Table}} AS t, env
    WHERE t.{{.Geom}} && {{.FilterExpr}}
      AND t.cx BETWEEN env.cx0 AND env.cx1 AND t.cy BETWEEN env.cy0 AND env.cy1
{{- else}}
    -- The cell is compared as a float8 and made a bigint only for the
    -- rows kept: a point whose coordinate is NaN (which PostgreSQL orders
    -- above every number), infinite or far past the world is in no cell
    -- kept, and floor(NaN)::bigint would fail the tile, however far the
    -- row, since PostgreSQL may compute a row's cell before the
    -- envelope's filter leaves the row out.
    SELECT p.g, c.fx::bigint AS cx, c.fy::bigint AS cy, 1::bigint AS point_count{{range .Cols}}, p.{{.As}}{{end}}
    FROM (SELECT {{.GeomExpr}} AS g{{range .Cols}}, t.{{.Column}} AS {{.As}}{{end}}
          FROM {{.Table}} AS t, env
          WHERE t.{{.Geom}} && {{.FilterExpr}}) AS p,
         env,
         LATERAL (SELECT floor((ST_X(ST_GeometryN(p.g, 1)) + env.origin) / env.cell) AS fx,
                         floor((ST_Y(ST_GeometryN(p.g, 1)) + env.origin) / env.cell) AS fy) AS c
    WHERE c.fx BETWEEN env.cx0 AND env.cx1 AND c.fy BETWEEN env.cy0 AND env.cy1
{{- end}}
),
cells AS (
{{- if and .Cluster (not .Overview)}}
    -- One row per cell: its first point in order_by, and how many it holds.
    SELECT DISTINCT ON (t.cx, t.cy) t.g, t.cx, t.cy,
           count(*) OVER (PARTITION BY t.cx, t.cy) AS point_count{{range .Cols}}, t.{{.As}}{{end}}
    FROM near AS t
    ORDER BY t.cx, t.cy, {{.Order}}
{{- else}}
    SELECT t.* FROM near AS t
{{- end}}
),
feats AS MATERIALIZED (
    SELECT ST_AsMVTGeom(t.g, env.geom, env.extent, env.buffer, true) AS geom,
           t.cx, t.cy, t.point_count{{range .Cols}}, t.{{.As}}{{end}}
    FROM cells AS t, env
    ORDER BY t.point_count DESC, {{.Order}}
    LIMIT $8::int
),
fit (level, mvt) AS (
    SELECT 0, (
        SELECT ST_AsMVT(q.*, $9::text, $5::int, 'geom'{{if .ID}}, 'id'{{end}} ORDER BY t.point_count DESC, {{.Order}})
        FROM feats AS t,
             LATERAL (SELECT t.geom{{if .ID}}, t.{{.ID}} AS id{{end}}{{range .Props}}, {{.Value "t"}} AS {{.Column}}{{end}}, t.point_count) AS q
        WHERE t.geom IS NOT NULL)
    UNION ALL
    SELECT fit.level + 1, (
        -- Level + 1: cells 2^shift wide, their first feature in order_by
        -- drawn with the sum of their counts.
        SELECT ST_AsMVT(q.*, $9::text, $5::int, 'geom'{{if .ID}}, 'id'{{end}} ORDER BY t.point_count DESC, {{.Order}})
        FROM (SELECT DISTINCT ON (t.cx >> s.shift, t.cy >> s.shift) t.geom, t.cx, t.cy{{range .Cols}}, t.{{.As}}{{end}},
                     sum(t.point_count) OVER (PARTITION BY t.cx >> s.shift, t.cy >> s.shift)::bigint AS point_count
              FROM feats AS t, (SELECT fit.level + env.clustered AS shift FROM env) AS s
              WHERE t.geom IS NOT NULL
              ORDER BY t.cx >> s.shift, t.cy >> s.shift, {{.Order}}) AS t,
             LATERAL (SELECT t.geom{{if .ID}}, t.{{.ID}} AS id{{end}}{{range .Props}}, {{.Value "t"}} AS {{.Column}}{{end}}, t.point_count) AS q)
    FROM fit, env
    WHERE length(fit.mvt) > env.budget AND fit.level < env.last_level
)
SELECT fit.mvt, fit.level
FROM fit
ORDER BY fit.level DESC
LIMIT 1
