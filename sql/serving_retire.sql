-- Stop serving a builder's storage of one layer, in the transaction that
-- records its replacement (or none): its registry rows go, and the
-- relations they named are listed as retired, to be dropped by a later
-- run once no server can still be reading them.
--   $1  layer    $2  builder
-- Result: the relations the registry named, one row each.
WITH gone AS (
    DELETE FROM geotoll_serving.storage
    WHERE layer = $1::text AND builder = $2::text
    RETURNING layer, relation
),
listed AS (
    INSERT INTO geotoll_serving.retired (relation, layer, retired_at)
    SELECT relation, layer, clock_timestamp() FROM gone -- the switch, not the build's start: now() would shorten the grace by the build's time
    ON CONFLICT (relation) DO NOTHING
)
SELECT relation FROM gone
