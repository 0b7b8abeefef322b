-- Fill one zoom's line or polygon overview: every feature at least the
-- zoom's smallest size, and of the smaller ones the first in order_by of
-- each cell, simplified to the zoom's tolerance and kept valid.
--
-- Template fields (double braces) come from the layer catalog, quoted with
-- pgx.Identifier (rendered per build by package serving):
--   .Next          the new table (created empty just before), filled here
--   .From          the relation read: the layer's table, or the overview
--                  just built for the zoom below (finer, so simplifying it
--                  again at this zoom's tolerance costs a fraction)
--   .Geom          .From's geometry column; .GeomExpr it in EPSG:3857
--   .Cols          the layer's columns carried (id, properties, order_by)
--   .Order         the layer's order_by over alias c
--   .Extract       0 to keep whatever ST_MakeValid returns (mixed layers),
--                  else the ST_CollectionExtract type: 2 lines, 3 polygons
-- Bound:
--   $1  tolerance in metres (Douglas-Peucker, collapsed rings kept)
--   $2  smallest size in metres: a feature whose box is narrower and lower
--       than this is small (a point, of no extent, is not)
--   $3  π·R and $4 the cell side in metres: a small feature's cell is
--       floor((centre of its box + $3) / $4) on each axis; each cell keeps
--       its first small feature in order_by
-- Simplification is ST_Simplify; only an output that is not valid is
-- repaired (ST_MakeValid), so valid output costs one validity check
-- instead of a topology-preserving simplification (see BENCHMARKS.md).
INSERT INTO {{.Next}} (geom{{range .Cols}}, {{.}}{{end}})
SELECT s.geom{{range .Cols}}, s.{{.}}{{end}}
FROM (
    SELECT CASE WHEN ST_IsValid(d.geom) THEN d.geom
{{- if .Extract}}
                ELSE ST_CollectionExtract(ST_MakeValid(d.geom), {{.Extract}}) END AS geom
{{- else}}
                ELSE ST_MakeValid(d.geom) END AS geom
{{- end}}{{range .Cols}}, d.{{.}}{{end}}
    FROM (
        SELECT ST_Simplify(k.geom, $1::float8, true) AS geom{{range .Cols}}, k.{{.}}{{end}}
        FROM (
            SELECT c.geom{{range .Cols}}, c.{{.}}{{end}}
            FROM (SELECT {{.GeomExpr}} AS geom{{range .Cols}}, t.{{.}}{{end}} FROM {{.From}} AS t
                  WHERE t.{{.Geom}} IS NOT NULL) AS c,
                 LATERAL (SELECT Box2D(c.geom) AS b) AS box
            WHERE ST_XMax(box.b) - ST_XMin(box.b) >= $2::float8
               OR ST_YMax(box.b) - ST_YMin(box.b) >= $2::float8
               OR (ST_XMax(box.b) = ST_XMin(box.b) AND ST_YMax(box.b) = ST_YMin(box.b))
            UNION ALL
            (SELECT DISTINCT ON (cell.cx, cell.cy) c.geom{{range .Cols}}, c.{{.}}{{end}}
            FROM (SELECT {{.GeomExpr}} AS geom{{range .Cols}}, t.{{.}}{{end}} FROM {{.From}} AS t
                  WHERE t.{{.Geom}} IS NOT NULL) AS c,
                 LATERAL (SELECT Box2D(c.geom) AS b) AS box,
                 LATERAL (SELECT floor(((ST_XMin(box.b) + ST_XMax(box.b)) / 2 + $3::float8) / $4::float8)::bigint AS cx,
                                 floor(((ST_YMin(box.b) + ST_YMax(box.b)) / 2 + $3::float8) / $4::float8)::bigint AS cy) AS cell
            WHERE ST_XMax(box.b) - ST_XMin(box.b) < $2::float8
              AND ST_YMax(box.b) - ST_YMin(box.b) < $2::float8
              AND (ST_XMax(box.b) > ST_XMin(box.b) OR ST_YMax(box.b) > ST_YMin(box.b))
            ORDER BY cell.cx, cell.cy, {{.Order}})
        ) AS k
    ) AS d
) AS s
WHERE NOT ST_IsEmpty(s.geom)
