-- The change detector of a relation: its row count and the newest
-- transaction id that wrote one of its rows. An INSERT or UPDATE raises
-- the newest xmin (a row written later carries a later id) and a DELETE
-- lowers the count, so any committed change alters the pair (a change
-- the detector could miss needs a transaction-id wraparound back to the
-- same pair). Tables, partitioned tables and materialized views have
-- xmin; a view or foreign table has not (.XMin false): its count alone is
-- read, and package serving rebuilds it every run (package density builds
-- its model every refresh).
--
-- Template fields, quoted with pgx.Identifier: .Table the relation;
-- .XMin read xmin (else 0). No parameters. xmin is a 32-bit id: read
-- through text as a number.
SELECT count(*)::bigint,
       {{if .XMin}}coalesce(max(t.xmin::text::bigint), 0){{else}}0{{end}}::bigint
FROM {{.Table}} AS t
