-- Is a fence geometry valid (OGC)? Runs before every fence write, so that an
-- invalid polygon is a 422 carrying PostGIS's own reason rather than a
-- CHECK violation.
--   $1 the geometry as WKB (SRID 4326 is applied here)
-- Returns valid, reason ("Self-intersection", "Ring Self-intersection"…)
-- and the location of the problem (NULL when valid).
SELECT (d).valid, coalesce((d).reason, ''), ST_X((d).location), ST_Y((d).location)
FROM (SELECT ST_IsValidDetail(ST_GeomFromWKB($1::bytea, 4326)) AS d) AS s
