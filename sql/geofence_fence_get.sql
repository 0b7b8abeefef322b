-- One fence as a GeoJSON feature (GET /geofences/{id}).   $1 id
-- Rows: id, geometry, properties, revision (the fence's ETag, quoted; see
-- migration 10; also in properties). Geometries of fences, here and in
-- the fence writes and list, are printed with up to 30 decimals: PostGIS
-- prints the shortest text that reads back as the same double (exponent
-- form below 1e-8), so that a fence read is the fence stored, to the bit,
-- and can be written back as it is (15 decimals printed two vertices
-- 1 ulp apart alike).
SELECT f.id,
       ST_AsGeoJSON(f.geom, 30) AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind,
                          'created_at', f.created_at, 'updated_at', f.updated_at,
                          'revision', f.revision) AS properties,
       f.revision
FROM geotoll.geofences AS f
WHERE f.id = $1::bigint
