-- A page of fences in id order (GET /geofences).
--   $1 return ids greater than this (0 for the first page)   $2 page size
-- Rows: id, geometry, properties, revision (the fence's ETag, quoted; see
-- migration 10; also in properties).
SELECT f.id,
       ST_AsGeoJSON(f.geom, 15) AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind,
                          'created_at', f.created_at, 'updated_at', f.updated_at,
                          'revision', f.revision) AS properties,
       f.revision
FROM geotoll.geofences AS f
WHERE f.id > $1::bigint
ORDER BY f.id
LIMIT $2::int
