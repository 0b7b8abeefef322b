-- One MVT layer for one tile.
--
-- Template fields (double braces) are identifiers from the layer catalog, quoted with
-- pgx.Identifier and rendered once at start-up (ID is empty for a layer served
-- without feature ids). Everything else is bound:
--   $1..$4  tile envelope in EPSG:3857 (xmin, ymin, xmax, ymax)
--   $5      extent (tile units)     $6  buffer (tile units)
--   $7      buffer in metres        $8  feature cap (LIMIT)
--   $9      MVT layer name
WITH env AS (
    SELECT ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, 3857) AS geom
),
feats AS (
    SELECT ST_AsMVTGeom({{.GeomExpr}}, env.geom, $5::int, $6::int, true) AS geom{{if .ID}},
           t.{{.ID}} AS id{{end}}{{range .Props}},
           t.{{.}}{{end}}
    FROM {{.Table}} AS t, env
    WHERE t.{{.Geom}} && {{.FilterExpr}}
    LIMIT $8::int
)
SELECT ST_AsMVT(feats.*, $9::text, $5::int, 'geom'{{if .ID}}, 'id'{{end}})
FROM feats
WHERE feats.geom IS NOT NULL
