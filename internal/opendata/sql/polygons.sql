-- A polygon layer (countries, countries_simple), built under a loading
-- name: geometries as-is, made MultiPolygon; invalid ones are kept invalid
-- and flagged, with their vertex count.
DROP TABLE IF EXISTS {{q .Schema}}.{{q .Table "_load"}};
CREATE TABLE {{q .Schema}}.{{q .Table "_load"}} (
    id        int     NOT NULL,
    a3        text    NOT NULL,
    vertices  int     NOT NULL,
    valid     boolean NOT NULL,
    geom      geometry(MultiPolygon, 4326) NOT NULL,
    geom_3857 geometry(MultiPolygon, 3857) GENERATED ALWAYS AS (ST_Transform(geom, 3857)) STORED
);
