-- Which of the given relation names exist in geotoll_serving: the tables a
-- swap must lock before it drops or replaces them.
--   $1  relation names (text[], unqualified)
SELECT n
FROM unnest($1::text[]) AS n
WHERE to_regclass(format('%I.%I', 'geotoll_serving', n)) IS NOT NULL
ORDER BY n
