-- The cells of a density model (package density): the features of one
-- relation grouped by weight class (heavy: stored in at least $4 bytes) and
-- by the grid cell that holds the centre of their bounding box, at their fit
-- level — the finest level whose cells are at least as wide and as tall as
-- the box (a box that fits a cell of level f meets at most 2×2 cells of that
-- level).
--
-- Template fields (double braces) are fixed at start-up: the relation and
-- its geometry column, quoted with pgx.Identifier; LonLat, set when the
-- boxes are read in EPSG:4326 (else they are EPSG:3857 metres); Transform,
-- set when the column is in another SRID than 3857 or 4326: each
-- feature's box (what the index filter compares, in the column's SRID) is
-- transformed to EPSG:4326 — its corners, not the geometry's every vertex
-- — and LonLat is set too; Vertices, set when vertices are summed with
-- ST_NPoints (else each feature is one vertex).
-- Everything else is bound:
--   $1  finest level L (int, 1..16)      $2  2^L (float8)
--   $3  sampling fraction in (0, 1]: a row is read with this probability
--       and weighs 1/$3 (1: every row, weight 1)
--   $4  a geometry stored in at least this many bytes (pg_column_size, no
--       detoasting) is heavy: always read, with weight 1
--   $5  giant level G: a heavy feature whose fit level is at most G is a
--       giant, grouped alone by the cell of the finest level that holds
--       its box centre (in practice one row per feature), so the model can
--       keep it whole
--
-- Coordinates are normalised Web Mercator, clamped into [0, 1]: x is 0 at
-- 180°W and 1 at 180°E, y is 0 at 85.0511°S and 1 at 85.0511°N.
-- One row per class and cell: heavy; fit level f; column i and row j at
-- level f; the
-- weighted feature count and vertex sum; the weighted sums of box widths
-- and heights; the extent of the box centres, doubled (x0 + x1, y0 + y1);
-- the weighted sums of the doubled centres; the giant's cell at the finest
-- level (ix·2^20 + iy), or -1 for the features grouped by cell.
-- The innermost subqueries end in OFFSET 0 so that the planner computes
-- each box once instead of inlining it into every expression.
SELECT heavy, f, ix >> ($1::int - f), iy >> ($1::int - f),
       sum(w), sum(w * np), sum(w * (x1 - x0)), sum(w * (y1 - y0)),
       min(x0 + x1), max(x0 + x1), min(y0 + y1), max(y0 + y1),
       sum(w * (x0 + x1)), sum(w * (y0 + y1)),
       CASE WHEN heavy AND f <= $5::int THEN ix::bigint * 1048576 + iy ELSE -1 END AS giant
FROM (
    SELECT least($1::int, floor(-ln(greatest(x1 - x0, y1 - y0, 1 / $2::float8)) / ln(2::float8)))::int AS f,
           least($2::float8 - 1, floor((x0 + x1) * $2::float8 / 2))::int AS ix,
           least($2::float8 - 1, floor((y0 + y1) * $2::float8 / 2))::int AS iy,
           x0, x1, y0, y1, w, np, heavy
    FROM (
{{- if .LonLat}}
        SELECT greatest(0::float8, least(1::float8, (ST_XMin(b) + 180) / 360)) AS x0,
               greatest(0::float8, least(1::float8, (ST_XMax(b) + 180) / 360)) AS x1,
               0.5 + asinh(tan(radians(greatest(-85.05112877980659::float8, least(85.05112877980659::float8, ST_YMin(b)))))) / (2 * pi()) AS y0,
               0.5 + asinh(tan(radians(greatest(-85.05112877980659::float8, least(85.05112877980659::float8, ST_YMax(b)))))) / (2 * pi()) AS y1,
               w, np, heavy
{{- else}}
        SELECT greatest(0::float8, least(1::float8, (ST_XMin(b) + 20037508.342789244) / 40075016.68557849)) AS x0,
               greatest(0::float8, least(1::float8, (ST_XMax(b) + 20037508.342789244) / 40075016.68557849)) AS x1,
               greatest(0::float8, least(1::float8, (ST_YMin(b) + 20037508.342789244) / 40075016.68557849)) AS y0,
               greatest(0::float8, least(1::float8, (ST_YMax(b) + 20037508.342789244) / 40075016.68557849)) AS y1,
               w, np, heavy
{{- end}}
        FROM (
            SELECT b, heavy, CASE WHEN heavy OR $3::float8 >= 1 THEN 1 ELSE 1 / $3::float8 END AS w, np
            FROM (
                SELECT {{if .Transform}}ST_Transform(ST_SetSRID(t.{{.Geom}}::box2d::geometry, ST_SRID(t.{{.Geom}})), 4326)::box3d{{else}}t.{{.Geom}}::box3d{{end}} AS b,
                       pg_column_size(t.{{.Geom}}) >= $4::int AS heavy,
                       {{if .Vertices}}ST_NPoints(t.{{.Geom}}){{else}}1{{end}}::float8 AS np
                FROM {{.Table}} AS t
                WHERE $3::float8 >= 1 OR pg_column_size(t.{{.Geom}}) >= $4::int OR random() < $3::float8
                OFFSET 0
            ) AS h
        ) AS r
        WHERE b IS NOT NULL
        OFFSET 0
    ) AS n
) AS c
GROUP BY 1, 2, 3, 4, giant
