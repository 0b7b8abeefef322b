-- Take the transaction-scoped advisory lock of one layer's builds, if no
-- other `geotoll prepare` holds it (true) — two runs never build the same
-- layer at once; the second skips it.
--   $1  layer name
SELECT pg_try_advisory_xact_lock(hashtext('geotoll prepare'), hashtext($1::text))
