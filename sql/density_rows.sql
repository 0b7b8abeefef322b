-- The planner's estimate of a relation's rows (package density decides from
-- it whether to sample): EXPLAIN plans the scan and runs nothing.
-- Template field: the relation, quoted with pgx.Identifier. No parameters.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {{.Table}}
