-- The points layer, built under a loading name and swapped in by swap.sql.
-- Rows arrive by COPY (id … population, geom as EWKB); geom_3857 is what
-- tile layers draw, geom what geofence layers search.
DROP TABLE IF EXISTS {{q .Schema}}.{{q .Table "_load"}};
CREATE TABLE {{q .Schema}}.{{q .Table "_load"}} (
    id         bigint NOT NULL,
    name       text   NOT NULL,
    kind       text   NOT NULL,
    city       text   NOT NULL,
    country    text   NOT NULL,
    rank       int    NOT NULL,
    population int    NOT NULL,
    geom       geometry(Point, 4326) NOT NULL,
    geom_3857  geometry(Point, 3857) GENERATED ALWAYS AS (ST_Transform(geom, 3857)) STORED
);
