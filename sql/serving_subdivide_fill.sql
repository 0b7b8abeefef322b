-- Fill a layer's pieces: every row cut into pieces of at most $1 vertices,
-- the pieces that are not valid repaired, with the row's columns.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Next     the new table (created empty just before), filled here
--   .Source   the layer's table     .Geom  its geometry column
--   .Cols     the layer's columns carried (id, properties, order_by)
--   .ID       the id column
-- Bound:
--   $1  the most vertices of a piece (ST_Subdivide's max_vertices)
--   $2  the dimension kept of a repaired piece: 3 polygons, 2 lines
--       (ST_CollectionExtract's type)
--   $3  the most vertices of a chunk (below)
--   $4  true for polygons, cut into chunks first; false for lines
-- Lines go to ST_Subdivide whole: it needs no valid line, and rectangle
-- clipping (below) drops the segments lying on a clip box's edge.
-- Polygons are cut first, then repaired: ST_MakeValid of a whole invalid
-- country border (10^5–10^6 vertices) runs for many minutes and cannot
-- be interrupted, and ST_Subdivide refuses an invalid polygon (its
-- clipping is a GEOS overlay). So each row's parts (ST_Dump) are cut into
-- quarters of their box with ST_ClipByBox2D (rectangle clipping, which
-- takes invalid input as it is) until a chunk has at most $3 vertices; a
-- chunk that is not valid (a source's fault or a clip's artefact) is
-- repaired with ST_MakeValid (its parts of the layer's dimension kept),
-- and every chunk is then cut with ST_Subdivide. A chunk that repairs to
-- nothing (a spike, a ring of no area) is left out.
-- Result: one row (pieces bigint, repaired bigint): the pieces written and
-- the source rows that were not valid (ST_IsValid of the row's geometry,
-- each row once, whatever its id), which were repaired.
WITH RECURSIVE cut (g, n, depth{{range .Cols}}, {{.}}{{end}}) AS (
    SELECT d.geom, ST_NPoints(d.geom), 0{{range .Cols}}, t.{{.}}{{end}}
    FROM {{.Source}} AS t,
         LATERAL ST_Dump(t.{{.Geom}}) AS d
    WHERE t.{{.Geom}} IS NOT NULL
    UNION ALL
    SELECT c.g, ST_NPoints(c.g), cut.depth + 1{{range .Cols}}, cut.{{.}}{{end}}
    FROM cut,
         LATERAL (SELECT ST_XMin(cut.g) AS x0, ST_YMin(cut.g) AS y0, ST_XMax(cut.g) AS x1, ST_YMax(cut.g) AS y1) AS b,
         LATERAL (VALUES (ST_MakeBox2D(ST_Point(b.x0, b.y0), ST_Point((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2))),
                         (ST_MakeBox2D(ST_Point((b.x0 + b.x1) / 2, b.y0), ST_Point(b.x1, (b.y0 + b.y1) / 2))),
                         (ST_MakeBox2D(ST_Point(b.x0, (b.y0 + b.y1) / 2), ST_Point((b.x0 + b.x1) / 2, b.y1))),
                         (ST_MakeBox2D(ST_Point((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2), ST_Point(b.x1, b.y1)))) AS q(box),
         LATERAL (SELECT ST_ClipByBox2D(cut.g, q.box) AS g) AS c
    WHERE $4::bool AND cut.n > $3::int AND cut.depth < 24 AND NOT ST_IsEmpty(c.g)
),
chunks AS MATERIALIZED (
    SELECT cut.g, ST_IsValid(cut.g) AS ok{{range .Cols}}, cut.{{.}}{{end}}
    FROM cut
    WHERE NOT $4::bool OR cut.n <= $3::int OR cut.depth = 24
),
written AS (
    INSERT INTO {{.Next}} ({{.Geom}}{{range .Cols}}, {{.}}{{end}})
    SELECT p.g{{range .Cols}}, k.{{.}}{{end}}
    FROM chunks AS k,
         LATERAL (SELECT CASE WHEN k.ok THEN k.g ELSE ST_CollectionExtract(ST_MakeValid(k.g), $2::int) END AS g) AS f,
         LATERAL ST_Subdivide(f.g, $1::int) AS p(g)
    WHERE NOT ST_IsEmpty(f.g)
    RETURNING 1
)
SELECT (SELECT count(*) FROM written)::bigint,
       (SELECT count(*) FROM {{.Source}} AS t
        WHERE t.{{.Geom}} IS NOT NULL AND NOT ST_IsValid(t.{{.Geom}}))::bigint
