-- Bootstrap for the dev/test PostGIS: the `geotoll` owner role and the
-- `geotoll` / `geotoll_test` databases with the extensions the app and the
-- tests need. Runs as the `postgres` superuser through psql:
--   * by the postgis/postgis image on first start (docker-compose.yml mounts it
--     into /docker-entrypoint-initdb.d/);
--   * by `scripts/services.sh up` against its private cluster, on every call.
-- So every statement is idempotent.
--
-- The role that serves reads (geotoll_reader) is NOT created here: the
-- migrations create it, with its role-level timeouts and read-only default.

\set ON_ERROR_STOP on

-- Owner of the application databases; runs migrations and seeding. CREATEROLE
-- lets the migrations create the read-only serving role. Not a superuser.
SELECT 'CREATE ROLE geotoll LOGIN CREATEROLE'
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'geotoll')
\gexec
ALTER ROLE geotoll LOGIN CREATEROLE NOSUPERUSER;

-- Tests inspect pg_stat_activity / pg_stat_statements and cancel backends.
GRANT pg_read_all_stats, pg_signal_backend TO geotoll;

SELECT 'CREATE DATABASE geotoll OWNER geotoll'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'geotoll')
\gexec
SELECT 'CREATE DATABASE geotoll_test OWNER geotoll'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'geotoll_test')
\gexec
ALTER DATABASE geotoll OWNER TO geotoll;
ALTER DATABASE geotoll_test OWNER TO geotoll;

-- Extensions are not trusted, so the superuser creates them in each database.
\c geotoll
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

\c geotoll_test
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
