-- Replace a fence (PUT /geofences/{id}); no row when it does not exist.
--   $1 id   $2 name   $3 kind   $4 geometry as WKB (validated first)
-- Same normalisation as geofence_fence_insert.sql.
-- Rows: id, geometry, properties, revision (the fence's ETag, quoted; see
-- migration 10; also in properties).
UPDATE geotoll.geofences
SET name = $2::text,
    kind = $3::text,
    geom = ST_Multi(ST_ForcePolygonCCW(ST_GeomFromWKB($4::bytea, 4326))),
    updated_at = now()
WHERE id = $1::bigint
RETURNING id,
          ST_AsGeoJSON(geom, 30) AS geometry,
          jsonb_build_object('name', name, 'kind', kind,
                             'created_at', created_at, 'updated_at', updated_at,
                             'revision', revision) AS properties,
          revision
