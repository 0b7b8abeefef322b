-- Geofence queries (package geofence) and the role that writes fences.
--
-- Indexes. The within query filters with
--   ST_DWithin(geom::geography, point::geography, radius_m)
-- which measures metres on the spheroid; only an index on the same
-- expression, (geom::geography), can serve it (an index on geom would need
-- the radius in degrees: the degrees-as-metres bug). The same index orders
-- nearest-first (geography <->). The bbox query filters geom (4326) with &&,
-- which districts had no index for (its tiles use geom_3857).
--
-- Plain CREATE INDEX: goose runs a migration in one transaction, where
-- CONCURRENTLY is not allowed. On the demo tables it takes a few seconds.
--
-- The writer role. Fence admin writes through geotoll_fence_writer, which can
-- read and write geotoll.geofences (and draw ids from its sequence) and
-- nothing else: no other table, no DDL. Like geotoll_reader it carries its
-- own ceilings, so a client that bypasses geotoll with it is still bounded.
-- Roles are cluster-wide: created once, granted per database. It has no
-- password here: set one with ALTER ROLE geotoll_fence_writer PASSWORD …
-- +goose Up
CREATE INDEX IF NOT EXISTS places_geom_geog_gist ON geotoll.places USING gist ((geom::geography));
CREATE INDEX IF NOT EXISTS districts_geom_geog_gist ON geotoll.districts USING gist ((geom::geography));
CREATE INDEX IF NOT EXISTS districts_geom_gist ON geotoll.districts USING gist (geom);
CREATE INDEX IF NOT EXISTS geofences_geom_geog_gist ON geotoll.geofences USING gist ((geom::geography));
ANALYZE geotoll.places, geotoll.districts, geotoll.geofences;

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geotoll_fence_writer') THEN
        CREATE ROLE geotoll_fence_writer LOGIN NOINHERIT;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER ROLE geotoll_fence_writer SET statement_timeout = '5s';
ALTER ROLE geotoll_fence_writer SET lock_timeout = '2s';
ALTER ROLE geotoll_fence_writer SET idle_in_transaction_session_timeout = '10s';
ALTER ROLE geotoll_fence_writer CONNECTION LIMIT 20;
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO geotoll_fence_writer', current_database());
END
$$;
-- +goose StatementEnd
GRANT USAGE ON SCHEMA geotoll TO geotoll_fence_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON geotoll.geofences TO geotoll_fence_writer;
GRANT USAGE ON SEQUENCE geotoll.geofences_id_seq TO geotoll_fence_writer;

-- +goose Down
REVOKE USAGE ON SEQUENCE geotoll.geofences_id_seq FROM geotoll_fence_writer;
REVOKE SELECT, INSERT, UPDATE, DELETE ON geotoll.geofences FROM geotoll_fence_writer;
REVOKE USAGE ON SCHEMA geotoll FROM geotoll_fence_writer;
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM geotoll_fence_writer', current_database());
END
$$;
-- +goose StatementEnd
DROP INDEX IF EXISTS geotoll.geofences_geom_geog_gist;
DROP INDEX IF EXISTS geotoll.districts_geom_gist;
DROP INDEX IF EXISTS geotoll.districts_geom_geog_gist;
DROP INDEX IF EXISTS geotoll.places_geom_geog_gist;
