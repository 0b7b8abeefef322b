-- The indexes of one table of the serving schema, by name: after a swap
-- the runner renames "<relation>_next_<suffix>" to "<relation>_<suffix>".
--   $1  the table's name (unqualified, in geotoll_serving)
SELECT i.indexname::text
FROM pg_indexes AS i
WHERE i.schemaname = 'geotoll_serving' AND i.tablename = $1::text
ORDER BY 1
