-- Tables (and views) with a geometry column in the given schemas that the
-- connected role may read: the candidates of tile layer auto-discovery.
--   $1  schemas to search (text[])
--   $2  the widest text column to offer as a property (characters)
-- Per geometry column: its schema, table, column and SRID; the table's
-- single-column integer primary key, if any (the feature id); and its
-- readable columns of types MVT carries as properties, in column order:
-- numbers, booleans, and text columns of a declared length up to $2
-- (varchar(n), char(n); the type modifier is n + 4). Unbounded text
-- (text, varchar without a length) is left out: one value may be
-- megabytes, and every feature of a tile would carry it.
-- Names are returned as data: the caller quotes them with pgx.Identifier.
SELECT g.f_table_schema::text,
       g.f_table_name::text,
       g.f_geometry_column::text,
       g.srid,
       (SELECT a.attname::text
        FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE i.indrelid = c.oid AND i.indisprimary AND i.indnkeyatts = 1
          AND a.atttypid = ANY ('{int2,int4,int8}'::regtype[])
          AND has_column_privilege(c.oid, a.attnum, 'SELECT')) AS id_column,
       ARRAY(SELECT a.attname::text
             FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
               AND (a.atttypid = ANY ('{int2,int4,int8,float4,float8,numeric,bool}'::regtype[])
                    OR (a.atttypid = ANY ('{varchar,bpchar}'::regtype[]) AND a.atttypmod BETWEEN 5 AND $2::int + 4))
               AND has_column_privilege(c.oid, a.attnum, 'SELECT')
             ORDER BY a.attnum) AS columns
FROM geometry_columns g
JOIN pg_namespace n ON n.nspname = g.f_table_schema
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = g.f_table_name
WHERE g.f_table_schema = ANY ($1::text[])
  AND g.srid > 0
  AND has_schema_privilege(n.oid, 'USAGE')
  AND has_table_privilege(c.oid, 'SELECT')
ORDER BY 1, 2, 3
