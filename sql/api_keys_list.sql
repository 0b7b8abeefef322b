-- Every API key, revoked ones included, oldest first (geotoll keys list).
SELECT id, name, tier, admin, key_prefix, created_at, revoked_at
FROM geotoll.api_keys
ORDER BY id
