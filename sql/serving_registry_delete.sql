-- Forget a builder's storage of one layer, in the transaction that swaps
-- its replacement in (or drops it); returns the relations it named, which
-- the caller drops.
--   $1  layer    $2  builder
DELETE FROM geotoll_serving.storage
WHERE layer = $1::text AND builder = $2::text
RETURNING relation
