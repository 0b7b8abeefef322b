-- Lock a fence for a conditional write (PUT or DELETE with If-Match or
-- If-None-Match) and read its revision, in the write's transaction: the
-- conditions are checked against it, and no other write of the fence can
-- come between the check and the write, which waits for the lock (a write
-- that waited reads the revision its predecessor committed).
--   $1 id
-- No row when the fence does not exist.
SELECT revision FROM geotoll.geofences WHERE id = $1::bigint FOR UPDATE
