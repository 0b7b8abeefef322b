-- The types of a layer's properties, for TileJSON's vector_layers.fields
-- (a domain over numeric is a Number: the tiles cast it, layer_numeric.sql).
--   $1  the table, as quoted identifier text (schema."table")
--   $2  the property columns
SELECT a.attname::text,
       CASE
           WHEN a.atttypid = ANY ('{int2,int4,int8,float4,float8,numeric,oid}'::regtype[])
                OR (SELECT ty.typbasetype = 'numeric'::regtype FROM pg_type AS ty WHERE ty.oid = a.atttypid) THEN 'Number'
           WHEN a.atttypid = 'bool'::regtype THEN 'Boolean'
           ELSE 'String'
       END
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1::text)
  AND a.attnum > 0
  AND NOT a.attisdropped
  AND a.attname = ANY ($2::text[])
