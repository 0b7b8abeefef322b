-- The fences that contain a point (GET /geofence/contains).
--   $1 longitude, $2 latitude (degrees, EPSG:4326)
--   $3 cap on fences (LIMIT)   $4 cap on positions in the whole answer
--
-- Rows come in id order, at most 2 × $3 + 1 of them. A row's geometry is
-- NULL when it is past the caps: a fence after $3 fences were answered,
-- or one whose positions (ST_NPoints) would take the answer beyond $4
-- with the fences before it that the answer carries. A fence left out
-- adds nothing, neither positions nor a place among the $3: a small
-- fence after one too large for the answer is still answered (pick: in
-- id order, each fence that fits what is left, until $3 are). Reading
-- at most 2 × $3 + 1 fences bounds the work; a read that stops there has
-- left out at least $3 + 1 of them, so its answer is truncated too. The
-- caller drops a NULL geometry's row and reports the answer as
-- truncated. Geometries past the caps are never rendered as GeoJSON, so
-- an answer costs at most $4 positions of work and bytes whatever the
-- fences hold.
--
-- Boundary semantics: ST_Covers, so a point on a fence's boundary is
-- inside it. The batch check (geofence_check.sql) uses the same test, on
-- the same pieces: the fences' pieces (geotoll.geofence_pieces, at most
-- 256 vertices each) find the fences, DISTINCT answers a fence whose seam
-- the point is on once, and only the fences found are read whole.
-- Fences are planar in lon/lat (edges are straight lines between their
-- positions on a plate carrée map), as GeoJSON (RFC 7946 §3.1.1) draws them.
WITH RECURSIVE found AS (
    SELECT DISTINCT s.fence_id AS id
    FROM geotoll.geofence_pieces AS s
    WHERE ST_Covers(s.geom, ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326))
), hits AS (
    SELECT f.id, ST_NPoints(f.geom)::bigint AS np, row_number() OVER (ORDER BY f.id) AS n
    FROM geotoll.geofences AS f
    JOIN found USING (id)
    ORDER BY f.id
    LIMIT 2 * $3::int + 1
), pick (n, total, taken, take) AS (
    SELECT 0::bigint, 0::bigint, 0, false
    UNION ALL
    SELECT h.n, p.total + CASE WHEN t.take THEN h.np ELSE 0 END, p.taken + t.take::int, t.take
    FROM pick AS p
    JOIN hits AS h ON h.n = p.n + 1
    CROSS JOIN LATERAL (SELECT p.taken < $3::int AND p.total + h.np <= $4::int AS take) AS t
)
SELECT h.id,
       CASE WHEN p.take THEN ST_AsGeoJSON(f.geom) END AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind) AS properties
FROM hits AS h
JOIN pick AS p ON p.n = h.n
JOIN geotoll.geofences AS f ON f.id = h.id
ORDER BY h.id
