-- Features of one layer that intersect a lon/lat box (GET /geofence/bbox).
--
-- Template fields (double braces) are identifiers from the layer catalog,
-- quoted with pgx.Identifier and rendered once at start-up. Everything else
-- is bound:
--   $1 west, $2 south, $3 east, $4 north (degrees, EPSG:4326)
--   $5 west, $6 east of the second part of a box that crosses the
--      antimeridian, split at it; both NULL otherwise (and the second test
--      is NULL: it matches nothing)
--   $7 feature cap (LIMIT)   $8 cap on positions in the whole answer
--
-- The box is planar in lon/lat: its edges are meridians and parallels, as a
-- map draws them. A box of no width or no height is the line (or point) it
-- is: box2d's geometry is that, where ST_MakeEnvelope would make a flat,
-- invalid polygon that ST_Intersects misses features on. ST_Intersects brings its own && test, which the GiST
-- index on the geometry column serves (a BitmapOr over the two parts).
-- Features come in id order, so a capped answer is stable. OFFSET 0 keeps
-- the box's scan apart from the ORDER BY and LIMIT: without it, for a small
-- limit the planner may walk the id index and test row after row until
-- enough are in the box — tens of thousands of rows for a sparse box, where
-- the price counts the features in the box. So the box's features are read
-- through the GiST index and the first by id kept (a top-N sort).
--
-- The answer carries, in id order, the rows whose positions (ST_NPoints),
-- with those of the rows answered before them, stay within $8: a row
-- whose own positions pass $8 is left out alone, and the answer ends
-- before the first other row that would take it past $8. Rows left out
-- come without their geometry or properties, which the caller drops,
-- reporting the answer as truncated. Geometries left out are never
-- rendered.
SELECT n.id,
       CASE WHEN n.np <= $8::bigint AND n.total <= $8::bigint THEN ST_AsGeoJSON(n.geom) END AS geometry,
       CASE WHEN n.np <= $8::bigint AND n.total <= $8::bigint THEN
           (SELECT to_jsonb(p) FROM (SELECT {{range $i, $p := .Props}}{{if $i}}, {{end}}n.{{$p.Alias}} AS {{$p.Col}}{{end}}) AS p) END AS properties
FROM (
  SELECT c.*, sum(CASE WHEN c.np <= $8::bigint THEN c.np ELSE 0 END)
                  OVER (ORDER BY c.id ROWS UNBOUNDED PRECEDING)::bigint AS total
  FROM (
    SELECT l.*, ST_NPoints(l.geom) AS np
    FROM (
      SELECT b.*
      FROM (
          SELECT t.{{.ID}} AS id,
                 t.{{.Geom}} AS geom{{range .Props}},
                 t.{{.Col}} AS {{.Alias}}{{end}}
          FROM {{.Table}} AS t
          WHERE (ST_Intersects(t.{{.Geom}}, ST_SetSRID(ST_MakeBox2D(ST_Point($1::float8, $2::float8), ST_Point($3::float8, $4::float8))::geometry, 4326))
                 OR ST_Intersects(t.{{.Geom}}, ST_SetSRID(ST_MakeBox2D(ST_Point($5::float8, $2::float8), ST_Point($6::float8, $4::float8))::geometry, 4326)))
            AND t.{{.ID}} IS NOT NULL -- an answer names its features by id
          OFFSET 0
      ) AS b
      ORDER BY b.id
      LIMIT $7::int
    ) AS l
  ) AS c
) AS n
ORDER BY n.id
