-- The retired relations of a layer that a read role may still read:
-- storage retired before, by a rebuild or a removal, stays until a later
-- run drops it (see serving_retired_due.sql), and keeps its grant so
-- that a server that has not re-read the registry is not disturbed.
-- When the layer's table is refused, package serving revokes these with
-- the storage it retires then: they were built from the same table. Of
-- every builder (geotoll_serving.retired records the layer alone); a
-- relation dropped since is not listed.
--   $1  layer    $2  the read roles (text[]: prepare's, and the default
--                      one, which storage built before 00012 is granted to)
-- Result: the relations, one row each.
SELECT r.relation
FROM geotoll_serving.retired AS r
JOIN pg_namespace AS n ON n.nspname = 'geotoll_serving'
JOIN pg_class AS c ON c.relnamespace = n.oid AND c.relname = r.relation
WHERE r.layer = $1::text
  AND EXISTS (SELECT 1 FROM unnest($2::text[]) AS rr(role)
              WHERE has_table_privilege(rr.role, c.oid, 'SELECT'))
ORDER BY r.relation
