-- What a configured layer needs of its table, as the connected role sees it
-- (package layercheck: the start-up and readiness checks of every tile and
-- geofence layer).
--   $1  the table's schema ('' = the first schema of the search path that
--       holds it)
--   $2  the table's name
--   $3  the columns the layer reads (text[])
-- One row per column of $3, in order: the role; whether the table was
-- found (a table, view, materialized view, partitioned or foreign table),
-- its schema, and whether the role may use that schema and SELECT from the
-- table; whether the column exists, its type as written in SQL, whether it
-- is a PostGIS geometry and then its SRID as the catalog declares it (the
-- column's type modifier, else a CHECK (st_srid(column) = N) constraint;
-- 0 when it declares none), whether it is a smallint, integer or bigint,
-- and whether the role may SELECT it. Names are bound as values: nothing
-- here is spliced in. Only the catalog is read, never a row of the table:
-- a layer that is a slow view costs this query nothing.
WITH rel AS (
    SELECT c.oid, n.nspname::text AS schema, has_schema_privilege(n.oid, 'USAGE') AS usable
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = $2::text
      AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
      AND CASE WHEN $1::text = '' THEN n.nspname = ANY (current_schemas(false))
               ELSE n.nspname = $1::text END
    ORDER BY array_position(current_schemas(false), n.nspname)
    LIMIT 1
)
SELECT current_user::text,
       rel.oid IS NOT NULL,
       coalesce(rel.schema, ''),
       coalesce(rel.usable, false),
       coalesce(has_table_privilege(rel.oid, 'SELECT'), false),
       a.attnum IS NOT NULL,
       coalesce(format_type(a.atttypid, a.atttypmod), ''),
       coalesce(ty.typname = 'geometry', false),
       CASE WHEN coalesce(ty.typname, '') <> 'geometry' THEN 0
            WHEN postgis_typmod_srid(a.atttypmod) > 0 THEN postgis_typmod_srid(a.atttypmod)
            ELSE coalesce((
                SELECT substring(split_part(pg_get_constraintdef(co.oid), 'st_srid(' || quote_ident(a.attname) || ') = ', 2) FROM '^\d+')::int
                FROM pg_constraint co
                WHERE co.conrelid = rel.oid AND co.contype = 'c' AND co.conkey = ARRAY[a.attnum]
                  AND strpos(pg_get_constraintdef(co.oid), 'st_srid(' || quote_ident(a.attname) || ') = ') > 0
                LIMIT 1), 0)
       END,
       coalesce(a.atttypid = ANY ('{int2,int4,int8}'::regtype[]), false),
       coalesce(has_column_privilege(rel.oid, a.attnum, 'SELECT'), false)
FROM unnest($3::text[]) WITH ORDINALITY AS col(name, ord)
LEFT JOIN rel ON true
LEFT JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attname = col.name AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_type ty ON ty.oid = a.atttypid
ORDER BY col.ord
