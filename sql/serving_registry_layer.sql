-- The registry rows of one layer, as `geotoll prepare` compares them with
-- what it would build.
--   $1  layer name
SELECT s.builder, s.relation, coalesce(s.zoom_min, -1)::int, coalesce(s.zoom_max, -1)::int,
       s.geometry_kind, s.columns, s.params, s.source_signature
FROM geotoll_serving.storage AS s
WHERE s.layer = $1::text
ORDER BY s.builder, s.relation
