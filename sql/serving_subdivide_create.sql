-- Create a layer's pieces table, empty, with the layer's geometry column
-- and columns typed as in its table (LIMIT 0 copies the types); filled
-- next by serving_subdivide_fill.sql.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Next     the new table     .Source  the layer's table
--   .Geom     the layer's geometry column (the pieces keep its name)
--   .SRID     its SRID (an int from the configuration)
--   .Cols     the layer's columns carried (id, properties, order_by)
-- No parameters (a utility statement takes none).
CREATE TABLE {{.Next}} AS
SELECT NULL::geometry(Geometry, {{.SRID}}) AS {{.Geom}}{{range .Cols}}, t.{{.}}{{end}}
FROM {{.Source}} AS t
LIMIT 0
