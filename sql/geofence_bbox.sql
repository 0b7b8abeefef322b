-- Features of one layer that intersect a lon/lat box (GET /geofence/bbox).
--
-- Template fields (double braces) are identifiers from the layer catalog,
-- quoted with pgx.Identifier and rendered once at start-up. Everything else
-- is bound:
--   $1 west, $2 south, $3 east, $4 north (degrees, EPSG:4326)
--   $5 west, $6 east of the second part of a box that crosses the
--      antimeridian, split at it; both NULL otherwise (and the second test
--      is NULL: it matches nothing)
--   $7 feature cap (LIMIT)
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
SELECT n.id,
       ST_AsGeoJSON(n.geom) AS geometry,
       (SELECT to_jsonb(p) FROM (SELECT {{range $i, $p := .Props}}{{if $i}}, {{end}}n.{{$p.Alias}} AS {{$p.Col}}{{end}}) AS p) AS properties
FROM (
    SELECT b.*
    FROM (
        SELECT t.{{.ID}} AS id,
               t.{{.Geom}} AS geom{{range .Props}},
               t.{{.Col}} AS {{.Alias}}{{end}}
        FROM {{.Table}} AS t
        WHERE ST_Intersects(t.{{.Geom}}, ST_SetSRID(ST_MakeBox2D(ST_Point($1::float8, $2::float8), ST_Point($3::float8, $4::float8))::geometry, 4326))
           OR ST_Intersects(t.{{.Geom}}, ST_SetSRID(ST_MakeBox2D(ST_Point($5::float8, $2::float8), ST_Point($6::float8, $4::float8))::geometry, 4326))
        OFFSET 0
    ) AS b
    ORDER BY b.id
    LIMIT $7::int
) AS n
ORDER BY n.id
