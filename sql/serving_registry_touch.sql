-- Mark a builder's storage of one layer current: `geotoll prepare` found
-- its source and settings unchanged (its age restarts from now).
--   $1  layer    $2  builder
UPDATE geotoll_serving.storage
SET checked_at = now()
WHERE layer = $1::text AND builder = $2::text
