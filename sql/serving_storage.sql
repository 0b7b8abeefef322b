-- Every relation of the serving registry, as `serve` reads it at start-up
-- and on each refresh, and `geotoll prepare` before it builds
-- (tiles.LoadStorage). No parameters.
-- Zooms are -1 for storage that serves no tile zoom. source_oid is the
-- relation source_table names now, 0 when none does (to_regclass, not a
-- cast: a table dropped or renamed since matches nothing instead of
-- failing the read); serve matches it to the layer's table (see
-- layer_tables.sql). source_table names the table prepare read with its
-- schema ("schema"."table"), so that a reader whose search_path resolves
-- the layer's table to another one does not match it. A name without a
-- schema (recorded by an older prepare) does not say which table was
-- read, and matches nothing either: the layer reads its table until the
-- next prepare rebuilds the storage, which records the schema. Nor does
-- a name in a schema the reader may not use (to_regclass fails there,
-- and one such row would fail the whole read): its table is not one the
-- reader's layers read.
SELECT s.layer, s.builder, s.relation,
       coalesce(s.zoom_min, -1)::int, coalesce(s.zoom_max, -1)::int,
       s.geometry_column, s.srid, s.geometry_kind, s.columns, s.params,
       s.source_table, s.source_geometry_column,
       CASE WHEN s.source_table !~ '^"([^"]|"")+"\.' THEN 0
            WHEN has_schema_privilege((SELECT ns.oid FROM pg_namespace AS ns
                                       WHERE ns.nspname = (parse_ident(s.source_table))[1]), 'USAGE')
            THEN coalesce(to_regclass(s.source_table)::oid::bigint, 0) ELSE 0 END,
       s.source_rows, s.source_signature, s.rows, s.built_at, s.checked_at
FROM geotoll_serving.storage AS s
ORDER BY s.layer, s.zoom_min NULLS LAST, s.builder, s.relation
