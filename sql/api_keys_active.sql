-- Every key that is not revoked: the server's in-memory key ring.
SELECT id, name, tier, key_hash, admin
FROM geotoll.api_keys
WHERE revoked_at IS NULL
