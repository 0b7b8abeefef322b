-- Cut one zoom's line or polygon overview into pieces: the overview as
-- tiles read it when it is stored in pieces (tiles.Storage.InPieces),
-- each piece with its feature's number (fid), whole box and columns.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Next     the pieces' table (created empty just before), filled here
--   .From     the zoom's whole features (a scratch table of the build:
--             geom, the carried columns, fid)
--   .Cols     the carried columns (c0, c1…)
--   .Lines    the overview holds lines
-- Bound:
--   $1  the most vertices of a piece (max_vertices)
--   $2  π·R and $3 the width of a tile of the zoom, in metres: the cells
--       small elements are gathered by
-- A feature is cut element by element: a line's parts; a polygon's rings,
-- each ring of each part (ST_DumpRings: exterior and interior alike) a
-- polygon of its own. An element of more than $1 vertices is cut alone:
-- a line with ST_Subdivide, a ring into quarters of its box with
-- ST_ClipByBox2D until each has at most $1 (a ring that is not valid
-- alone, one crossing itself, is first repaired with ST_MakeValid
-- method=linework, which keeps what the ring encloses an odd number of
-- times, as even-odd filling does: rectangle clipping is right on valid
-- input only; method=structure would fill what a ring winds around
-- twice).
-- The smaller elements (islands, lakes) are gathered per feature and
-- per cell of the zoom's tiles that holds their box's centre into pieces
-- of at most 2 × $1 vertices (ST_Collect; in order of their box's
-- corner, those that start before $1 vertices are gathered), so that a
-- tile does not read a row per lake. Tiles draw a feature's pieces near
-- them as one collection with ST_AsMVTGeom, whose polygon clipping
-- (wagyu) fills rings even-odd: where a hole's pieces lie over its
-- shell's the area is empty, as it is when the whole polygon is drawn —
-- so a feature drawn from its pieces covers what it covers drawn whole,
-- valid or not (a hole outside its shell is filled either way), and
-- nothing is repaired but single rings that cross themselves. A whole polygon's holes are what
-- made cutting it slow (Natural Earth's 10 m Russia keeps 157,313 rings
-- at z7: assigning each to the pieces of its shell, or subtracting them,
-- took minutes); a ring alone is cut in linear time. The fid and box
-- (feats, materialized) are read once per feature, not once per piece:
-- a whole border is large.
WITH RECURSIVE feats AS MATERIALIZED (
    SELECT w.fid, Box2D(w.geom) AS box{{range .Cols}}, w.{{.}}{{end}}
    FROM {{.From}} AS w
),
elements (fid, g, n) AS MATERIALIZED (
    SELECT e.fid, e.g, ST_NPoints(e.g)
    FROM (
        {{- if .Lines}}
        SELECT w.fid, d.geom
        FROM {{.From}} AS w,
             LATERAL ST_Dump(w.geom) AS d
        {{- else}}
        SELECT w.fid, CASE WHEN ST_NPoints(r.geom) <= $1::int OR ST_IsValid(r.geom) THEN r.geom
                           ELSE ST_CollectionExtract(ST_MakeValid(r.geom, 'method=linework'), 3) END
        FROM {{.From}} AS w,
             LATERAL ST_Dump(w.geom) AS d,
             LATERAL ST_DumpRings(d.geom) AS r
        WHERE ST_Dimension(d.geom) = 2
        {{- end}}
    ) AS e(fid, g)
    WHERE NOT ST_IsEmpty(e.g)
),
{{- if .Lines}}
large (fid, g) AS (
    SELECT e.fid, s.g
    FROM elements AS e,
         LATERAL ST_Subdivide(e.g, $1::int) AS s(g)
    WHERE e.n > $1::int
),
{{- else}}
quarters (fid, g, n, depth) AS (
    SELECT e.fid, e.g, e.n, 0
    FROM elements AS e
    WHERE e.n > $1::int
    UNION ALL
    SELECT q.fid, c.g, ST_NPoints(c.g), q.depth + 1
    FROM quarters AS q,
         LATERAL (SELECT ST_XMin(q.g) AS x0, ST_YMin(q.g) AS y0, ST_XMax(q.g) AS x1, ST_YMax(q.g) AS y1) AS b,
         LATERAL (VALUES (ST_MakeBox2D(ST_Point(b.x0, b.y0), ST_Point((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2))),
                         (ST_MakeBox2D(ST_Point((b.x0 + b.x1) / 2, b.y0), ST_Point(b.x1, (b.y0 + b.y1) / 2))),
                         (ST_MakeBox2D(ST_Point(b.x0, (b.y0 + b.y1) / 2), ST_Point((b.x0 + b.x1) / 2, b.y1))),
                         (ST_MakeBox2D(ST_Point((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2), ST_Point(b.x1, b.y1)))) AS k(box),
         -- ST_ClipByBox2D returns NULL where GEOS's rectangle clipping
         -- fails (seen on the valid repair of a ring crossing itself):
         -- that quarter is cut by an overlay instead, on the chunk made
         -- valid, not lost.
         LATERAL (SELECT coalesce(ST_ClipByBox2D(q.g, k.box),
                                  ST_CollectionExtract(ST_Intersection(ST_MakeValid(q.g), ST_SetSRID(k.box::geometry, ST_SRID(q.g))), 3)) AS g) AS c
    WHERE q.n > $1::int AND q.depth < 24 AND NOT ST_IsEmpty(c.g)
),
large (fid, g) AS (
    SELECT q.fid, q.g FROM quarters AS q WHERE q.n <= $1::int OR q.depth = 24
),
{{- end}}
small (fid, cx, cy, batch, g) AS (
    SELECT s.fid, s.cx, s.cy, (sum(s.n) OVER (PARTITION BY s.fid, s.cx, s.cy ORDER BY s.x, s.y, s.n ROWS UNBOUNDED PRECEDING) - s.n) / $1::int, s.g
    FROM (SELECT e.fid, e.g, e.n, ST_XMin(e.g) AS x, ST_YMin(e.g) AS y,
                 floor(((ST_XMin(e.g) + ST_XMax(e.g)) / 2 + $2::float8) / $3::float8) AS cx,
                 floor(((ST_YMin(e.g) + ST_YMax(e.g)) / 2 + $2::float8) / $3::float8) AS cy
          FROM elements AS e
          WHERE e.n <= $1::int) AS s
),
cut (fid, g) AS (
    SELECT l.fid, l.g FROM large AS l
    UNION ALL
    SELECT s.fid, ST_Collect(s.g) FROM small AS s GROUP BY s.fid, s.cx, s.cy, s.batch
)
INSERT INTO {{.Next}} (geom{{range .Cols}}, {{.}}{{end}}, fid, box)
SELECT ST_SetSRID(c.g, 3857){{range .Cols}}, f.{{.}}{{end}}, f.fid, f.box
FROM cut AS c
JOIN feats AS f ON f.fid = c.fid
