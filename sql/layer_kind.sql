-- The declared geometry type of one layer's column (POINT, MULTIPOLYGON,
-- GEOMETRY, …), from which the server chooses the layer's tile query.
--   $1  schema    $2  table or view    $3  geometry column
-- No row: the column is not a registered geometry column.
SELECT g.type::text
FROM geometry_columns g
WHERE g.f_table_schema = $1::text
  AND g.f_table_name = $2::text
  AND g.f_geometry_column = $3::text
