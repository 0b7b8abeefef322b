-- Converts the GeoJSON copied into the temporary table countries_geojson
-- (id, a3, geojson) into the countries being loaded.
INSERT INTO {{q .Schema}}.{{q .Table "_load"}} (id, a3, vertices, valid, geom)
SELECT id, a3, ST_NPoints(g), ST_IsValid(g), g
FROM (SELECT id, a3, ST_Multi(ST_SetSRID(ST_GeomFromGeoJSON(geojson), 4326)) AS g
      FROM countries_geojson) AS s;
