-- The fences that contain a point (GET /geofence/contains).
--   $1 longitude, $2 latitude (degrees, EPSG:4326)   $3 cap (LIMIT)
--
-- Boundary semantics: ST_Covers, so a point on a fence's boundary is
-- inside it. The batch check (geofence_check.sql) uses the same test.
-- Fences are planar in lon/lat (edges are straight lines between their
-- positions on a plate carrée map), as GeoJSON (RFC 7946 §3.1.1) draws them.
SELECT f.id,
       ST_AsGeoJSON(f.geom) AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind) AS properties
FROM geotoll.geofences AS f
WHERE ST_Covers(f.geom, ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326))
ORDER BY f.id
LIMIT $3::int
