-- A page of fences in id order (GET /geofences).
--   $1 return ids greater than this (0 for the first page)   $2 page size
SELECT f.id,
       ST_AsGeoJSON(f.geom) AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind,
                          'created_at', f.created_at, 'updated_at', f.updated_at) AS properties
FROM geotoll.geofences AS f
WHERE f.id > $1::bigint
ORDER BY f.id
LIMIT $2::int
