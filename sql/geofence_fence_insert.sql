-- Create a fence (POST /geofences).
--   $1 name   $2 kind   $3 geometry as WKB (validated by geofence_fence_validate.sql)
-- The geometry is stored as a MultiPolygon with RFC 7946 ring orientation:
-- exterior rings counter-clockwise, holes clockwise (ST_ForcePolygonCCW).
-- Rows: id, geometry, properties, revision (the fence's ETag, quoted; see
-- migration 10; also in properties).
INSERT INTO geotoll.geofences (name, kind, geom)
VALUES ($1::text, $2::text, ST_Multi(ST_ForcePolygonCCW(ST_GeomFromWKB($3::bytea, 4326))))
RETURNING id,
          ST_AsGeoJSON(geom, 30) AS geometry,
          jsonb_build_object('name', name, 'kind', kind,
                             'created_at', created_at, 'updated_at', updated_at,
                             'revision', revision) AS properties,
          revision
