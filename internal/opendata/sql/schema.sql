-- The schema and the bookkeeping table that makes loading idempotent: one
-- row per table, with the source and parameters it was built from.
-- Template: {{q .Schema}} quotes an identifier with pgx.Identifier; names
-- come from the loader's options, never from a request.
CREATE SCHEMA IF NOT EXISTS {{q .Schema}};
CREATE TABLE IF NOT EXISTS {{q .Schema}}.sources (
    tbl       text PRIMARY KEY,
    source    text NOT NULL,
    params    text NOT NULL,
    rows      bigint NOT NULL,
    loaded_at timestamptz NOT NULL DEFAULT now()
);
