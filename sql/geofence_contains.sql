-- The fences that contain a point (GET /geofence/contains).
--   $1 longitude, $2 latitude (degrees, EPSG:4326)
--   $3 cap on fences (LIMIT)   $4 cap on positions in the whole answer
--
-- Rows come in id order, at most $3 + 1 of them. A row's geometry is NULL
-- when it is past the caps (the $3 + 1st row, or one that would take the
-- answer's positions, counted with ST_NPoints, beyond $4): the caller
-- drops it and reports the answer as truncated. Geometries past the caps
-- are never rendered as GeoJSON, so an answer costs at most $4 positions
-- of work and bytes whatever the fences hold.
--
-- Boundary semantics: ST_Covers, so a point on a fence's boundary is
-- inside it. The batch check (geofence_check.sql) uses the same test, on
-- the same pieces: the fences' pieces (geotoll.geofence_pieces, at most
-- 256 vertices each) find the fences, DISTINCT answers a fence whose seam
-- the point is on once, and only the fences found are read whole.
-- Fences are planar in lon/lat (edges are straight lines between their
-- positions on a plate carrée map), as GeoJSON (RFC 7946 §3.1.1) draws them.
WITH found AS (
    SELECT DISTINCT s.fence_id AS id
    FROM geotoll.geofence_pieces AS s
    WHERE ST_Covers(s.geom, ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326))
), hits AS (
    SELECT f.id, f.geom, f.name, f.kind,
           row_number() OVER w AS n,
           sum(ST_NPoints(f.geom)) OVER w AS positions
    FROM geotoll.geofences AS f
    JOIN found USING (id)
    WINDOW w AS (ORDER BY f.id)
    ORDER BY f.id
    LIMIT $3::int + 1
)
SELECT id,
       CASE WHEN n <= $3::int AND positions <= $4::int THEN ST_AsGeoJSON(geom) END AS geometry,
       jsonb_build_object('name', name, 'kind', kind) AS properties
FROM hits
ORDER BY id
