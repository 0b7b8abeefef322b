-- What package serving checks about a layer's table before building from
-- it: its kind of relation (pg_class.relkind: r table, p partitioned, m
-- materialized view, v view, f foreign table), and whether the read role
-- may read every column the storage would expose (an overview readable by
-- geotoll_reader must not show it what its table hides).
--   $1  the table, quoted (pgx.Identifier.Sanitize), as text
--   $2  the read role     $3  the columns the storage copies (text[])
-- No row: the table does not exist.
SELECT c.relkind::text,
       (SELECT coalesce(bool_and(has_table_privilege($2::text, c.oid, 'SELECT')
                                 OR has_column_privilege($2::text, c.oid, col, 'SELECT')), true)
        FROM unnest($3::text[]) AS col)
FROM pg_class AS c
WHERE c.oid = to_regclass($1::text)
