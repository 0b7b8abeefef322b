-- The retired relations a run may drop: retired longer ago than the
-- grace period, and not named by the registry (a relation is never
-- served again once retired; the check keeps a mistake from dropping
-- what is served). Oldest first.
--   $1  grace period, in seconds
SELECT r.relation
FROM geotoll_serving.retired AS r
WHERE r.retired_at <= now() - make_interval(secs => $1::float8)
  AND NOT EXISTS (SELECT FROM geotoll_serving.storage AS s WHERE s.relation = r.relation)
ORDER BY r.retired_at, r.relation
