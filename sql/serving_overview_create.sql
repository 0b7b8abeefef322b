-- Create one overview table, empty, with the layer's columns typed as in
-- its table (LIMIT 0 copies the types); filled next by
-- serving_overview_points.sql or serving_overview_lines.sql.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Next     the new table     .Source  the layer's table
--   .Cols     the layer's columns carried (id, properties, order_by),
--             each .Column in the table, stored as .As (c0, c1…: a name
--             of the overview's own, so that a column called geom, cx, cy
--             or point_count is not a second column by that name)
--   .Points   add the cluster columns cx, cy (cell indices) and point_count
--   .Pieces   add the columns of an overview stored in pieces: fid, the
--             piece's feature's number, and box, that feature's box
--   .Scratch  an unlogged table the build drops before it commits: the
--             whole features of a zoom an overview in pieces is cut from
--             (and the next zoom up simplified from)
-- No parameters (a utility statement takes none).
CREATE {{if .Scratch}}UNLOGGED {{end}}TABLE {{.Next}} AS
SELECT {{if .Points}}0::bigint AS cx, 0::bigint AS cy, 0::bigint AS point_count, {{end -}}
       NULL::geometry(Geometry, 3857) AS geom{{range .Cols}}, t.{{.Column}} AS {{.As}}{{end -}}
       {{if .Pieces}}, 0::bigint AS fid, NULL::box2d AS box{{end}}
FROM {{.Source}} AS t
LIMIT 0
