-- The change detector of a relation: its row count, the newest
-- transaction id that wrote one of its rows, a checksum of the ids that
-- wrote its rows (the sum of their hashes), and a fingerprint of its
-- columns' definitions. Any committed change of a row alters the
-- multiset of those ids: an INSERT adds one, a DELETE takes one away, an
-- UPDATE replaces the id of the version it replaces with its own (never
-- the same: a transaction sees its own versions only). The newest id
-- alone does not tell every change: a transaction takes its id at its
-- first write, not at its commit, so an UPDATE committed after a newer
-- transaction's write leaves the newest id and the count as they were;
-- the checksum moves (a change the detector could miss needs a
-- collision of the hashes' sums).
-- Some schema changes alter what the rows hold without writing one, so
-- that no id moves: a column renamed (two swapped: RENAME a TO tmp,
-- b TO a, tmp TO b), a column dropped and added again under its name
-- (NULL, or a constant DEFAULT stored once in the catalog), a type
-- changed to one binary-coercible (varchar(n) to text). The fingerprint
-- moves with them: the md5 (its first 16 hex digits) of every live
-- column's number, name, type, modifier, collation and generation, in
-- column order, from pg_attribute. A column added takes a number never
-- used before, so its missing value (attmissingval) need not be read —
-- and must not be: it prints by the session's settings (TimeZone,
-- DateStyle…), and VACUUM FULL clears it without changing a value. A
-- change that rewrites the table (most ALTER ... TYPE, a volatile
-- DEFAULT) gives every row a new id anyway. A column's DEFAULT
-- expression is left out: it fills only rows written later, which move
-- the ids. The fingerprint is the whole relation's, not only the columns
-- a reader copies: a change to any column counts. Not seen: an enum
-- label renamed (ALTER TYPE ... RENAME VALUE), and a column change in a
-- partition or inheritance child but not in the relation itself.
-- Tables, partitioned tables and materialized views have xmin; a view or
-- foreign table has not (.XMin false): its count alone is read, and
-- package serving rebuilds it every run (package density builds its
-- model every refresh).
--
-- Template fields, quoted with pgx.Identifier: .Table the relation;
-- .XMin read xmin and the fingerprint (else 0, 0, ''). xmin is a 32-bit
-- id: read through text as a number.
-- Bound (only with .XMin):
--   $1  .Table, as text (to_regclass resolves it as FROM does)
SELECT count(*)::bigint,
       {{if .XMin}}coalesce(max(x.id), 0){{else}}0{{end}}::bigint,
       {{if .XMin}}coalesce(sum(hashint8(x.id)), 0){{else}}0{{end}}::bigint,
       {{if .XMin}}(SELECT coalesce(left(md5(string_agg(
                        a.attnum::text || ' ' || quote_ident(a.attname) || ' ' || a.atttypid::text || ' ' ||
                        a.atttypmod::text || ' ' || a.attcollation::text || ' ' || a.attgenerated::text,
                        ',' ORDER BY a.attnum)), 16), '')
                    FROM pg_attribute AS a
                    WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped)
       {{- else}}''{{end}}::text
FROM {{.Table}} AS t{{if .XMin}},
     LATERAL (SELECT t.xmin::text::bigint AS id) AS x{{end}}
