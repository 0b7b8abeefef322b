-- Demo schema: the tables geotoll serves out of the box.
-- +goose Up
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE SCHEMA IF NOT EXISTS geotoll;

-- Points clustered around real cities (dense cores, sparse edges).
CREATE TABLE geotoll.places (
    id        bigint PRIMARY KEY,
    name      text   NOT NULL,
    kind      text   NOT NULL,
    city      text   NOT NULL,
    rank      int    NOT NULL,
    geom      geometry(Point, 4326) NOT NULL,
    geom_3857 geometry(Point, 3857) GENERATED ALWAYS AS (ST_Transform(geom, 3857)) STORED
);
CREATE INDEX places_geom_3857_gist ON geotoll.places USING gist (geom_3857);
CREATE INDEX places_geom_gist ON geotoll.places USING gist (geom);

-- A polygon layer: a grid of districts around each city.
CREATE TABLE geotoll.districts (
    id         bigint PRIMARY KEY,
    name       text   NOT NULL,
    city       text   NOT NULL,
    population int    NOT NULL,
    geom       geometry(Polygon, 4326) NOT NULL,
    geom_3857  geometry(Polygon, 3857) GENERATED ALWAYS AS (ST_Transform(geom, 3857)) STORED
);
CREATE INDEX districts_geom_3857_gist ON geotoll.districts USING gist (geom_3857);

-- Geofences that fleet trackers test positions against.
CREATE TABLE geotoll.geofences (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL,
    kind       text NOT NULL DEFAULT 'zone',
    geom       geometry(MultiPolygon, 4326) NOT NULL CHECK (ST_IsValid(geom)),
    geom_3857  geometry(MultiPolygon, 3857) GENERATED ALWAYS AS (ST_Transform(geom, 3857)) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX geofences_geom_gist ON geotoll.geofences USING gist (geom);
CREATE INDEX geofences_geom_3857_gist ON geotoll.geofences USING gist (geom_3857);

-- +goose Down
DROP SCHEMA geotoll CASCADE;
