-- What package serving checks about a layer's table before building from
-- it: its kind of relation (pg_class.relkind: r table, p partitioned, m
-- materialized view, v view, f foreign table), the schema and name it
-- resolves to (under the search_path of `geotoll prepare`, which records
-- them), and whether storage readable by the read role could show it
-- what its table hides: the read role may not read every column the
-- storage would copy, or may not use the table's schema (a role without
-- USAGE on a schema reads none of its tables, whatever their grants);
-- row-level security is enabled on the table and
-- filters the read role (neither a superuser nor BYPASSRLS, nor the
-- table's owner, or one of its members, unless security is forced on the
-- owner too: the rules PostgreSQL applies), while the schema owner's build
-- reads past it or, forced, through the owner's policies; the relation
-- is a view with security_invoker, or a view that reads one (directly or
-- through other views), which the read role reads with its own rights on
-- the invoker view's relations and their row security, neither of which a
-- build as the schema owner applies; or the relation is a view that
-- reads a table with row-level security enabled, directly or through
-- other views: the read role reads it with the view owner's rights, but
-- the table's policies apply, and current_user in them is the role that
-- reads the view, the read role's or the schema owner's (any row security
-- counts, whatever its policies and whoever the view owner is: the rule
-- is conservative). The relations a view reads are those its query names
-- (its _RETURN rule's dependencies in pg_depend; not the relations a
-- function it calls reads), followed through the views among them; a materialized view ends the walk, its rows being
-- those of its last refresh, which the read role reads whole. Last, a
-- view may filter by who reads it without row security: a view among
-- those the walk finds whose query names CURRENT_USER, SESSION_USER,
-- CURRENT_ROLE, SYSTEM_USER or USER (or calls them by their function
-- names, or getpgusername), checks a privilege or a role
-- (has_*_privilege, pg_has_role), reads a setting (current_setting,
-- pg_settings), the search path (CURRENT_SCHEMA, current_schema(),
-- current_schemas) or asks
-- row_security_active — found in its text as pg_get_viewdef writes it,
-- string literals left out — or calls a function or operator
-- that is neither built in nor an extension's (what such a function
-- does is not read) is role dependent.
--   $1  the table, quoted (pgx.Identifier.Sanitize), as text
--   $2  the read role     $3  the columns the storage copies (text[])
-- No row: the table does not exist.
-- Result: relkind, schema, name, readable, row_security, invoker,
-- view_row_security, role_dependent, foreign (a foreign table, or a
-- partitioned or inheritance parent with one among its descendants: the
-- read role reads those through its own user mapping).
SELECT c.relkind::text, n.nspname::text, c.relname::text,
       has_schema_privilege($2::text, n.oid, 'USAGE')
       AND (SELECT coalesce(bool_and(has_table_privilege($2::text, c.oid, 'SELECT')
                                     OR has_column_privilege($2::text, c.oid, col, 'SELECT')), true)
            FROM unnest($3::text[]) AS col),
       c.relrowsecurity AND NOT coalesce(
           (SELECT r.rolsuper OR r.rolbypassrls
                   OR (pg_has_role(r.oid, c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)
            FROM pg_roles AS r
            WHERE r.rolname = $2::text), false),
       c.relkind = 'v' AND coalesce(v.invoker, false),
       c.relkind = 'v' AND coalesce(v.row_security, false),
       c.relkind = 'v' AND coalesce(v.role_dependent, false),
       c.relkind <> 'v' AND EXISTS (
           WITH RECURSIVE kin (oid) AS (
               SELECT c.oid
               UNION
               SELECT i.inhrelid FROM kin JOIN pg_inherits AS i ON i.inhparent = kin.oid
           )
           SELECT 1 FROM kin JOIN pg_class AS k ON k.oid = kin.oid WHERE k.relkind = 'f')
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN LATERAL (
    WITH RECURSIVE used (oid) AS (
        SELECT c.oid
        UNION
        SELECT d.refobjid
        FROM used AS u
        JOIN pg_class AS uc ON uc.oid = u.oid AND uc.relkind = 'v'
        JOIN pg_rewrite AS w ON w.ev_class = u.oid AND w.rulename = '_RETURN'
        JOIN pg_depend AS d ON d.classid = 'pg_rewrite'::regclass AND d.objid = w.oid
                           AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> u.oid
    )
    SELECT bool_or(r.relkind = 'v' AND coalesce(
               (SELECT o.option_value::bool
                FROM pg_options_to_table(r.reloptions) AS o
                WHERE o.option_name = 'security_invoker'), false)) AS invoker,
           bool_or(r.relrowsecurity) AS row_security,
           bool_or(r.relkind = 'v' AND (
               q.def ~ '(^|[^"[:alnum:]_.])(CURRENT_USER|SESSION_USER|CURRENT_ROLE|SYSTEM_USER|USER|CURRENT_SCHEMA)($|[^"[:alnum:]_(])'
               OR q.def ~ '(^|[^[:alnum:]_])"?(has_[a-z_]+_privilege|pg_has_role|current_setting|row_security_active|current_user|session_user|current_role|getpgusername|current_schemas?|pg_show_all_settings)"?\('
               OR q.def ~ '(^|[^[:alnum:]_])pg_settings($|[^[:alnum:]_])'
               OR EXISTS (
                   SELECT 1
                   FROM pg_rewrite AS w
                   JOIN pg_depend AS d ON d.classid = 'pg_rewrite'::regclass AND d.objid = w.oid
                                      AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass)
                   WHERE w.ev_class = r.oid AND w.rulename = '_RETURN'
                     AND NOT EXISTS (SELECT 1 FROM pg_depend AS e
                                     WHERE e.classid = d.refclassid AND e.objid = d.refobjid
                                       AND e.deptype = 'e')))) AS role_dependent
    FROM used AS u
    JOIN pg_class AS r ON r.oid = u.oid
    -- the view's text without its string literals' contents ('…' → ''):
    -- quoted identifiers are matched first and kept, so that an
    -- apostrophe in one ("owner's") opens no literal
    LEFT JOIN LATERAL (SELECT regexp_replace(pg_get_viewdef(r.oid), '("([^"]|"")*")|''([^'']|'''')*''', '\1', 'g') AS def
                       WHERE r.relkind = 'v') AS q ON true
) AS v ON c.relkind = 'v'
WHERE c.oid = to_regclass($1::text)
