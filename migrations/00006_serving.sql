-- Serving storage: relations derived from the layers' tables that tiles
-- read instead of them (per-zoom overviews today), built and kept current
-- by `geotoll prepare` as the schema owner (the role that runs this
-- migration), and read by geotoll_reader.
--
-- The registry, geotoll_serving.storage, has one row per built relation.
-- `serve` reads it at start-up and on every refresh to learn which
-- relation each zoom of a layer reads; `prepare` replaces a layer's rows
-- in the transaction that builds its new tables. Columns:
--   layer            the layer's name (configuration)
--   builder          what built the relation ("overview")
--   relation         its table in this schema (unqualified)
--   zoom_min/max     the tile zooms it serves (both NULL: none, e.g.
--                    storage read by other queries than tiles)
--   geometry_column, srid, geometry_kind   its geometry (point, line,
--                    polygon or mixed)
--   columns          the layer's source columns it carries, same names
--   params           what was built, builder-specific JSON (tiles.StorageParams)
--   source_table     the layer's table, quoted; source_geometry_column
--   source_rows      rows of the source when built
--   source_signature the source's change detector when built (row count
--                    and newest xmin, see package serving); '' when the
--                    source has none (a view): rebuilt on every run
--   rows             rows of the relation      build_ms  how long it took
--   built_at         when it was built
--   checked_at       when prepare last found it current
-- +goose Up
CREATE SCHEMA IF NOT EXISTS geotoll_serving;
CREATE TABLE geotoll_serving.storage (
    layer                  text        NOT NULL,
    builder                text        NOT NULL,
    relation               text        NOT NULL,
    zoom_min               smallint,
    zoom_max               smallint,
    geometry_column        text        NOT NULL,
    srid                   int         NOT NULL,
    geometry_kind          text        NOT NULL CHECK (geometry_kind IN ('point', 'line', 'polygon', 'mixed')),
    columns                text[]      NOT NULL,
    params                 jsonb       NOT NULL,
    source_table           text        NOT NULL,
    source_geometry_column text        NOT NULL,
    source_rows            bigint      NOT NULL,
    source_signature       text        NOT NULL,
    rows                   bigint      NOT NULL,
    build_ms               bigint      NOT NULL,
    built_at               timestamptz NOT NULL,
    checked_at             timestamptz NOT NULL,
    PRIMARY KEY (layer, builder, relation),
    UNIQUE (relation),
    CHECK ((zoom_min IS NULL) = (zoom_max IS NULL)),
    CHECK (zoom_min BETWEEN 0 AND 22 AND zoom_max BETWEEN zoom_min AND 22)
);
GRANT USAGE ON SCHEMA geotoll_serving TO geotoll_reader;
GRANT SELECT ON geotoll_serving.storage TO geotoll_reader;
-- Tables prepare creates later are readable too (prepare also grants them
-- explicitly, in case it runs as another role than this migration).
ALTER DEFAULT PRIVILEGES IN SCHEMA geotoll_serving GRANT SELECT ON TABLES TO geotoll_reader;

-- +goose Down
ALTER DEFAULT PRIVILEGES IN SCHEMA geotoll_serving REVOKE SELECT ON TABLES FROM geotoll_reader;
DROP SCHEMA geotoll_serving CASCADE;
