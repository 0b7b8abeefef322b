-- The relation each tile layer's table names now, resolved as the registry's
-- source_table is (serving_storage.sql), so that `serve` reads only the
-- serving storage built from the table a layer reads (tiles.Catalog.Refresh).
--   $1 the layers' tables, quoted (schema.table), text[]
-- One row per element of $1, in its order: the relation's oid, 0 when no
-- relation has that name (to_regclass: a dropped table is not an error).
SELECT coalesce(to_regclass(u.t)::oid::bigint, 0)
FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)
ORDER BY u.i
