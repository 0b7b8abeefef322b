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
-- set when the column is in another SRID than 3857 or 4326, and LonLat with
-- it: each feature's box (what the index filter compares, in the column's
-- SRID) is transformed to EPSG:4326, not the geometry's every vertex — its
-- corners, and when they span more than a degree its outline cut into
-- eighths of its longer side, so that the box follows edges the projection
-- curves; a box that holds a pole ($6..$9) reaches that pole at every
-- longitude, and one whose outline jumps across the antimeridian (shorter
-- with its longitudes shifted into [0, 360)) is cut in two at ±180°;
-- Safe, set for the query that transforms with geotoll.density_transform,
-- which returns NULL for a box outside the projection's domain (the box is
-- skipped and tallied) where ST_Transform fails the query; Vertices, set
-- when vertices are summed with ST_NPoints (else each feature is one
-- vertex).
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
--   $6, $7  with Transform: the north pole's x and y in the column's SRID,
--       NULL when it is no single point there or outside the domain
--   $8, $9  the south pole's, alike
--
-- Coordinates are normalised Web Mercator, clamped into [0, 1]: x is 0 at
-- 180°W and 1 at 180°E, y is 0 at 85.0511°S and 1 at 85.0511°N. A
-- latitude within 1e-9° of the equator is taken as on it (y 0.5): radians()
-- of a subnormal one (1e-323) underflows to 0, which PostgreSQL raises as
-- an error, and one such feature would stop every build of the model.
-- One row per class and cell: heavy; fit level f; column i and row j at
-- level f; the
-- weighted feature count and vertex sum; the weighted sums of box widths
-- and heights; the extent of the box centres, doubled (x0 + x1, y0 + y1);
-- the weighted sums of the doubled centres; the giant's cell at the finest
-- level (ix·2^20 + iy), or -1 for the features grouped by cell. Tallies
-- come as rows of fit level -1 (the boxes skipped) and -2 (the second
-- parts of boxes cut at the antimeridian, not features of their own), with
-- their weighted count.
-- The innermost subqueries end in OFFSET 0 so that the planner computes
-- each box once instead of inlining it into every expression.
SELECT heavy, f, ix >> ($1::int - f), iy >> ($1::int - f),
       sum(w), sum(w * np), sum(w * (x1 - x0)), sum(w * (y1 - y0)),
       min(x0 + x1), max(x0 + x1), min(y0 + y1), max(y0 + y1),
       sum(w * (x0 + x1)), sum(w * (y0 + y1)),
       CASE WHEN heavy AND {{if .Transform}}f >= 0 AND {{end}}f <= $5::int THEN ix::bigint * 1048576 + iy ELSE -1 END AS giant
