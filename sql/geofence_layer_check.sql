-- Batch check on a polygon layer (POST /geofence/check?layer=…): for
-- every point, the layer's features that contain it, in ONE statement.
--
-- Template fields (double braces) are identifiers from the layer catalog
-- and the serving registry, quoted with pgx.Identifier when the layer's
-- storage is read (never request text); .Mercator: the pieces are in
-- EPSG:3857 (a tile layer's geometry), the point is transformed to them.
-- Everything else is bound:
--   $1 longitudes, $2 latitudes (float8[], same length, degrees)
--
-- Rows are (ordinal of the point, 1-based; id of a feature containing
-- it). The relation is the layer's pieces (subdivided storage built by
-- `geotoll prepare`: the source's id and properties, pieces of a bounded
-- number of vertices) or, without them, the layer's table. A point on the
-- seam between two pieces of one feature is covered by both: DISTINCT
-- answers the source id once. Same boundary rule as the fences: ST_Covers.
SELECT DISTINCT p.ord, t.{{.ID}}::bigint AS id
FROM unnest($1::float8[], $2::float8[]) WITH ORDINALITY AS p(lng, lat, ord)
JOIN {{.Table}} AS t
  ON ST_Covers(t.{{.Geom}}, {{if .Mercator}}ST_Transform({{end}}ST_SetSRID(ST_MakePoint(p.lng, p.lat), 4326){{if .Mercator}}, 3857){{end}})
 AND t.{{.ID}} IS NOT NULL -- an answer names its features by id
ORDER BY p.ord, id
