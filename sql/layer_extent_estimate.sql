-- The estimated extent of a layer's table, in lon/lat, from the planner's
-- statistics (no table scan). Zero rows when there are no statistics.
--   $1  the table, as quoted identifier text (schema."table")
--   $2  the geometry column    $3  its SRID
SELECT ST_XMin(b), ST_YMin(b), ST_XMax(b), ST_YMax(b)
FROM (
    SELECT ST_Transform(ST_SetSRID(ST_EstimatedExtent(n.nspname, c.relname, $2::text)::geometry, $3::int), 4326) AS b
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass($1::text)
) e
WHERE b IS NOT NULL
