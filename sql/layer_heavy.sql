-- The vertices of a layer's largest rows: the most of the 8 rows whose
-- geometry takes the most bytes as stored. pg_column_size reads the size
-- of a TOASTed value from its pointer, so the scan reads the table's rows,
-- not their geometries; only the 8 largest are decoded.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Table  the layer's table     .Geom  its geometry column
-- No parameters. Result: one row (bigint), 0 for an empty table.
SELECT coalesce(max(ST_NPoints(big.g)), 0)::bigint
FROM (SELECT t.{{.Geom}} AS g
      FROM {{.Table}} AS t
      WHERE t.{{.Geom}} IS NOT NULL
      ORDER BY pg_column_size(t.{{.Geom}}) DESC
      LIMIT 8) AS big
