-- Take the transaction-scoped advisory lock of one layer's builds, if no
-- other `geotoll prepare` holds it (true) — two runs never build the same
-- layer at once; the second skips it. A build takes the same key as a
-- session lock (serving.withLayerLock, derived from this text) before its
-- transaction; the two kinds block each other.
--   $1  layer name
SELECT pg_try_advisory_xact_lock(hashtext('geotoll prepare'), hashtext($1::text))
