-- The exact extent of a layer's table, in lon/lat: what Store.Describe
-- reads for a followed layer (whose table the server writes, and whose
-- statistics lag its writes), and its fallback when ST_EstimatedExtent has
-- no statistics (or cannot parse the table's name). Runs under the layer's
-- statement_timeout.
--
-- Template fields are identifiers quoted with pgx.Identifier at start-up;
-- $1 is the geometry column's SRID.
SELECT ST_XMin(b), ST_YMin(b), ST_XMax(b), ST_YMax(b)
FROM (
    SELECT ST_Transform(ST_SetSRID(ST_Extent(e.box)::geometry, $1::int), 4326) AS b
    FROM (SELECT t.{{.Geom}}::box2d AS box FROM {{.Table}} AS t OFFSET 0) AS e -- each row's box made once
    -- A row whose box is not finite (a NaN or infinite coordinate; NaN
    -- sorts above every number) is left out: ST_Extent over it loses the
    -- other rows' sides (one NaN point among points 10° to 59° east gave
    -- the box of a single point at 170° west), and a map asks for no tile
    -- outside the bounds.
    WHERE ST_XMin(e.box) > '-Infinity'::float8 AND ST_XMax(e.box) < 'Infinity'::float8
      AND ST_YMin(e.box) > '-Infinity'::float8 AND ST_YMax(e.box) < 'Infinity'::float8
) e
WHERE b IS NOT NULL
