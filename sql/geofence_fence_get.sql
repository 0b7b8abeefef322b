-- One fence as a GeoJSON feature (GET /geofences/{id}).   $1 id
-- Rows: id, geometry, properties, revision (the fence's ETag, quoted; see
-- migration 10; also in properties).
SELECT f.id,
       ST_AsGeoJSON(f.geom, 15) AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind,
                          'created_at', f.created_at, 'updated_at', f.updated_at,
                          'revision', f.revision) AS properties,
       f.revision
FROM geotoll.geofences AS f
WHERE f.id = $1::bigint
