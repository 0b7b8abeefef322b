-- Fill one zoom's line or polygon overview: every feature at least the
-- zoom's smallest size, and of the smaller ones the first in order_by of
-- each cell, simplified to the zoom's tolerance.
--
-- Template fields (double braces) come from the layer catalog, quoted with
-- pgx.Identifier (rendered per build by package serving):
--   .Next          the new table (created empty just before), filled here
--   .From          the relation read: the layer's table, or the overview
--                  just built for the zoom below (finer, so simplifying it
--                  again at this zoom's tolerance costs a fraction)
--   .Geom          .From's geometry column; .GeomExpr it in EPSG:3857,
--                  in two dimensions (ST_Force2D: a table's Z and M go),
--                  by ST_Transform, or, when that failed on a row outside
--                  the projection's domain, geotoll.tile_transform (NULL
--                  for a row it cannot draw: left out)
--   .Cols          the layer's columns carried (id, properties, order_by),
--                  each read as .Read from .From (its name in the table,
--                  the stored one in an overview) and carried and stored
--                  as .As (c0, c1…), so that none is taken for geom
--   .Order         the layer's order_by over alias c and the .As names
-- Bound:
--   $1  tolerance in metres (Douglas-Peucker): parts that collapse below it
--       go (an archipelago of islands under a pixel keeps none of them:
--       kept, their vertices would outnumber the rest), unless the whole
--       feature would; then its collapsed parts are kept
--   $2  smallest size in metres: a feature whose box is narrower and lower
--       than this is small (a point, of no extent, is not)
--   $3  π·R and $4 the cell side in metres: a small feature's cell is
--       floor((centre of its box + $3) / $4) on each axis; each cell keeps
--       its first small feature in order_by
-- Simplification is ST_Simplify, and nothing is repaired: an overview may
-- hold a polygon that is not valid (where the source's was not, or where
-- Douglas-Peucker crossed a ring); tiles are drawn through ST_AsMVTGeom,
-- whose polygon clipping (wagyu) returns valid polygons. Repairing here
-- would cost minutes per large country border (see BENCHMARKS.md).
INSERT INTO {{.Next}} (geom{{range .Cols}}, {{.As}}{{end}})
SELECT d.geom{{range .Cols}}, d.{{.As}}{{end}}
FROM (
    SELECT CASE WHEN simple.g IS NULL OR ST_IsEmpty(simple.g) THEN ST_Simplify(k.geom, $1::float8, true)
                ELSE simple.g END AS geom{{range .Cols}}, k.{{.As}}{{end}}
    FROM (
        SELECT c.geom{{range .Cols}}, c.{{.As}}{{end}}
        FROM (SELECT {{.GeomExpr}} AS geom{{range .Cols}}, t.{{.Read}} AS {{.As}}{{end}} FROM {{.From}} AS t
              WHERE t.{{.Geom}} IS NOT NULL) AS c,
             LATERAL (SELECT Box2D(c.geom) AS b) AS box
        WHERE ST_XMax(box.b) - ST_XMin(box.b) >= $2::float8
           OR ST_YMax(box.b) - ST_YMin(box.b) >= $2::float8
           OR (ST_XMax(box.b) = ST_XMin(box.b) AND ST_YMax(box.b) = ST_YMin(box.b))
        UNION ALL
        (SELECT DISTINCT ON (cell.cx, cell.cy) c.geom{{range .Cols}}, c.{{.As}}{{end}}
        FROM (SELECT {{.GeomExpr}} AS geom{{range .Cols}}, t.{{.Read}} AS {{.As}}{{end}} FROM {{.From}} AS t
              WHERE t.{{.Geom}} IS NOT NULL) AS c,
             LATERAL (SELECT Box2D(c.geom) AS b) AS box,
             LATERAL (SELECT floor(((ST_XMin(box.b) + ST_XMax(box.b)) / 2 + $3::float8) / $4::float8)::bigint AS cx,
                             floor(((ST_YMin(box.b) + ST_YMax(box.b)) / 2 + $3::float8) / $4::float8)::bigint AS cy) AS cell
        WHERE ST_XMax(box.b) - ST_XMin(box.b) < $2::float8
          AND ST_YMax(box.b) - ST_YMin(box.b) < $2::float8
          AND (ST_XMax(box.b) > ST_XMin(box.b) OR ST_YMax(box.b) > ST_YMin(box.b))
        ORDER BY cell.cx, cell.cy, {{.Order}})
    ) AS k,
    LATERAL (SELECT ST_Simplify(k.geom, $1::float8, false) AS g) AS simple
) AS d
WHERE NOT ST_IsEmpty(d.geom)
