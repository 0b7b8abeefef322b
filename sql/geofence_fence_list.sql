-- A page of fences in id order (GET /geofence/fences).
--   $1 return ids greater than this (0 for the first page)   $2 page size
--   $3 cap on the positions of the page's geometries
--
-- The page walks the fences in id order, one index probe each, and ends
-- at $2 fences or at the first fence whose positions (ST_NPoints) would
-- take the page beyond $3 with the fences before it, whichever comes
-- first. The first fence is always taken, however large, so that every
-- fence can be listed (alone on its page). The fence that ended the page
-- on positions comes as a row without a geometry: the caller drops it and
-- gives the next page from the last fence taken. Geometries past the cap
-- are never rendered as GeoJSON, so a page costs at most $3 positions of
-- work and bytes — or one fence's, when that fence is larger.
-- Rows: id, geometry (NULL: the fence that ended the page), properties,
-- revision (the fence's ETag, quoted; see migration 10; also in
-- properties).
WITH RECURSIVE walk (id, n, total, take) AS (
    (SELECT f.id, 1::bigint, ST_NPoints(f.geom)::bigint, true
     FROM geotoll.geofences AS f
     WHERE f.id > $1::bigint
     ORDER BY f.id
     LIMIT 1)
    UNION ALL
    SELECT nx.id, w.n + 1, w.total + nx.np, w.total + nx.np <= $3::bigint
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT f.id, ST_NPoints(f.geom)::bigint AS np
        FROM geotoll.geofences AS f
        WHERE f.id > w.id
        ORDER BY f.id
        LIMIT 1
    ) AS nx
    WHERE w.take AND w.n < $2::int
)
SELECT f.id,
       CASE WHEN w.take THEN ST_AsGeoJSON(f.geom, 30) END AS geometry,
       jsonb_build_object('name', f.name, 'kind', f.kind,
                          'created_at', f.created_at, 'updated_at', f.updated_at,
                          'revision', f.revision) AS properties,
       f.revision
FROM walk AS w
JOIN geotoll.geofences AS f ON f.id = w.id
ORDER BY f.id
