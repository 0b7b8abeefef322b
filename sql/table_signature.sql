-- The change detector of a relation: its row count, the newest
-- transaction id that wrote one of its rows, and a checksum of the ids
-- that wrote its rows (the sum of their hashes). Any committed change
-- alters the multiset of those ids: an INSERT adds one, a DELETE takes one
-- away, an UPDATE replaces the id of the version it replaces with its own
-- (never the same: a transaction sees its own versions only). The newest
-- id alone does not tell every change: a transaction takes its id at its
-- first write, not at its commit, so an UPDATE committed after a newer
-- transaction's write leaves the newest id and the count as they were;
-- the checksum moves (a change the detector could miss needs a
-- collision of the hashes' sums). Tables, partitioned tables and
-- materialized views have xmin; a view or foreign table has not (.XMin
-- false): its count alone is read, and package serving rebuilds it every
-- run (package density builds its model every refresh).
--
-- Template fields, quoted with pgx.Identifier: .Table the relation;
-- .XMin read xmin (else 0, 0). No parameters. xmin is a 32-bit id: read
-- through text as a number.
SELECT count(*)::bigint,
       {{if .XMin}}coalesce(max(x.id), 0){{else}}0{{end}}::bigint,
       {{if .XMin}}coalesce(sum(hashint8(x.id)), 0){{else}}0{{end}}::bigint
FROM {{.Table}} AS t{{if .XMin}},
     LATERAL (SELECT t.xmin::text::bigint AS id) AS x{{end}}
