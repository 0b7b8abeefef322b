-- Record one relation a build has just made (see migration
-- 00006_serving.sql for the columns).
--   $1 layer  $2 builder  $3 relation  $4 zoom_min  $5 zoom_max (NULL: no
--   tile zoom)  $6 geometry column  $7 srid  $8 geometry kind  $9 columns
--   $10 params (JSON)  $11 source table  $12 source geometry column
--   $13 source rows  $14 source signature  $15 rows  $16 build ms
INSERT INTO geotoll_serving.storage (layer, builder, relation, zoom_min, zoom_max, geometry_column, srid,
    geometry_kind, columns, params, source_table, source_geometry_column, source_rows, source_signature,
    rows, build_ms, built_at, checked_at)
VALUES ($1::text, $2::text, $3::text, $4::smallint, $5::smallint, $6::text, $7::int, $8::text, $9::text[],
    $10::jsonb, $11::text, $12::text, $13::bigint, $14::text, $15::bigint, $16::bigint, now(), now())
