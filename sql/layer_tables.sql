-- The relation each tile layer's table names now, resolved as the registry's
-- source_table is (serving_storage.sql), so that `serve` reads only the
-- serving storage built from the table a layer reads (tiles.Catalog.Refresh).
--   $1 the layers' tables, quoted (schema.table), text[]
-- One row per element of $1, in its order: the relation's oid, 0 when no
-- relation has that name (to_regclass: a dropped table is not an error)
-- or it is in a schema the reader may not use (where to_regclass fails:
-- one such layer would fail every layer's read).
SELECT CASE WHEN cardinality(parse_ident(u.t)) < 2
                 OR has_schema_privilege((SELECT ns.oid FROM pg_namespace AS ns
                                          WHERE ns.nspname = (parse_ident(u.t))[1]), 'USAGE')
            THEN coalesce(to_regclass(u.t)::oid::bigint, 0) ELSE 0 END
FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)
ORDER BY u.i
