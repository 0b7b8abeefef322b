-- Which of a layer's properties are of type numeric (or a domain over
-- it): ST_AsMVT writes a numeric as text, so the tile queries cast them to
-- float8, and a map reads numbers where TileJSON says Number.
--   $1  the table, as quoted identifier text (schema."table")
--   $2  the property columns
-- Result: one row, the names (text[], empty for none), NULL when the
-- table does not exist (yet).
SELECT CASE WHEN to_regclass($1::text) IS NOT NULL
            THEN coalesce(array_agg(a.attname::text ORDER BY a.attnum)
                          FILTER (WHERE 'numeric'::regtype IN (ty.oid, ty.typbasetype)), '{}') END
FROM pg_attribute AS a
JOIN pg_type AS ty ON ty.oid = a.atttypid
WHERE a.attrelid = to_regclass($1::text)
  AND a.attnum > 0
  AND NOT a.attisdropped
  AND a.attname = ANY ($2::text[])
