-- Fills the simplified copy from the loaded countries.
-- Douglas-Peucker per ring (ST_Simplify, keeping rings that collapse, so
-- no country disappears): seconds, where ST_SimplifyPreserveTopology takes
-- minutes on these borders and keeps three times the vertices.
-- Parameter: $1 tolerance in degrees.
INSERT INTO {{q .Schema}}.{{q .Table "_load"}} (id, a3, vertices, valid, geom)
SELECT id, a3, ST_NPoints(g), ST_IsValid(g), g
FROM (SELECT id, a3, ST_Multi(ST_Simplify(geom, $1::float8, true)) AS g
      FROM {{q .Schema}}.countries) AS s;
