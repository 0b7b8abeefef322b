-- What contains and check read for a geofence layer: its geometry type
-- (PostGIS's catalog) and its pieces, the subdivided storage `geotoll
-- prepare` registers with builder 'subdivide' for the layer's table.
--   $1 the layer's table, quoted (schema.table)   $2 its geometry column
--
-- One row: the type (upper case, NULL when the column is unknown) and the
-- pieces' relation in geotoll_serving, their geometry column, SRID, the
-- source columns they carry and the source's change detector when they
-- were built (all NULL when the table has no pieces; the detector is ''
-- for a source without one, a view), and the most vertices of a piece
-- (params' max_vertices; NULL when not recorded).
-- to_regclass, not a cast: a registry row whose table was dropped since
-- matches nothing instead of failing the lookup. source_table names the
-- table prepare read with its schema ("schema"."table"), so that a reader
-- whose search_path resolves the layer's table to another one does not
-- match it; a name without a schema (recorded by an older prepare) does
-- not say which table was read, and matches nothing either (as in
-- serving_storage.sql): the layer reads its table until the next prepare
-- records the schema; nor does a name in a schema the reader may not use
-- (to_regclass fails there: one such row would fail every lookup). Pieces are cut from a
-- tile layer's geometry column: of several tile layers on the table, the
-- pieces of the geofence layer's own column in EPSG:4326 are preferred,
-- then pieces in EPSG:3857 (read with the point transformed; other SRIDs
-- are not used: see LoadContainment).
SELECT (SELECT upper(g.type)
        FROM geometry_columns AS g
        JOIN pg_class AS c ON c.relname = g.f_table_name
        JOIN pg_namespace AS ns ON ns.oid = c.relnamespace AND ns.nspname = g.f_table_schema
        WHERE c.oid = to_regclass($1::text) AND g.f_geometry_column = $2::text) AS type,
       s.relation, s.geometry_column, s.srid, s.columns, s.source_signature,
       s.max_vertices
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT st.relation, st.geometry_column, st.srid, st.columns, st.source_signature,
           (st.params->>'max_vertices')::int AS max_vertices
    FROM geotoll_serving.storage AS st
    WHERE st.builder = 'subdivide'
      AND CASE WHEN st.source_table !~ '^"([^"]|"")+"\.' THEN false
               WHEN has_schema_privilege((SELECT ns.oid FROM pg_namespace AS ns
                                          WHERE ns.nspname = (parse_ident(st.source_table))[1]), 'USAGE')
               THEN to_regclass(st.source_table) = to_regclass($1::text)
               ELSE false END
    ORDER BY (st.geometry_column = $2::text AND st.srid = 4326) DESC, (st.srid = 3857) DESC, st.checked_at DESC
    LIMIT 1
) AS s ON true
