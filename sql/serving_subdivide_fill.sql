-- Fill a layer's pieces: every row cut into pieces of at most $1 vertices,
-- repaired where invalid, with the row's columns. Pieces have two
-- dimensions, as tiles draw them: a row's Z and M are dropped
-- (ST_Force2D; the pieces' column takes neither).
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
-- Lines are not clipped: rectangle clipping (below) drops the segments
-- lying on a clip box's edge. Each line is cut into runs of at most $1
-- consecutive vertices (see written), not by ST_Subdivide.
-- Polygons are cut first, then repaired: ST_MakeValid of a whole invalid
-- country border (10^5–10^6 vertices) runs for many minutes and cannot
-- be interrupted, and ST_Subdivide refuses an invalid polygon (its
-- clipping is a GEOS overlay). So each row's parts (ST_Dump) are cut into
-- quarters of their box with ST_ClipByBox2D (rectangle clipping) until a
-- chunk has at most $3 vertices; a chunk that is not valid (a clip's
-- artefact: rings that touch) is repaired with ST_MakeValid (its parts of
-- the layer's dimension kept), and every chunk is then cut with
-- ST_Subdivide. A chunk that repairs to nothing is left out.
-- Rectangle clipping is right on valid input only: clipping an invalid
-- part (a ring crossing itself, a hole outside its shell) can keep a
-- whole box of water as land. So an invalid part is not cut as it is:
-- the pieces must cover what ST_Covers covers on the row, PostGIS's
-- point-in-polygon (inside the exterior ring by its winding, and not
-- inside any interior ring), and a repair of the whole part does not
-- (both methods of ST_MakeValid turn a hole lying outside its shell into
-- land) and runs for minutes on a country. Instead each ring of the part
-- is taken alone as a polygon and repaired where invalid
-- (method=structure: the area a ring winds around, either way), which
-- takes 0.2 s for the largest ring (the exterior ring of Canada's
-- mainland, 115,707 vertices; it is its 140,606 holes that made the
-- whole repair slow); the repaired exterior ring is cut into chunks as
-- above (it is valid), and from each chunk the union of the repaired
-- interior rings whose box meets it is subtracted (ST_Difference): a hole
-- outside the shell subtracts nothing, a hole across it only what lies
-- inside. Every GEOS call is on one ring, one chunk or the holes meeting
-- one chunk, so the statement can be cancelled between them. (A chunk is
-- cut by its shell's vertices only: a simple shell with many heavy holes,
-- a sea around its islands, is one chunk and one ST_Difference with all
-- of them.) The LATERALs that repair and subtract end in OFFSET 0, so
-- that the planner does not evaluate them again in the filter on them.
-- A part is cut as it is (ok) when it is valid or has no area (a line;
-- ST_DumpRings takes polygons only).
-- The row's columns are carried in parts under positional names (c0,
-- c1…: a layer's column may be called part, ok or g), the other CTEs
-- carry the part's number.
-- Result: one row (pieces bigint, repaired bigint): the pieces written and
-- the source rows that were not valid (ST_IsValid of the row's geometry,
-- each row once, whatever its id), which were repaired.
WITH RECURSIVE parts (part, g, ok{{range $i, $c := .Cols}}, c{{$i}}{{end}}) AS MATERIALIZED (
    SELECT row_number() OVER (), d.geom, NOT $4::bool OR ST_Dimension(d.geom) < 2 OR ST_IsValid(d.geom){{range .Cols}}, t.{{.}}{{end}}
    FROM {{.Source}} AS t,
         LATERAL ST_Dump(ST_Force2D(t.{{.Geom}})) AS d
    WHERE t.{{.Geom}} IS NOT NULL
),
rings AS MATERIALIZED (
    SELECT p.part, r.path[1] = 0 AS shell, f.g
    FROM parts AS p,
         LATERAL ST_DumpRings(p.g) AS r,
         LATERAL (SELECT CASE WHEN ST_IsValid(r.geom) THEN r.geom
                              ELSE ST_CollectionExtract(ST_MakeValid(r.geom, 'method=structure'), 3) END AS g OFFSET 0) AS f
    WHERE NOT p.ok AND NOT ST_IsEmpty(f.g)
),
cut (part, ok, g, n, depth) AS (
    SELECT s.part, s.ok, s.g, ST_NPoints(s.g), 0
    FROM (SELECT p.part, true, p.g FROM parts AS p WHERE p.ok
          UNION ALL
          SELECT r.part, false, r.g FROM rings AS r WHERE r.shell) AS s(part, ok, g)
    UNION ALL
    SELECT cut.part, cut.ok, c.g, ST_NPoints(c.g), cut.depth + 1
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
    SELECT row_number() OVER () AS chunk, cut.part, cut.ok, cut.g, ST_IsValid(cut.g) AS valid
    FROM cut
    WHERE NOT $4::bool OR cut.n <= $3::int OR cut.depth = 24
),
wet AS (
    SELECT k.chunk, ST_Union(h.g) AS g
    FROM chunks AS k
    JOIN rings AS h ON h.part = k.part AND NOT h.shell AND h.g && k.g
    WHERE NOT k.ok
    GROUP BY k.chunk
),
written AS (
    INSERT INTO {{.Next}} ({{.Geom}}{{range .Cols}}, {{.}}{{end}})
    SELECT s.g{{range $i, $c := .Cols}}, p.c{{$i}}{{end}}
    FROM chunks AS k
         JOIN parts AS p ON p.part = k.part
         LEFT JOIN wet AS w ON w.chunk = k.chunk,
         LATERAL (SELECT CASE WHEN k.valid THEN k.g ELSE ST_CollectionExtract(ST_MakeValid(k.g), $2::int) END AS g OFFSET 0) AS f,
         LATERAL (SELECT CASE WHEN w.g IS NULL THEN f.g ELSE ST_CollectionExtract(ST_Difference(f.g, w.g), 3) END AS g OFFSET 0) AS d,
         LATERAL (SELECT s.g FROM ST_Subdivide(d.g, $1::int) AS s(g) WHERE $4::bool
                  UNION ALL
                  -- A line: runs of at most $1 consecutive vertices, each
                  -- run's last vertex the next one's first. ST_Subdivide cuts
                  -- by boxes, and a line that retraces itself (a bus
                  -- route's laps) has more than $1 vertices in every box
                  -- down to its smallest: one track of 6,001 vertices made
                  -- 114,427 pieces.
                  SELECT ST_MakeLine(array_agg(p.geom ORDER BY p.path[1]))
                  FROM ST_Dump(d.g) AS l,
                       LATERAL ST_DumpPoints(l.geom) AS p,
                       LATERAL (SELECT (p.path[1] - 1) / ($1::int - 1) AS run,
                                       p.path[1] > 1 AND (p.path[1] - 1) % ($1::int - 1) = 0 AS joint,
                                       p.path[1] = ST_NPoints(l.geom) AS last) AS x,
                       LATERAL (SELECT x.run - 1 WHERE x.joint
                                UNION ALL
                                SELECT x.run WHERE NOT (x.joint AND x.last)) AS r(run)
                  WHERE NOT $4::bool AND GeometryType(l.geom) = 'LINESTRING'
                  GROUP BY l.path, r.run
                  UNION ALL
                  -- Anything else a line layer's row holds (a polygon, a
                  -- point, a curve) is cut as before.
                  SELECT s.g
                  FROM ST_Dump(d.g) AS l,
                       LATERAL ST_Subdivide(l.geom, $1::int) AS s(g)
                  WHERE NOT $4::bool AND GeometryType(l.geom) <> 'LINESTRING') AS s(g)
    WHERE NOT ST_IsEmpty(d.g)
    RETURNING 1
)
SELECT (SELECT count(*) FROM written)::bigint,
       (SELECT count(*) FROM {{.Source}} AS t
        WHERE t.{{.Geom}} IS NOT NULL AND NOT ST_IsValid(t.{{.Geom}}))::bigint
