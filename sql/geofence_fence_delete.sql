-- Delete a fence (DELETE /geofences/{id}).   $1 id
DELETE FROM geotoll.geofences WHERE id = $1::bigint
