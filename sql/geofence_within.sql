-- Features of one layer within a radius of a point, nearest first
-- (GET /geofence/within).
--
-- Template fields (double braces) are identifiers from the layer catalog,
-- quoted with pgx.Identifier and rendered once at start-up. Everything else
-- is bound:
--   $1 longitude, $2 latitude (degrees, EPSG:4326)
--   $3 radius in metres on the ground   $4 feature cap (LIMIT)
--   $5 cap on positions in the whole answer
--
-- Geography-correct: ST_DWithin and ST_Distance on geography measure metres
-- on the WGS 84 spheroid, so 5 km is 5 km at the equator and at 70°N. The
-- filter is written on (geom::geography), the exact expression of the GiST
-- index the migrations create, so the planner can use it. The inner query
-- keeps only the nearest $4 rows; the outer one turns just those into
-- GeoJSON. distance_m is the spheroid distance the rows are ordered by.
-- The filter's radius is at least 1 mm: the index's test of a radius of 0
-- misses what touches the point where longitudes meet (at ±180°, at a
-- pole), which ST_DWithin on the row itself finds.
--
-- The answer carries, nearest first, the rows whose positions
-- (ST_NPoints), with those of the rows answered before them, stay within
-- $5: a row whose own positions pass $5 is left out alone, and the answer
-- ends before the first other row that would take it past $5. Rows left
-- out come without their geometry or properties, which the caller drops,
-- reporting the answer as truncated. Geometries left out are never
-- rendered as GeoJSON, so an answer costs at most $5 positions of
-- rendering and bytes, whatever the rows hold.
SELECT n.id,
       CASE WHEN n.np <= $5::bigint AND n.total <= $5::bigint THEN ST_AsGeoJSON(n.geom) END AS geometry,
       CASE WHEN n.np <= $5::bigint AND n.total <= $5::bigint THEN
           (SELECT to_jsonb(p) FROM (SELECT {{range $i, $p := .Props}}{{if $i}}, {{end}}n.{{$p.Alias}} AS {{$p.Col}}{{end}}) AS p)
           || jsonb_build_object('distance_m', n.distance_m) END AS properties
FROM (
  SELECT s.*, sum(CASE WHEN s.np <= $5::bigint THEN s.np ELSE 0 END)
                  OVER (ORDER BY s.distance_m, s.id ROWS UNBOUNDED PRECEDING)::bigint AS total
  FROM (
    SELECT l.*, ST_NPoints(l.geom) AS np
    FROM (
      SELECT t.{{.ID}} AS id,
             t.{{.Geom}} AS geom,
             ST_Distance(t.{{.Geom}}::geography, ST_MakePoint($1::float8, $2::float8)::geography) AS distance_m{{range .Props}},
             t.{{.Col}} AS {{.Alias}}{{end}}
      FROM {{.Table}} AS t
      WHERE ST_DWithin(t.{{.Geom}}::geography, ST_MakePoint($1::float8, $2::float8)::geography, greatest($3::float8, 0.001))
        AND t.{{.ID}} IS NOT NULL -- an answer names its features by id
      ORDER BY distance_m, id
      LIMIT $4::int
    ) AS l
  ) AS s
) AS n
ORDER BY n.distance_m, n.id
