-- Batch check (POST /geofence/check): for every point, the fences that
-- contain it, in ONE statement whatever the number of points.
--   $1 longitudes, $2 latitudes (float8[], same length, degrees)
--
-- Each row is (ordinal of the point, 1-based; id of a fence containing it);
-- points inside no fence have no row. The caller's point ids never reach
-- the database: the ordinal maps rows back to them. Same boundary rule as
-- contains: ST_Covers, a point on a boundary is inside.
--
-- The points are tested against the fences' pieces (geotoll.geofence_pieces,
-- at most 256 vertices each): a nested loop of one GiST probe
-- (geofence_pieces_geom_gist) per point, each testing a piece or two. A
-- point on the seam between two pieces of one fence is covered by both:
-- DISTINCT answers the fence once.
SELECT DISTINCT p.ord, s.fence_id
FROM unnest($1::float8[], $2::float8[]) WITH ORDINALITY AS p(lng, lat, ord)
JOIN geotoll.geofence_pieces AS s
  ON ST_Covers(s.geom, ST_SetSRID(ST_MakePoint(p.lng, p.lat), 4326))
ORDER BY p.ord, s.fence_id
