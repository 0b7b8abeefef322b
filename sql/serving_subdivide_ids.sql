-- Whether a layer's id column identifies its rows, as the pieces need:
-- tiles join a row's pieces back into one feature by id, so rows sharing
-- an id, or all rows without one (NULL), would be drawn as one feature
-- where the table draws each (package serving refuses to build pieces
-- then). Rows without a geometry are left out: they are neither cut nor
-- drawn.
--
-- Template fields (double braces), quoted with pgx.Identifier:
--   .Source   the layer's table     .Geom  its geometry column
--   .ID       the id column
-- Bound:
--   $1  the table, quoted (pgx.Identifier.Sanitize), as text
--   $2  the id column's name
-- The catalog answers when it can, without reading a row: a NOT NULL
-- column holds no NULL, and one that is the whole key of a valid unique
-- index without a predicate repeats no id (a primary key is both). Only
-- otherwise is the table read (each uncorrelated EXISTS is an InitPlan,
-- run only if its CASE branch is reached).
-- Result: one row (nulls bool, repeated bool).
WITH col AS (
    SELECT a.attnotnull AS not_null,
           EXISTS (SELECT 1 FROM pg_index AS i
                   WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
                     AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum) AS unique_key
    FROM pg_attribute AS a
    WHERE a.attrelid = to_regclass($1::text) AND a.attname = $2::text AND NOT a.attisdropped
)
SELECT CASE WHEN coalesce((SELECT col.not_null FROM col), false) THEN false
            ELSE EXISTS (SELECT 1 FROM {{.Source}} AS t
                         WHERE t.{{.ID}} IS NULL AND t.{{.Geom}} IS NOT NULL) END,
       CASE WHEN coalesce((SELECT col.unique_key FROM col), false) THEN false
            ELSE EXISTS (SELECT 1 FROM {{.Source}} AS t
                         WHERE t.{{.ID}} IS NOT NULL AND t.{{.Geom}} IS NOT NULL
                         GROUP BY t.{{.ID}}
                         HAVING count(*) > 1) END
