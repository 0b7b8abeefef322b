-- Which of the relations named exist no more: registry rows whose
-- relation was dropped by hand, or lost by a restore, name nothing a
-- server can read. `geotoll prepare` finds such storage not current and
-- builds it again (a tile read that finds a relation of its storage
-- missing reads the layer's table meanwhile: tiles' storageGone).
--   $1  relation names (geotoll_serving.storage.relation), text[]
--   $2  their schema (tiles.ServingSchema)
-- Result: the names whose relation does not exist, one row each
-- (to_regclass of the quoted name is NULL).
SELECT r.name
FROM unnest($1::text[]) AS r(name)
WHERE to_regclass(quote_ident($2::text) || '.' || quote_ident(r.name)) IS NULL
