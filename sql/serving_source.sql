-- What package serving checks about a layer's table before building from
-- it: its kind of relation (pg_class.relkind: r table, p partitioned, m
-- materialized view, v view, f foreign table), the schema and name it
-- resolves to (under the search_path of `geotoll prepare`, which records
-- them), and whether storage readable by the read role could show it
-- what its table hides: the read role may not read every column the
-- storage would copy; row-level security is enabled on the table and
-- filters the read role (neither a superuser nor BYPASSRLS, nor the
-- table's owner, or one of its members, unless security is forced on the
-- owner too: the rules PostgreSQL applies), while the schema owner's build
-- reads past it or, forced, through the owner's policies; or the relation
-- is a view with security_invoker, which the read role reads with its
-- own rights on the view's relations and their row security, neither of
-- which a build as the schema owner applies.
--   $1  the table, quoted (pgx.Identifier.Sanitize), as text
--   $2  the read role     $3  the columns the storage copies (text[])
-- No row: the table does not exist.
-- Result: relkind, schema, name, readable, row_security, invoker.
SELECT c.relkind::text, n.nspname::text, c.relname::text,
       (SELECT coalesce(bool_and(has_table_privilege($2::text, c.oid, 'SELECT')
                                 OR has_column_privilege($2::text, c.oid, col, 'SELECT')), true)
        FROM unnest($3::text[]) AS col),
       c.relrowsecurity AND NOT coalesce(
           (SELECT r.rolsuper OR r.rolbypassrls
                   OR (pg_has_role(r.oid, c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)
            FROM pg_roles AS r
            WHERE r.rolname = $2::text), false),
       c.relkind = 'v' AND coalesce(
           (SELECT o.option_value::bool
            FROM pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'security_invoker'), false)
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1::text)
