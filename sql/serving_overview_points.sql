-- Fill one zoom's point overview: one row per cluster cell, the cell's
-- first point in the layer's order_by with the number of points in it.
--
-- Template fields (double braces) come from the layer catalog, quoted with
-- pgx.Identifier (rendered per build by package serving):
--   .Next          the new table (created empty just before, see
--                  serving_overview_create.sql), filled by this INSERT
--   .From          the relation read: the layer's table (.FromSource), or
--                  the overview just built for the zoom above
--   .Geom          .From's geometry column; .GeomExpr it in EPSG:3857,
--                  in two dimensions (ST_Force2D: a table's Z and M go),
--                  by ST_Transform, or, when that failed on a row outside
--                  the projection's domain, geotoll.tile_transform (NULL
--                  for a row it cannot draw: left out)
--   .Cols          the layer's columns carried (id, properties, order_by),
--                  each read as .Read from .From (its name in the table,
--                  the stored one in an overview) and carried and stored
--                  as .As (c0, c1…), so that none is taken for one of the
--                  columns this fill names itself (cx, cy, geom,
--                  point_count)
--   .Order         the layer's order_by over alias c and the .As names
--   .FromSource    read the layer's own rows (else merge the cells of the
--                  zoom above: each of its cells lies in one of ours)
-- Bound:
--   $1  π·R: cell x = floor((x + $1) / $2), likewise y
--   $2  cell side in metres (this zoom)
-- Cells of the zoom above are half as wide on the same origin, so their
-- indices halve exactly (>> 1) and their counts add up.
INSERT INTO {{.Next}} (cx, cy, geom, point_count{{range .Cols}}, {{.As}}{{end}})
SELECT DISTINCT ON (c.cx, c.cy) c.cx, c.cy, c.geom,
       sum(c.point_count) OVER (PARTITION BY c.cx, c.cy)::bigint{{range .Cols}}, c.{{.As}}{{end}}
FROM (
{{- if .FromSource}}
    SELECT floor((ST_X(ST_GeometryN(p.geom, 1)) + $1::float8) / $2::float8)::bigint AS cx,
           floor((ST_Y(ST_GeometryN(p.geom, 1)) + $1::float8) / $2::float8)::bigint AS cy,
           p.geom, 1::bigint AS point_count{{range .Cols}}, p.{{.As}}{{end}}
    FROM (SELECT {{.GeomExpr}} AS geom{{range .Cols}}, t.{{.Read}} AS {{.As}}{{end}}
          FROM {{.From}} AS t
          WHERE t.{{.Geom}} IS NOT NULL AND NOT ST_IsEmpty(t.{{.Geom}})) AS p
    WHERE p.geom IS NOT NULL -- a row outside the projection (geotoll.tile_transform)
      -- A point no tile meets is left out: a coordinate that is NaN (which
      -- PostgreSQL orders above every number) or infinite, or beyond twice
      -- π·R, whose cell would not fit a bigint (floor(NaN)::bigint fails).
      AND abs(ST_X(ST_GeometryN(p.geom, 1))) <= 2 * $1::float8
      AND abs(ST_Y(ST_GeometryN(p.geom, 1))) <= 2 * $1::float8
{{- else}}
    SELECT o.cx >> 1 AS cx, o.cy >> 1 AS cy, o.geom, o.point_count{{range .Cols}}, o.{{.Read}}{{end}}
    FROM {{.From}} AS o
    WHERE $1::float8 IS NOT NULL AND $2::float8 IS NOT NULL
{{- end}}
) AS c
ORDER BY c.cx, c.cy, {{.Order}}