FROM (
    SELECT {{if .Transform}}CASE WHEN tally < 0 THEN tally ELSE {{end}}least($1::int, floor(-ln(greatest(x1 - x0, y1 - y0, 1 / $2::float8)) / ln(2::float8)))::int{{if .Transform}} END{{end}} AS f,
           {{if .Transform}}CASE WHEN tally < 0 THEN 0 ELSE {{end}}least($2::float8 - 1, floor((x0 + x1) * $2::float8 / 2))::int{{if .Transform}} END{{end}} AS ix,
           {{if .Transform}}CASE WHEN tally < 0 THEN 0 ELSE {{end}}least($2::float8 - 1, floor((y0 + y1) * $2::float8 / 2))::int{{if .Transform}} END{{end}} AS iy,
           x0, x1, y0, y1, w, np, heavy
    FROM (
{{- if .LonLat}}
        SELECT greatest(0::float8, least(1::float8, ({{if .Transform}}west{{else}}ST_XMin(b){{end}} + 180) / 360)) AS x0,
               greatest(0::float8, least(1::float8, ({{if .Transform}}east{{else}}ST_XMax(b){{end}} + 180) / 360)) AS x1,
               CASE WHEN abs({{if .Transform}}south{{else}}ST_YMin(b){{end}}) < 1e-9 THEN 0.5::float8
                    ELSE 0.5 + asinh(tan(radians(greatest(-85.05112877980659::float8, least(85.05112877980659::float8, {{if .Transform}}south{{else}}ST_YMin(b){{end}}))))) / (2 * pi()) END AS y0,
               CASE WHEN abs({{if .Transform}}north{{else}}ST_YMax(b){{end}}) < 1e-9 THEN 0.5::float8
                    ELSE 0.5 + asinh(tan(radians(greatest(-85.05112877980659::float8, least(85.05112877980659::float8, {{if .Transform}}north{{else}}ST_YMax(b){{end}}))))) / (2 * pi()) END AS y1,
               w, np, heavy{{if .Transform}}, tally{{end}}
{{- else}}
        SELECT greatest(0::float8, least(1::float8, ({{if .Transform}}west{{else}}ST_XMin(b){{end}} + 20037508.342789244) / 40075016.68557849)) AS x0,
               greatest(0::float8, least(1::float8, ({{if .Transform}}east{{else}}ST_XMax(b){{end}} + 20037508.342789244) / 40075016.68557849)) AS x1,
               greatest(0::float8, least(1::float8, ({{if .Transform}}south{{else}}ST_YMin(b){{end}} + 20037508.342789244) / 40075016.68557849)) AS y0,
               greatest(0::float8, least(1::float8, ({{if .Transform}}north{{else}}ST_YMax(b){{end}} + 20037508.342789244) / 40075016.68557849)) AS y1,
               w, np, heavy{{if .Transform}}, tally{{end}}
{{- end}}
        FROM (
{{- if .Transform}}
            SELECT CASE WHEN lost THEN -1 WHEN part = 2 THEN -2 ELSE 0 END AS tally,
                   CASE WHEN lost OR part = 2 THEN 0 WHEN part = 1 THEN -180 ELSE west END AS west,
                   CASE WHEN lost OR part = 2 THEN 0 WHEN part = 1 THEN east_part ELSE east END AS east,
                   south, north, w, np, heavy
            FROM (
                SELECT w, np, heavy, tb IS NULL AS lost,
                       generate_series(0, CASE WHEN split THEN 2 ELSE 0 END) AS part,
                       CASE WHEN pole_s THEN -90 ELSE ST_YMin(tb) END AS south,
                       CASE WHEN pole_n THEN 90 ELSE ST_YMax(tb) END AS north,
                       CASE WHEN pole_n OR pole_s THEN -180 WHEN sb IS NULL THEN ST_XMin(tb)
                            WHEN ST_XMin(sb) >= 180 THEN ST_XMin(sb) - 360 ELSE ST_XMin(sb) END AS west,
                       CASE WHEN pole_n OR pole_s THEN 180 WHEN sb IS NULL THEN ST_XMax(tb)
                            WHEN ST_XMin(sb) >= 180 THEN ST_XMax(sb) - 360 ELSE least(ST_XMax(sb), 180) END AS east,
                       ST_XMax(sb) - 360 AS east_part
                FROM (
                    SELECT w, np, heavy, tb, pole_n, pole_s, sb,
                           coalesce(ST_XMin(sb) < 180 AND ST_XMax(sb) > 180, false) AS split
                    FROM (
                        SELECT w, np, heavy, tb, pole_n, pole_s,
                               CASE WHEN dg IS NOT NULL AND ST_XMax(tb) - ST_XMin(tb) > 180 AND NOT pole_n AND NOT pole_s
                                     AND ST_Perimeter(ST_ShiftLongitude(dg)) + ST_Length(ST_ShiftLongitude(dg)) < ST_Perimeter(dg) + ST_Length(dg)
                                    THEN ST_ShiftLongitude(dg)::box3d END AS sb
                        FROM (
                            SELECT w, np, heavy, dg, coalesce(dg::box3d, c) AS tb,
                                   CASE WHEN $6::float8 IS NULL THEN false
                                        ELSE ST_XMin(gb) <= $6::float8 AND $6::float8 <= ST_XMax(gb) AND ST_YMin(gb) <= $7::float8 AND $7::float8 <= ST_YMax(gb) END AS pole_n,
                                   CASE WHEN $8::float8 IS NULL THEN false
                                        ELSE ST_XMin(gb) <= $8::float8 AND $8::float8 <= ST_XMax(gb) AND ST_YMin(gb) <= $9::float8 AND $9::float8 <= ST_YMax(gb) END AS pole_s
                            FROM (
                                SELECT w, np, heavy, gb, c,
                                       CASE WHEN c IS NULL OR (ST_XMax(c) - ST_XMin(c) <= 1 AND ST_YMax(c) - ST_YMin(c) <= 1) THEN NULL
                                            ELSE {{if .Safe}}geotoll.density_transform{{else}}ST_Transform{{end}}(ST_Segmentize(ST_SetSRID(gb::geometry, srid),
                                                 greatest(ST_XMax(gb) - ST_XMin(gb), ST_YMax(gb) - ST_YMin(gb)) / 8){{if not .Safe}}, 4326{{end}}) END AS dg
                                FROM (
                                    SELECT w, np, heavy, gb, srid, {{if .Safe}}geotoll.density_transform(ST_SetSRID(gb::geometry, srid)){{else}}ST_Transform(ST_SetSRID(gb::geometry, srid), 4326){{end}}::box3d AS c
                                    FROM (
                                        SELECT t.{{.Geom}}::box3d AS gb, ST_SRID(t.{{.Geom}}) AS srid,
                                               CASE WHEN pg_column_size(t.{{.Geom}}) >= $4::int OR $3::float8 >= 1 THEN 1 ELSE 1 / $3::float8 END AS w,
                                               pg_column_size(t.{{.Geom}}) >= $4::int AS heavy,
                                               {{if .Vertices}}ST_NPoints(t.{{.Geom}}){{else}}1{{end}}::float8 AS np
                                        FROM {{.Table}} AS t
                                        WHERE $3::float8 >= 1 OR pg_column_size(t.{{.Geom}}) >= $4::int OR random() < $3::float8
                                        OFFSET 0
                                    ) AS h
                                    WHERE gb IS NOT NULL
                                    OFFSET 0
                                ) AS k
                                OFFSET 0
                            ) AS d
                            OFFSET 0
                        ) AS a
                    ) AS s
                ) AS e
            ) AS p
{{- else}}
            SELECT b, heavy, CASE WHEN heavy OR $3::float8 >= 1 THEN 1 ELSE 1 / $3::float8 END AS w, np
            FROM (
                SELECT t.{{.Geom}}::box3d AS b,
                       pg_column_size(t.{{.Geom}}) >= $4::int AS heavy,
                       {{if .Vertices}}ST_NPoints(t.{{.Geom}}){{else}}1{{end}}::float8 AS np
                FROM {{.Table}} AS t
                WHERE $3::float8 >= 1 OR pg_column_size(t.{{.Geom}}) >= $4::int OR random() < $3::float8
                OFFSET 0
            ) AS h
{{- end}}
        ) AS r
{{- if not .Transform}}
        WHERE b IS NOT NULL
{{- end}}
        OFFSET 0
    ) AS n
) AS c
GROUP BY 1, 2, 3, 4, giant
