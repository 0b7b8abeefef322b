-- The role geotoll serves reads with. Its privileges hold for whoever uses
-- it — geotoll or anyone who bypasses it: SELECT on the served tables only,
-- at most 100 connections. The timeouts and read-only flag below are the
-- role's session defaults: a session may SET them away (PostgreSQL cannot
-- forbid that for user-settable parameters), so they bound careless
-- clients, not hostile ones. geotoll sets its own, tighter SET LOCAL
-- statement_timeout in a READ ONLY transaction for every query it runs.
--
-- Roles are cluster-wide; the role is created once and granted per database.
-- It has no password here: set one with ALTER ROLE geotoll_reader PASSWORD …
-- (the dev cluster of `make run` trusts loopback connections).
-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geotoll_reader') THEN
        CREATE ROLE geotoll_reader LOGIN NOINHERIT;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER ROLE geotoll_reader SET statement_timeout = '5s';
ALTER ROLE geotoll_reader SET lock_timeout = '1s';
ALTER ROLE geotoll_reader SET idle_in_transaction_session_timeout = '10s';
ALTER ROLE geotoll_reader SET default_transaction_read_only = on;
ALTER ROLE geotoll_reader CONNECTION LIMIT 100;
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO geotoll_reader', current_database());
END
$$;
-- +goose StatementEnd
GRANT USAGE ON SCHEMA geotoll TO geotoll_reader;
GRANT SELECT ON geotoll.places, geotoll.districts, geotoll.geofences TO geotoll_reader;

-- +goose Down
REVOKE SELECT ON geotoll.places, geotoll.districts, geotoll.geofences FROM geotoll_reader;
REVOKE USAGE ON SCHEMA geotoll FROM geotoll_reader;
