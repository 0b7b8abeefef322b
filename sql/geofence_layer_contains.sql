-- The features of a polygon layer that contain a point
-- (GET /geofence/contains?layer=…): their source ids and properties, in id
-- order, without geometry (a country or a district is drawn by its tiles
-- or bbox; the answer of a point stays small whatever the polygons hold).
--
-- Template fields (double braces) are identifiers from the layer catalog
-- and the serving registry, quoted with pgx.Identifier when the layer's
-- storage is read (never request text); .Mercator: the pieces are in
-- EPSG:3857 (a tile layer's geometry), the point is transformed to them.
-- Everything else is bound:
--   $1 longitude, $2 latitude (degrees, EPSG:4326)   $3 cap (LIMIT)
--
-- At most $3 + 1 rows: the caller reports an answer with more than $3 as
-- truncated. The relation is the layer's pieces or its table (see
-- geofence_layer_check.sql); DISTINCT ON answers a source id whose seam the
-- point is on once.
SELECT n.id,
       (SELECT to_jsonb(p) FROM (SELECT {{range $i, $p := .Props}}{{if $i}}, {{end}}n.{{$p.Alias}} AS {{$p.Col}}{{end}}) AS p) AS properties
FROM (
    SELECT DISTINCT ON (t.{{.ID}}) t.{{.ID}}::bigint AS id{{range .Props}},
           t.{{.Col}} AS {{.Alias}}{{end}}
    FROM {{.Table}} AS t
    WHERE ST_Covers(t.{{.Geom}}, {{if .Mercator}}ST_Transform({{end}}ST_SetSRID(ST_MakePoint($1::float8, $2::float8), 4326){{if .Mercator}}, 3857){{end}})
      AND t.{{.ID}} IS NOT NULL -- an answer names its features by id
    ORDER BY t.{{.ID}}
) AS n
ORDER BY n.id
LIMIT $3::int + 1
